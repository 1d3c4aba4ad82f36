package upstream

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
)

// headerOrigin answers every request with the response headers given
// (name, value pairs) and the number of requests it has seen as the body.
func headerOrigin(t testing.TB, headers ...string) string {
	addr, _ := countingOrigin(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		for i := 0; i+1 < len(headers); i += 2 {
			ctx.Response.Header.Set(headers[i], headers[i+1])
		}
	})
	return addr
}

// TestCacheLifeFromTheOrigin: Expires (without max-age) and the origin's
// Age shorten how long an answer is fresh, as RFC 9111 §4.2 computes it; a
// hit's Age counts the age the answer arrived with.
func TestCacheLifeFromTheOrigin(t *testing.T) {
	// The origin's Date is its own clock (fasthttp writes it, to the
	// second): Expires is set against it.
	in := func(d time.Duration) string { return string(fasthttp.AppendHTTPDate(nil, time.Now().Add(d))) }
	for _, tc := range []struct {
		name    string
		headers []string
		// fresh: still a HIT this long after the miss; stale: no longer
		// one this long after. 0 fresh: not stored at all.
		fresh, stale time.Duration
		age          int // the first hit's Age at least
	}{
		{"Expires minus Date", []string{"Expires", in(5 * time.Second)}, 3 * time.Second, 7 * time.Second, 0},
		{"Expires past the ttl", []string{"Expires", in(24 * time.Hour)}, 29 * time.Second, 31 * time.Second, 0},
		{"max-age wins over Expires", []string{"Expires", in(5 * time.Second), "Cache-Control", "max-age=20"}, 19 * time.Second, 21 * time.Second, 0},
		{"Expires 0 is in the past", []string{"Expires", "0"}, 0, 0, 0},
		{"Expires before Date", []string{"Expires", in(-time.Hour)}, 0, 0, 0},
		{"Age shortens max-age", []string{"Cache-Control", "max-age=20", "Age", "15"}, 4 * time.Second, 6 * time.Second, 15},
		{"Age shortens the ttl", []string{"Age", "25"}, 4 * time.Second, 6 * time.Second, 25},
		{"Age past the life", []string{"Cache-Control", "max-age=10", "Age", "10"}, 0, 0, 0},
		{"a malformed Age is ignored", []string{"Cache-Control", "max-age=10", "Age", "ten"}, 9 * time.Second, 11 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, clock, _ := cachedRoute(t, conf.CacheConfig{TTL: 30 * time.Second}, headerOrigin(t, tc.headers...))
			if _, body, xc := e.get(t, "/p"); xc != "MISS" || body != "1" {
				t.Fatalf("first: %s %q, want MISS 1", xc, body)
			}
			if tc.fresh == 0 {
				if _, body, xc := e.get(t, "/p"); xc != "MISS" || body != "2" {
					t.Fatalf("second: %s %q, want another MISS (not stored)", xc, body)
				}
				return
			}
			_, _, xc, age := e.getAge(t, "/p")
			if xc != "HIT" || age < tc.age || age > tc.age+1 {
				t.Fatalf("hit: %s Age %d, want HIT with Age %d", xc, age, tc.age)
			}
			clock.advance(tc.fresh)
			if _, body, xc := e.get(t, "/p"); xc != "HIT" || body != "1" {
				t.Fatalf("after %v: %s %q, want HIT 1", tc.fresh, xc, body)
			}
			clock.advance(tc.stale - tc.fresh)
			if _, body, xc := e.get(t, "/p"); xc != "MISS" || body != "2" {
				t.Fatalf("after %v: %s %q, want MISS 2", tc.stale, xc, body)
			}
		})
	}
}

// TestCacheConditionalHitAllocs: a hit keyed by every line of a header and
// by a cookie, answered 304 to a client whose validator matches, allocates
// nothing either.
func TestCacheConditionalHitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("ETag", `"v1"`)
		ctx.SetBodyString("a page")
	})
	m, _ := newTestManager(t)
	c := onePool("p", origin)
	c.Routes[0].Cache = &conf.CacheConfig{TTL: time.Hour, Key: []string{"method", "host", "path", "query", "header:Accept-Language", "cookie:lang"}}
	s := mustBuild(t, m, c)
	for _, tc := range []struct {
		name, headers string
		status        int
	}{
		{"304", "Accept-Language: de\r\nAccept-Language: en\r\nCookie: sid=1; lang=de\r\nIf-None-Match: W/\"v0\", \"v1\"\r\n", 304},
		{"200", "Accept-Language: de\r\nAccept-Language: en\r\nCookie: sid=1; lang=de\r\nIf-None-Match: \"v0\"\r\n", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := serveCtxWith("/page", tc.headers)
			r := s.Route(ctx.Host(), ctx.Path())
			serve := func() {
				r.Serve(ctx, testClientIP, nil)
				if string(ctx.Response.Header.Peek("X-Cache")) != "HIT" || ctx.Response.StatusCode() != tc.status {
					t.Fatalf("%d X-Cache %q, want %d HIT", ctx.Response.StatusCode(), ctx.Response.Header.Peek("X-Cache"), tc.status)
				}
			}
			r.Serve(ctx, testClientIP, nil) // the miss (or the first hit)
			r.Serve(ctx, testClientIP, nil)
			serve()
			if n := testing.AllocsPerRun(500, serve); n != 0 {
				t.Fatalf("a hit allocates %v times", n)
			}
		})
	}
}

// TestCacheAsksForTheFullAnswer: the cache's origin request goes without
// any of the client's conditional headers (a miss fetches the full answer
// for everyone); a request that bypasses the cache keeps them.
func TestCacheAsksForTheFullAnswer(t *testing.T) {
	seen := make(chan []string, 4)
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		var got []string
		for _, h := range conditionalHeaders {
			if len(ctx.Request.Header.Peek(h)) > 0 {
				got = append(got, h)
			}
		}
		seen <- got
		ctx.SetBodyString("page")
	})
	e, _, _ := cachedRoute(t, conf.CacheConfig{TTL: time.Minute}, origin)
	validators := []string{"If-None-Match", `"v1"`, "If-Modified-Since", "Mon, 01 Jan 2024 00:00:00 GMT",
		"If-Match", `"v1"`, "If-Unmodified-Since", "Mon, 01 Jan 2024 00:00:00 GMT", "If-Range", `"v1"`}
	if _, _, xc := e.get(t, "/p", validators...); xc != "MISS" {
		t.Fatalf("X-Cache %s, want MISS", xc)
	}
	if got := <-seen; len(got) != 0 {
		t.Errorf("the cache's origin request carried %q", got)
	}
	if _, _, xc := e.get(t, "/p", append(validators, "Authorization", "Bearer x")...); xc != "BYPASS" {
		t.Fatalf("X-Cache %s, want BYPASS", xc)
	}
	if got := <-seen; len(got) != len(conditionalHeaders) {
		t.Errorf("a bypassing request reached the origin with %q, want all five", got)
	}
}
