package upstream

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/await"
)

// statsOf is the only cached route's figures.
func statsOf(t testing.TB, m *Manager) CacheStats {
	t.Helper()
	var all []CacheStats
	m.EachCache(func(s CacheStats) { all = append(all, s) })
	if len(all) != 1 {
		t.Fatalf("%d cached routes, want 1", len(all))
	}
	return all[0]
}

func requestsOf(s CacheStats) map[string]uint64 {
	out := map[string]uint64{}
	for i, n := range s.Requests {
		out[CacheResults[i]] = n
	}
	return out
}

// TestCacheStatsCountEachAnswer: every request is counted once under how it
// was answered, and the origin requests are the cache's own (not the
// bypassing ones).
func TestCacheStatsCountEachAnswer(t *testing.T) {
	origin, n := countingOrigin(t, nil)
	e, clock, m := cachedRoute(t, conf.CacheConfig{TTL: time.Second, StaleWhileRevalidate: time.Minute}, origin)
	for i, want := range []string{"MISS", "HIT", "HIT"} {
		if _, _, xc := e.get(t, "/p"); xc != want {
			t.Fatalf("request %d: X-Cache %s, want %s", i, xc, want)
		}
	}
	clock.advance(2 * time.Second)
	if _, _, xc := e.get(t, "/p"); xc != "UPDATING" {
		t.Fatalf("past the TTL: X-Cache %s, want UPDATING", xc)
	}
	// The refresh is done when its flight is: after its answer is stored.
	c := m.active.caches[0].cache
	await.Until(t, 5*time.Second, "the background refresh", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return n.Load() == 2 && len(c.flights) == 0
	})
	if _, _, xc := e.get(t, "/p", "Authorization", "Bearer x"); xc != "BYPASS" {
		t.Fatalf("with Authorization: X-Cache %s, want BYPASS", xc)
	}
	if s := statsOf(t, m); s.Route != "/" || s.Entries != 1 || s.Bytes <= 0 || s.Bytes > s.MaxBytes || s.MaxBytes != 64<<20 {
		t.Errorf("route %q entries %d bytes %d of %d, want \"/\", 1, in (0, 64 MiB]", s.Route, s.Entries, s.Bytes, s.MaxBytes)
	}
	// A POST the origin accepts drops the page (RFC 9111 §4.4).
	if code, _, _ := e.do(t, "POST", "shop.example", "/p", []byte("x")); code != 200 {
		t.Fatalf("POST: %d", code)
	}

	s := statsOf(t, m)
	want := map[string]uint64{"hit": 2, "miss": 1, "stale": 0, "updating": 1, "bypass": 2}
	if got := requestsOf(s); !mapsEqual(got, want) {
		t.Errorf("requests %v, want %v", got, want)
	}
	// The miss and the refresh; the two bypassing requests reached the
	// origin too (4 in all) but are not the cache's.
	if s.OriginRequests != 2 || n.Load() != 4 {
		t.Errorf("origin requests: the cache's %d (want 2), the origin saw %d (want 4)", s.OriginRequests, n.Load())
	}
	if s.Entries != 0 || s.Invalidated != 1 || s.Purged != 0 {
		t.Errorf("after the POST: entries %d, invalidated %d, purged %d, want 0, 1, 0", s.Entries, s.Invalidated, s.Purged)
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCacheStatsStaleAndWaiters: answers from the stale copy on an origin
// failure are stale, and a burst on a new key is one miss, one origin
// request, the rest hits (the waiters get the stored answer).
func TestCacheStatsStaleAndWaiters(t *testing.T) {
	release := make(chan struct{})
	var failing atomic.Bool
	origin, n := countingOrigin(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		if failing.Load() {
			ctx.SetStatusCode(503)
			return
		}
		if string(ctx.Path()) == "/burst" {
			<-release
		}
	})
	e, clock, m := cachedRoute(t, conf.CacheConfig{TTL: time.Second, StaleIfError: time.Minute}, origin)

	const waiters = 50
	done := make(chan string, waiters+1)
	go func() { _, _, xc := e.get(t, "/burst"); done <- xc }()
	await.Until(t, 5*time.Second, "the leader at the origin", func() bool { return n.Load() == 1 })
	c := m.active.caches[0].cache
	for range waiters {
		go func() { _, _, xc := e.get(t, "/burst"); done <- xc }()
	}
	await.Until(t, 5*time.Second, "the waiters", func() bool { return c.waiting.Load() == waiters })
	close(release)
	got := map[string]int{}
	for range waiters + 1 {
		got[<-done]++
	}
	if got["MISS"] != 1 || got["HIT"] != waiters {
		t.Fatalf("the burst's X-Cache: %v, want 1 MISS, %d HIT", got, waiters)
	}

	clock.advance(2 * time.Second)
	failing.Store(true)
	for range 3 {
		if code, _, xc := e.get(t, "/burst"); code != 200 || xc != "STALE" {
			t.Fatalf("origin failing: %d %s, want 200 STALE", code, xc)
		}
	}
	s := statsOf(t, m)
	want := map[string]uint64{"hit": waiters, "miss": 1, "stale": 3, "updating": 0, "bypass": 0}
	if got := requestsOf(s); !mapsEqual(got, want) {
		t.Errorf("requests %v, want %v", got, want)
	}
	if s.OriginRequests != 4 || n.Load() != 4 {
		t.Errorf("origin requests: the cache's %d, the origin saw %d; want 4 (the burst's one, one per failed stale answer)", s.OriginRequests, n.Load())
	}
}

// TestCacheStatsMemory: entries and bytes follow what ristretto holds, and
// a cache too small for its keys evicts or refuses (admission), within
// max_bytes.
func TestCacheStatsMemory(t *testing.T) {
	body := strings.Repeat("x", 4<<10)
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(body) })
	m, _ := newTestManager(t)
	c := onePool("p", origin)
	c.Routes[0].Cache = &conf.CacheConfig{TTL: time.Hour, MaxBytes: conf.MinCacheBytes}
	e := startRouteEdge(t, mustBuild(t, m, c))
	cache := m.active.caches[0].cache

	const keys = 60 // ~5 KiB each: about a fifth of them fit in 64 KiB
	for round := range 3 {
		for i := range keys {
			if code, got, _ := e.get(t, "/k/"+strconv.Itoa(i)); code != 200 || got != body {
				t.Fatalf("round %d key %d: %d", round, i, code)
			}
		}
	}
	s := statsOf(t, m)
	if s.Bytes <= 0 || s.Bytes > s.MaxBytes {
		t.Errorf("bytes %d, want in (0, %d]", s.Bytes, s.MaxBytes)
	}
	if s.Evictions+s.Rejected == 0 {
		t.Errorf("%d keys of ~5 KiB in 64 KiB: no eviction, no refusal", keys)
	}
	// Entries is what the store holds: look each key up.
	st := cache.store.Load()
	var held int64
	for i := range keys {
		if cache.get(st, []byte("GET\x00shop.example\x00/k/"+strconv.Itoa(i)+"\x00\x00")) != nil {
			held++
		}
	}
	if held == 0 || s.Entries != held {
		t.Errorf("entries %d, the store holds %d of the %d keys", s.Entries, held, keys)
	}
	t.Logf("entries %d, bytes %d of %d, evictions %d, rejected %d", s.Entries, s.Bytes, s.MaxBytes, s.Evictions, s.Rejected)
}

// TestCacheStatsExpiredAreNotEvictions: answers past their life leave the
// entries and bytes when ristretto sweeps them (every few seconds), and are
// not counted as evictions: those mean the cache is too small.
func TestCacheStatsExpiredAreNotEvictions(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for ristretto's expiry sweep (up to ~10 s)")
	}
	origin, _ := countingOrigin(t, nil)
	e, _, m := cachedRoute(t, conf.CacheConfig{TTL: time.Second}, origin)
	for i := range 3 {
		if _, _, xc := e.get(t, "/p/"+strconv.Itoa(i)); xc != "MISS" {
			t.Fatalf("key %d: %s, want MISS", i, xc)
		}
	}
	if s := statsOf(t, m); s.Entries != 3 || s.Bytes <= 0 {
		t.Fatalf("stored: entries %d bytes %d, want 3 and > 0", s.Entries, s.Bytes)
	}
	await.Until(t, 20*time.Second, "the expired answers swept", func() bool {
		s := statsOf(t, m)
		return s.Entries == 0 && s.Bytes == 0
	})
	if s := statsOf(t, m); s.Evictions != 0 || s.Rejected != 0 {
		t.Errorf("evictions %d rejected %d after expiry, want 0", s.Evictions, s.Rejected)
	}
}
