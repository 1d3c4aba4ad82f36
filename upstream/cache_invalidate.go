package upstream

import (
	"bytes"
	"strings"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/valyala/fasthttp"
)

// What drops stored answers before their time: an unsafe request the origin
// accepted (RFC 9111 §4.4), and the operator's purge. Both find the answers
// through the cache's index by url (Cache.byURL), kept on the miss path and
// in ristretto's OnExit, so a hit pays nothing for it.

// appendURL writes a request's url as the cache indexes it: the method,
// host, path and query parts of the route's key (the method always GET),
// without the header and cookie parts. Every variant of a page, whatever
// headers or cookies keyed it, shares its url; a POST to the page has it too.
func (c *Cache) appendURL(b, host, path, query []byte) []byte {
	for _, p := range c.key {
		switch p.kind {
		case partMethod:
			b = append(b, "GET"...)
		case partHost:
			b = appendLower(b, host)
		case partPath:
			b = append(b, path...)
		case partQuery:
			b = append(b, query...)
		default:
			continue
		}
		b = append(b, 0)
	}
	return b
}

// unsafeMethod: the request may change what the origin answers for its
// URL: any method but the safe ones (RFC 9110 §9.2.1), unknown ones
// included.
func unsafeMethod(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	return !h.IsGet() && !h.IsHead() && !h.IsOptions() && !h.IsTrace()
}

// invalidate drops the stored answers of the request's URL, and of the
// Location and Content-Location of the answer when they name the same host,
// once the origin answered the unsafe request ctx with a non-error status
// (2xx or 3xx; RFC 9111 §4.4).
func (c *Cache) invalidate(ctx *fasthttp.RequestCtx) {
	if status := ctx.Response.StatusCode(); status < 200 || status >= 400 {
		return
	}
	c.users.Add(1)
	defer c.users.Add(-1)
	st := c.store.Load()
	if st == nil {
		return
	}
	kb := keyBufPool.Get().(*keyBuf)
	defer keyBufPool.Put(kb)
	host := ctx.Host()
	kb.b = c.appendURL(kb.b[:0], host, ctx.URI().PathOriginal(), ctx.URI().QueryString())
	n := c.dropURL(st, kb.b)
	for _, name := range [...]string{fasthttp.HeaderLocation, fasthttp.HeaderContentLocation} {
		loc := ctx.Response.Header.Peek(name)
		if len(loc) == 0 {
			continue
		}
		path, query, ok := sameHostTarget(loc, host)
		if !ok {
			continue
		}
		kb.b = c.appendURL(kb.b[:0], host, path, query)
		n += c.dropURL(st, kb.b)
	}
	c.stats.dropped.Add(uint64(n))
}

// sameHostTarget splits a Location or Content-Location value into path and
// query when it names a path on host: an absolute path ("/a?b"), or an
// absolute URI whose host is host (any case, any port). Relative references
// other than an absolute path are not followed.
func sameHostTarget(loc, host []byte) (path, query []byte, ok bool) {
	if i := bytes.IndexByte(loc, '#'); i >= 0 {
		loc = loc[:i]
	}
	switch {
	case len(loc) > 1 && loc[0] == '/' && loc[1] == '/':
		return nil, nil, false // network-path reference: another host, perhaps
	case len(loc) > 0 && loc[0] == '/':
	default:
		rest, found := cutScheme(loc)
		if !found {
			return nil, nil, false
		}
		end := bytes.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		var buf, want [maxHostLen]byte
		a, okA := hostKey(&buf, rest[:end])
		b, okB := hostKey(&want, host)
		if !okA || !okB || !bytes.Equal(a, b) || bytes.IndexByte(rest[:end], '@') >= 0 {
			return nil, nil, false
		}
		loc = rest[end:]
		if len(loc) == 0 || loc[0] == '?' {
			loc = append([]byte("/"), loc...)
		}
	}
	path, query, _ = bytes.Cut(loc, []byte{'?'})
	return path, query, true
}

// cutScheme strips "http://" or "https://" (any case).
func cutScheme(loc []byte) ([]byte, bool) {
	for _, scheme := range [...]string{"http://", "https://"} {
		if len(loc) >= len(scheme) && strings.EqualFold(string(loc[:len(scheme)]), scheme) {
			return loc[len(scheme):], true
		}
	}
	return nil, false
}

// dropURL deletes every stored answer and marker indexed under url and
// returns how many. The deletions run outside imu: ristretto's OnExit
// (left) takes it.
func (c *Cache) dropURL(st *ristretto.Cache[[]byte, *entry], url []byte) int {
	c.imu.Lock()
	list := c.byURL[string(url)]
	if len(list) == 0 {
		c.imu.Unlock()
		return 0
	}
	victims := append([]*entry(nil), list...)
	c.imu.Unlock()
	return c.drop(st, victims)
}

// drop deletes victims from the store; entries already gone (replaced,
// expired) are not counted.
func (c *Cache) drop(st *ristretto.Cache[[]byte, *entry], victims []*entry) int {
	n := 0
	for _, e := range victims {
		// Del's OnExit (left) takes it out of the index and the count.
		if cur, ok := st.Get(e.key); ok && cur == e {
			st.Del(e.key)
			n++
		}
	}
	return n
}

// purge deletes the stored answers whose key, read as text, starts with
// prefix ("" for all of them) and returns how many. A key reads as its
// parts in order, each followed by '|', a variant's Vary values after the
// page's: "GET|shop.example|/products/a||".
func (c *Cache) purge(prefix string) int {
	c.users.Add(1)
	defer c.users.Add(-1)
	st := c.store.Load()
	if st == nil {
		return 0
	}
	var victims []*entry
	c.imu.Lock()
	for _, list := range c.byURL {
		for _, e := range list {
			if strings.HasPrefix(readableKey(e.key), prefix) {
				victims = append(victims, e)
			}
		}
	}
	c.imu.Unlock()
	n := c.drop(st, victims)
	c.stats.purged.Add(uint64(n))
	return n
}

// readableKey is a key with its part separators (0) shown as '|' and the
// mark before a variant's values (1) left out.
func readableKey(key []byte) string {
	out := make([]byte, 0, len(key))
	for _, b := range key {
		switch b {
		case 0:
			out = append(out, '|')
		case 1:
		default:
			out = append(out, b)
		}
	}
	return string(out)
}

// Purge drops the stored answers of the active set's caches: of the route
// named route (its label on /metrics: "shop.example/products/", or
// "/products/" for any host; "" for every cached route) whose key starts
// with prefix (see Cache.purge; "" for all). It returns how many answers
// went, and whether route named a cached route.
func (m *Manager) Purge(route, prefix string) (purged int, found bool) {
	m.mu.Lock()
	s := m.active
	m.mu.Unlock()
	if s == nil {
		return 0, route == ""
	}
	for _, rc := range s.caches {
		if route != "" && rc.id.host+rc.id.prefix != route {
			continue
		}
		found = true
		purged += rc.cache.purge(prefix)
	}
	return purged, found || route == ""
}
