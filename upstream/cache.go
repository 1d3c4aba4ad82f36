package upstream

import (
	"bytes"
	"hash/maphash"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/valyala/fasthttp"

	"flashgate/conf"
)

// Cache is one route's microcache in front of its pool: nginx proxy_cache
// with proxy_cache_lock and proxy_cache_use_stale updating error timeout.
//
// What is stored: the answer to a GET without Authorization (unless
// with_authorization), Range or a body, whose status is one of
// cacheableStatus, without Set-Cookie, whose Cache-Control has none of
// no-store, no-cache, private, and whose Vary is not "*". The origin's
// freshness lifetime — s-maxage, else max-age, else Expires minus Date (an
// invalid Expires is in the past) — shortens the route's ttl, never
// lengthens it, and the age the answer arrives with (the origin's Age plus
// the time it took to answer, when it sent an Age) is taken off; nothing
// left stores nothing, and a hit's Age counts from that age (RFC 9111
// §4.2). must-revalidate and proxy-revalidate forbid the stale answers. The request's own
// Cache-Control is not read: a client's no-cache must not let a flood
// through to the origin. The headers a Vary response lists become part of
// its key: the route's key then holds a marker naming them, and each
// variant is stored under the key plus their values. A key's header part
// and a Vary header are read as the origin reads them, every line
// comma-joined; a request naming a key's cookie twice bypasses the cache.
//
// Validators: the cache asks the origin for the full answer (its requests
// go without the client's If-* headers), and a client's If-None-Match (or
// If-Modified-Since) is answered 304 from a full 200 — stored, shared or
// fetched. A 304 is never stored nor shared.
//
// An unsafe request (not GET, HEAD, OPTIONS, TRACE) that the origin answers
// 2xx or 3xx drops the stored answers of its URL — every variant — and of
// its Location and Content-Location when they name the same host (RFC 9111
// §4.4). The operator's purge drops by route or key prefix (purge).
//
// A HEAD is answered from the GET's answer; a HEAD that misses goes to the
// origin and is not stored.
//
// One request per key at a time goes to the origin; the others wait for its
// answer, at most lock_timeout, then they are answered stale if a stale copy
// is within its window, else they go to the origin themselves (uncached).
// Waiters share the answer when it could be shared at all: anything stored,
// and also an origin error or a status not stored (500, 302) — a dead origin
// costs one request per key, not one per waiting shopper. An answer private
// to its request (Set-Cookie, private, no-store, no-cache, Vary: *) is not
// shared: each waiter then asks the origin.
//
// Within stale_while_revalidate after ttl, a request is answered from the
// stale copy and one background request refreshes it. Within stale_if_error
// after ttl, an origin failure (a 5xx of its own, or the edge's 502/504 for a
// refused connection or a timeout) is answered from the stale copy.
//
// Memory: ristretto (TinyLFU admission, sampled LFU eviction) bounds the
// bytes of bodies, headers and keys to max_bytes; an answer larger than an
// eighth of it is not stored. Admission may refuse a new key when the cache
// is full of more popular ones: that request's key stays a miss.
//
// A hit allocates nothing: the stored header is copied into the response's
// own buffers and the stored body is set without a copy.
//
// Every request is counted once by how it was answered, and every request
// the cache sends to the origin; ristretto's callbacks count evictions,
// refusals and what the store holds (cacheStats, read by
// Manager.EachCache for /metrics).
type Cache struct {
	cfg  conf.CacheConfig
	key  []keyPart
	life time.Duration // ttl + the longer stale window: how long ristretto keeps an answer
	// now is the freshness clock (unix ns), swapped in tests. ristretto's
	// own expiry runs on the wall clock, but only after life.
	now func() int64

	store atomic.Pointer[ristretto.Cache[[]byte, *entry]]
	// users counts the requests and background refreshes inside the cache:
	// ristretto's Close must not run beside a Get or Set (it closes the
	// channel a Set sends on), so a retired store is closed only at 0.
	users atomic.Int64

	mu      sync.Mutex
	flights map[string]*flight

	// imu guards byURL, the stored answers and markers by their url: what
	// an unsafe request drops (RFC 9111 §4.4) and a purge walks. Written on
	// the miss path and in ristretto's OnExit, never on a hit.
	imu   sync.Mutex
	byURL map[string][]*entry
	// waiting counts the requests waiting for a flight (tests await it).
	waiting atomic.Int64

	stats cacheStats
}

// cacheStats are a route cache's counters for /metrics (Manager.EachCache).
// Each is an atomic add where it happens: no lock, no allocation, on the
// hit path one add.
type cacheStats struct {
	requests [numCacheResults]atomic.Uint64 // by how they were answered (mark)
	origin   atomic.Uint64                  // requests the cache sent to the origin (toOrigin)
	evicted  atomic.Uint64                  // answers ristretto evicted to make room for another
	rejected atomic.Uint64                  // storable answers not stored: admission refused them, or ristretto's set buffer was full
	entries  atomic.Int64                   // answers and Vary markers in the store
	purged   atomic.Uint64                  // answers and markers dropped by an admin purge
	dropped  atomic.Uint64                  // answers and markers dropped by an unsafe request's success (RFC 9111 §4.4)
}

var (
	headerXCache = []byte("X-Cache")
	headerAge    = []byte("Age")
)

// cacheResult is how the cache answered a request: its X-Cache value and
// the result label of flashgate_cache_requests_total. Answers that do not
// touch the cache (not GET/HEAD, a body, Range, Authorization) are bypass.
type cacheResult uint8

const (
	resultHit cacheResult = iota
	resultMiss
	resultStale
	resultUpdating
	resultBypass
	numCacheResults
)

var xCacheValues = [numCacheResults][]byte{[]byte("HIT"), []byte("MISS"), []byte("STALE"), []byte("UPDATING"), []byte("BYPASS")}

// CacheResults are the result label values, in the order of
// CacheStats.Requests.
var CacheResults = [numCacheResults]string{"hit", "miss", "stale", "updating", "bypass"}

// cacheableStatus are the statuses stored (RFC 9110 §15.1's heuristically
// cacheable ones that a page or API answers with): 200, 203, 204, 300, 301,
// 308, 404, 410. 302, 307 and every 5xx are not: they are usually the
// answer of a moment.
func cacheableStatus(code int) bool {
	switch code {
	case 200, 203, 204, 300, 301, 308, 404, 410:
		return true
	}
	return false
}

// entry is one stored answer, immutable once built: hits from any number of
// goroutines read it.
type entry struct {
	key    []byte
	header fasthttp.ResponseHeader
	body   []byte
	// vary, on a marker entry (stored under the route's key), lists the
	// request headers the variants are keyed by; the marker has no answer.
	vary   []string
	marker bool
	// url is the key's method, host, path and query parts (appendURL):
	// the index an unsafe request and a purge find the entry by.
	url string
	// live: counted in the cache's entries; the one way out of the count
	// (Cache.left) clears it, so an entry leaves the count once.
	live atomic.Bool

	stored          int64 // unix ns, the base of Age
	freshUntil      int64
	revalidateUntil int64 // freshUntil + stale_while_revalidate
	errorUntil      int64 // freshUntil + stale_if_error
}

// flight is the one origin request for a key; waiters block on done and
// then read result (nil: go to the origin yourself) and how it was answered.
type flight struct {
	done   chan struct{}
	result *entry
	xc     cacheResult
}

type keyKind uint8

const (
	partMethod keyKind = iota
	partHost
	partPath
	partQuery
	partHeader
	partCookie
)

type keyPart struct {
	kind keyKind
	name string
}

// keyBuf is the per-request scratch a key is built in.
type keyBuf struct{ b []byte }

var keyBufPool = sync.Pool{New: func() any { return &keyBuf{b: make([]byte, 0, 256)} }}

var hashSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// newCache compiles a route's cache config (validated by conf). It starts
// nothing: start does, when its Set is activated.
func newCache(cfg conf.CacheConfig) *Cache {
	c := &Cache{
		cfg:     cfg,
		life:    cfg.TTL + max(cfg.StaleWhileRevalidate, cfg.StaleIfError),
		now:     func() int64 { return time.Now().UnixNano() },
		flights: map[string]*flight{},
		byURL:   map[string][]*entry{},
	}
	c.cfg.Key = append([]string(nil), cfg.Key...)
	for _, p := range cfg.Key {
		switch {
		case p == conf.KeyMethod:
			c.key = append(c.key, keyPart{kind: partMethod})
		case p == conf.KeyHost:
			c.key = append(c.key, keyPart{kind: partHost})
		case p == conf.KeyPath:
			c.key = append(c.key, keyPart{kind: partPath})
		case p == conf.KeyQuery:
			c.key = append(c.key, keyPart{kind: partQuery})
		case len(p) > len(conf.KeyHeaderPrefix) && p[:len(conf.KeyHeaderPrefix)] == conf.KeyHeaderPrefix:
			c.key = append(c.key, keyPart{kind: partHeader, name: p[len(conf.KeyHeaderPrefix):]})
		default:
			c.key = append(c.key, keyPart{kind: partCookie, name: p[len(conf.KeyCookiePrefix):]})
		}
	}
	return c
}

// sameConfig: a reload with an equal cache config keeps the stored answers.
func (c *Cache) sameConfig(cfg conf.CacheConfig) bool {
	a, b := c.cfg, cfg
	if len(a.Key) != len(b.Key) {
		return false
	}
	for i := range a.Key {
		if a.Key[i] != b.Key[i] {
			return false
		}
	}
	return a.TTL == b.TTL && a.StaleWhileRevalidate == b.StaleWhileRevalidate &&
		a.StaleIfError == b.StaleIfError && a.MaxBytes == b.MaxBytes &&
		a.LockTimeout == b.LockTimeout && a.WithAuthorization == b.WithAuthorization &&
		a.Public == b.Public && *a.XCache == *b.XCache
}

// start creates the store. ristretto runs a goroutine per cache, so it
// starts only when a Set goes live (Build starts nothing).
func (c *Cache) start() {
	if c.store.Load() != nil {
		return
	}
	// ristretto wants ten counters per item it may hold; items are guessed
	// at 1 KiB.
	counters := min(max(c.cfg.MaxBytes/1024*10, 10_000), 10_000_000)
	st, err := ristretto.NewCache(&ristretto.Config[[]byte, *entry]{
		NumCounters: counters,
		MaxCost:     c.cfg.MaxBytes,
		BufferItems: 64,
		// The key is a []byte: hashing it ourselves avoids ristretto's
		// conversion to an interface, which would allocate on every hit.
		KeyToHash: func(k []byte) (uint64, uint64) {
			return maphash.Bytes(hashSeeds[0], k), maphash.Bytes(hashSeeds[1], k)
		},
		IgnoreInternalCost: true,
		// Every way out of the store (admission refused, evicted,
		// expired, replaced by a newer answer) ends in OnExit. Evictions
		// for room are told from expiry by the expiration time: a victim
		// of admission carries none, an expired entry one in the past.
		OnEvict: func(it *ristretto.Item[*entry]) {
			if it.Expiration.IsZero() || it.Expiration.After(time.Now()) {
				c.stats.evicted.Add(1)
			}
		},
		OnReject: func(*ristretto.Item[*entry]) { c.stats.rejected.Add(1) },
		OnExit:   c.left,
	})
	if err != nil {
		// Only a config ristretto rejects (counters or cost not positive),
		// which conf's validation rules out.
		panic("upstream: cache: " + err.Error())
	}
	c.store.Store(st)
}

// retire takes the store out of use, then closes it once no request or
// refresh is inside; wg waits for that.
func (c *Cache) retire(wg *sync.WaitGroup) {
	st := c.store.Swap(nil)
	if st == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c.users.Load() > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		st.Close()
	}()
}

// serve answers ctx from the cache, or through pool and stores the answer.
func (c *Cache) serve(ctx *fasthttp.RequestCtx, pool *Pool, clientIP netip.Addr, proxies TrustedProxies) {
	c.users.Add(1)
	st := c.store.Load()
	var kb *keyBuf
	ok := st != nil && c.eligible(ctx)
	if ok {
		kb = keyBufPool.Get().(*keyBuf)
		if kb.b, ok = c.appendKey(kb.b[:0], ctx); !ok {
			keyBufPool.Put(kb)
		}
	}
	if !ok {
		c.users.Add(-1)
		pool.Serve(ctx, clientIP, proxies)
		c.mark(ctx, resultBypass)
		if unsafeMethod(ctx) {
			c.invalidate(ctx)
		}
		return
	}
	c.lookup(ctx, st, kb, pool, clientIP, proxies)
	answerConditional(ctx)
	keyBufPool.Put(kb)
	c.users.Add(-1)
}

func (c *Cache) lookup(ctx *fasthttp.RequestCtx, st *ristretto.Cache[[]byte, *entry], kb *keyBuf, pool *Pool, clientIP netip.Addr, proxies TrustedProxies) {
	primary := len(kb.b)
	now := c.now()
	// A second round only when a shared answer turned out to vary on a
	// header this request differs in.
	for round := 0; round < 2; round++ {
		e := c.get(st, kb.b)
		if e != nil && e.marker {
			kb.b = appendVary(kb.b[:primary], e.vary, ctx)
			e = c.get(st, kb.b)
		}
		var stale *entry
		if e != nil {
			switch {
			case now < e.freshUntil:
				c.write(ctx, e, now, resultHit)
				return
			case now < e.revalidateUntil:
				c.write(ctx, e, now, resultUpdating)
				c.refresh(ctx, kb.b, primary, e, pool, clientIP, proxies)
				return
			}
			stale = e
		}
		if ctx.IsHead() {
			c.toOrigin(ctx, pool, clientIP, proxies)
			if !c.staleOnError(ctx, stale, now) {
				c.mark(ctx, resultMiss)
			}
			return
		}
		res, xc, led := c.fetch(ctx, kb.b, primary, stale, now, pool, clientIP, proxies)
		if led {
			return
		}
		if res == nil {
			// Not shareable, or the wait timed out with nothing stale.
			c.toOrigin(ctx, pool, clientIP, proxies)
			if !c.staleOnError(ctx, stale, now) {
				c.mark(ctx, resultMiss)
			}
			return
		}
		if len(res.vary) > 0 && !bytes.Equal(res.key, appendVary(kb.b[:primary], res.vary, ctx)) {
			kb.b = kb.b[:primary]
			continue
		}
		c.write(ctx, res, now, xc)
		return
	}
	c.toOrigin(ctx, pool, clientIP, proxies)
	c.mark(ctx, resultMiss)
}

// get returns the entry stored under key, nil if none; the stored key is
// compared too, so two keys whose hashes collide are both misses.
func (c *Cache) get(st *ristretto.Cache[[]byte, *entry], key []byte) *entry {
	e, ok := st.Get(key)
	if !ok || !bytes.Equal(e.key, key) {
		return nil
	}
	return e
}

// eligible: GET or HEAD, no body, no Range, no Authorization unless
// configured, no userinfo in the request-target (refused by the pool, and
// its refusal is not the key's answer).
func (c *Cache) eligible(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	if !h.IsGet() && !h.IsHead() {
		return false
	}
	if len(ctx.Request.Body()) > 0 || len(h.Peek(fasthttp.HeaderRange)) > 0 || hasUserinfo(ctx) {
		return false
	}
	return c.cfg.WithAuthorization || len(h.Peek(fasthttp.HeaderAuthorization)) == 0
}

// appendKey writes the request's key: each part followed by a 0 byte, which
// no header value holds, so parts cannot run into each other. HEAD is keyed
// as GET: it is answered from the GET's answer. A header part is read as
// the origin reads the header: every line of it, comma-joined (RFC 9110
// §5.3). false: the request has no key — it names a key's cookie twice, and
// the origin may read either.
func (c *Cache) appendKey(b []byte, ctx *fasthttp.RequestCtx) ([]byte, bool) {
	for _, p := range c.key {
		switch p.kind {
		case partMethod:
			b = append(b, "GET"...)
		case partHost:
			b = appendLower(b, ctx.Host())
		case partPath:
			b = append(b, ctx.URI().PathOriginal()...)
		case partQuery:
			b = append(b, ctx.URI().QueryString()...)
		case partHeader:
			b = appendHeaderLines(b, &ctx.Request.Header, p.name)
		case partCookie:
			n := 0
			for k, v := range ctx.Request.Header.Cookies() {
				if string(k) == p.name {
					if n++; n > 1 {
						return b, false
					}
					b = append(b, v...)
				}
			}
		}
		b = append(b, 0)
	}
	return b, true
}

func appendLower(b, s []byte) []byte {
	for _, ch := range s {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		b = append(b, ch)
	}
	return b
}

// appendHeaderLines appends every line of the header name, joined by ", ".
func appendHeaderLines(b []byte, h *fasthttp.RequestHeader, name string) []byte {
	for i, v := range h.PeekAll(name) {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, v...)
	}
	return b
}

// appendVary adds the values of the headers a Vary answer named (every
// line of each), after a 1 byte that marks a variant key.
func appendVary(b []byte, names []string, ctx *fasthttp.RequestCtx) []byte {
	return appendVaryHeader(b, names, &ctx.Request.Header)
}

func appendVaryHeader(b []byte, names []string, h *fasthttp.RequestHeader) []byte {
	b = append(b, 1)
	for _, n := range names {
		b = appendHeaderLines(b, h, n)
		b = append(b, 0)
	}
	return b
}

// write answers ctx with e: the stored header copied into the response's
// own buffers, the body without a copy. No allocation.
func (c *Cache) write(ctx *fasthttp.RequestCtx, e *entry, now int64, xc cacheResult) {
	e.header.CopyTo(&ctx.Response.Header)
	ctx.Response.SetBodyRaw(e.body)
	age := max(now-e.stored, 0) / int64(time.Second)
	var buf [20]byte
	ctx.Response.Header.SetCanonical(headerAge, strconv.AppendInt(buf[:0], age, 10))
	c.mark(ctx, xc)
}

// mark records how ctx was answered: every request through the cache is
// marked exactly once, so the counts add up to the requests.
func (c *Cache) mark(ctx *fasthttp.RequestCtx, xc cacheResult) {
	c.stats.requests[xc].Add(1)
	if *c.cfg.XCache {
		ctx.Response.Header.SetCanonical(headerXCache, xCacheValues[xc])
	}
}

// staleOnError replaces an origin failure in ctx.Response with stale when
// stale_if_error allows, and reports whether it did.
func (c *Cache) staleOnError(ctx *fasthttp.RequestCtx, stale *entry, now int64) bool {
	if stale != nil && ctx.Response.StatusCode() >= 500 && now < stale.errorUntil {
		c.write(ctx, stale, now, resultStale)
		return true
	}
	return false
}

// fetch is the miss path: the first request for key becomes the leader, goes
// to the origin through pool with ctx, answers ctx and stores; led reports
// that ctx is answered. The others wait for the leader and get its result.
func (c *Cache) fetch(ctx *fasthttp.RequestCtx, key []byte, primary int, stale *entry, now int64, pool *Pool, clientIP netip.Addr, proxies TrustedProxies) (res *entry, xc cacheResult, led bool) {
	c.mu.Lock()
	f := c.flights[string(key)]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		k := string(key)
		c.flights[k] = f
		c.mu.Unlock()

		sent := c.now()
		c.toOrigin(ctx, pool, clientIP, proxies)
		res, xc = c.settle(ctx, &ctx.Response, key, primary, stale, sent)
		if res != nil && res == stale {
			c.write(ctx, res, c.now(), xc)
		} else {
			c.mark(ctx, resultMiss)
		}
		c.finish(k, f, res, xc)
		return nil, resultMiss, true
	}
	c.mu.Unlock()

	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	t := time.NewTimer(c.cfg.LockTimeout)
	defer t.Stop()
	select {
	case <-f.done:
		return f.result, f.xc, false
	case <-t.C:
		if stale != nil && now < max(stale.errorUntil, stale.revalidateUntil) {
			return stale, resultStale, false
		}
		return nil, resultMiss, false
	}
}

// finish hands the flight's result to its waiters. It runs after the answer
// is stored, so a request arriving after the flight is gone finds it.
func (c *Cache) finish(k string, f *flight, res *entry, xc cacheResult) {
	f.result, f.xc = res, xc
	c.mu.Lock()
	delete(c.flights, k)
	c.mu.Unlock()
	close(f.done)
}

// refresh starts the one background request that renews a stale answer,
// unless one is under way for key. The request is copied: ctx is not ours
// once the handler returns.
func (c *Cache) refresh(ctx *fasthttp.RequestCtx, key []byte, primary int, stale *entry, pool *Pool, clientIP netip.Addr, proxies TrustedProxies) {
	c.mu.Lock()
	if c.flights[string(key)] != nil {
		c.mu.Unlock()
		return
	}
	f := &flight{done: make(chan struct{})}
	k := string(key)
	c.flights[k] = f
	c.mu.Unlock()

	req := new(fasthttp.Request)
	ctx.Request.CopyTo(req)
	remote := ctx.RemoteAddr()
	c.users.Add(1)
	go func() {
		defer c.users.Add(-1)
		var bg fasthttp.RequestCtx
		bg.Init(req, remote, nil)
		sent := c.now()
		c.toOrigin(&bg, pool, clientIP, proxies)
		res, xc := c.settle(&bg, &bg.Response, []byte(k), primary, stale, sent)
		c.finish(k, f, res, xc)
	}()
}

// settle judges the origin's answer resp to the request ctx with key, sent
// to the origin at sent: stores it when it may be, and returns what the
// flight's waiters get and how they are answered: the stored answer (HIT),
// a shareable one not stored (MISS), the stale one on an origin failure
// within stale_if_error (STALE), or nil when the answer is private to its
// request — or a 304, which answers only the validators of the request
// that got it (the cache's own requests carry none; an origin that sends
// one anyway is not believed for anyone else).
//
// Its life (RFC 9111 §4.2): the route's ttl, shortened by the origin's
// freshness lifetime (s-maxage, else max-age, else Expires minus Date),
// less the age it already had when the origin sent an Age: that Age plus
// the time the origin took to answer. A hit's Age counts from there.
func (c *Cache) settle(ctx *fasthttp.RequestCtx, resp *fasthttp.Response, key []byte, primary int, stale *entry, sent int64) (*entry, cacheResult) {
	now := c.now()
	status := resp.StatusCode()
	if status >= 500 && stale != nil && now < stale.errorUntil {
		return stale, resultStale
	}
	if status == fasthttp.StatusNotModified {
		return nil, resultMiss
	}
	j := judge(&resp.Header, now)
	if !j.shareable {
		return nil, resultMiss
	}
	ttl := c.cfg.TTL
	if j.maxAge >= 0 && j.maxAge < ttl {
		ttl = j.maxAge
	}
	// RFC 9111 §4.2.3's corrected_age_value. Its apparent_age (now - Date)
	// is left out, as Varnish does: an origin clock a second behind would
	// expire every 1 s answer. Without an Age the answer is new: the time a
	// slow origin took is not held against the route's ttl (nginx's
	// proxy_cache_valid counts from the store too).
	var age time.Duration
	if j.hasAge {
		age = j.age + time.Duration(max(now-sent, 0))
	}
	ttl -= age
	e := &entry{stored: now - int64(age), freshUntil: now + int64(ttl)}
	e.revalidateUntil, e.errorUntil = e.freshUntil, e.freshUntil
	if !j.noStale {
		e.revalidateUntil += int64(c.cfg.StaleWhileRevalidate)
		e.errorUntil += int64(c.cfg.StaleIfError)
	}
	resp.Header.CopyTo(&e.header)
	e.body = append([]byte(nil), resp.Body()...)
	e.vary = j.vary
	if len(j.vary) > 0 {
		// Stored under the route's key plus the values of the headers it
		// varies on, as the leader's request had them.
		e.key = appendVaryHeader(append([]byte(nil), key[:primary]...), j.vary, &ctx.Request.Header)
	} else {
		e.key = append([]byte(nil), key[:primary]...)
	}

	cost := int64(len(e.body)+2*len(e.key)+e.header.Len()*64) + 512
	if !cacheableStatus(status) || ttl <= 0 || cost > c.cfg.MaxBytes/8 {
		return e, resultMiss
	}
	st := c.store.Load()
	if st == nil {
		return e, resultMiss
	}
	e.url = string(c.appendURL(nil, ctx.Host(), ctx.URI().PathOriginal(), ctx.URI().QueryString()))
	life := time.Duration(max(e.revalidateUntil, e.errorUntil) - now)
	if len(e.vary) > 0 {
		m := &entry{key: e.key[:primary], vary: e.vary, marker: true, url: e.url}
		c.set(st, m, int64(primary)+256, life)
	}
	stored := c.set(st, e, cost, life)
	// Sets are applied by ristretto's goroutine: wait, so that the request
	// after this flight ends finds the answer instead of flying again.
	st.Wait()
	if !stored {
		return e, resultMiss
	}
	return e, resultHit
}

// toOrigin sends ctx to the origin on the cache's behalf: a miss, a
// refresh, a waiter that gave up waiting (not a bypass: that request never
// was the cache's).
func (c *Cache) toOrigin(ctx *fasthttp.RequestCtx, pool *Pool, clientIP netip.Addr, proxies TrustedProxies) {
	c.stats.origin.Add(1)
	pool.serve(ctx, clientIP, proxies, true)
}

// set stores e under its key. It is counted in entries before the Set:
// ristretto may refuse or replace it from its own goroutine at any time
// after, and that ends in OnExit (left), which must find it counted. A Set
// ristretto drops at once (its buffer full) is taken out here.
func (c *Cache) set(st *ristretto.Cache[[]byte, *entry], e *entry, cost int64, life time.Duration) bool {
	e.live.Store(true)
	c.stats.entries.Add(1)
	c.imu.Lock()
	c.byURL[e.url] = append(c.byURL[e.url], e)
	c.imu.Unlock()
	if st.SetWithTTL(e.key, e, cost, life) {
		return true
	}
	c.stats.rejected.Add(1)
	c.left(e)
	return false
}

// left takes e out of the entries count, once (ristretto's OnExit).
func (c *Cache) left(e *entry) {
	if e != nil && e.live.CompareAndSwap(true, false) {
		c.stats.entries.Add(-1)
		c.imu.Lock()
		list := c.byURL[e.url]
		for i, x := range list {
			if x == e {
				list[i] = list[len(list)-1]
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(c.byURL, e.url)
		} else {
			c.byURL[e.url] = list
		}
		c.imu.Unlock()
	}
}

// CacheStats are one route cache's figures at one moment (flashgate_cache_*
// on /metrics).
type CacheStats struct {
	// Route is the route's host and prefix: "shop.example/products/", or
	// "/products/" for a route of any host.
	Route string
	// Requests counts the requests by how they were answered, in the
	// order of CacheResults; each request is counted once.
	Requests [numCacheResults]uint64
	// OriginRequests counts the requests the cache sent to the origin:
	// the one per key on a miss, background refreshes, HEAD misses, and
	// those that stopped waiting or got an answer private to another
	// request. Bypassing requests are not among them.
	OriginRequests uint64
	// Evictions counts answers evicted for room (not those that expired),
	// Rejected storable answers ristretto did not take (admission, or its
	// set buffer full).
	Evictions, Rejected uint64
	// Purged counts the answers and markers an admin purge dropped,
	// Invalidated those an unsafe request the origin accepted dropped
	// (RFC 9111 §4.4).
	Purged, Invalidated uint64
	// Entries are the stored answers and Vary markers (expired ones
	// until ristretto's sweep removes them), Bytes their cost as
	// max_bytes counts it, MaxBytes the bound.
	Entries, Bytes, MaxBytes int64
}

// EachCache calls f with the figures of every cached route of the active
// set, in config order. The counts start at 0 when a route's cache is
// made anew (a reload that changed its settings), as its answers do.
func (m *Manager) EachCache(f func(CacheStats)) {
	m.mu.Lock()
	s := m.active
	m.mu.Unlock()
	if s == nil {
		return
	}
	for _, rc := range s.caches {
		f(rc.cache.snapshot(rc.id.host + rc.id.prefix))
	}
}

func (c *Cache) snapshot(route string) CacheStats {
	s := CacheStats{
		Route:          route,
		OriginRequests: c.stats.origin.Load(),
		Evictions:      c.stats.evicted.Load(),
		Rejected:       c.stats.rejected.Load(),
		Purged:         c.stats.purged.Load(),
		Invalidated:    c.stats.dropped.Load(),
		Entries:        c.stats.entries.Load(),
		MaxBytes:       c.cfg.MaxBytes,
	}
	for i := range s.Requests {
		s.Requests[i] = c.stats.requests[i].Load()
	}
	// The store is closed only once no user is inside (retire).
	c.users.Add(1)
	if st := c.store.Load(); st != nil {
		s.Bytes = st.MaxCost() - st.RemainingCost()
	}
	c.users.Add(-1)
	return s
}
