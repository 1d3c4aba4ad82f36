package upstream

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
)

func TestSameHostTarget(t *testing.T) {
	for _, tc := range []struct {
		loc, path, query string
		ok               bool
	}{
		{"/c/item", "/c/item", "", true},
		{"/c/list?page=2#top", "/c/list", "page=2", true},
		{"http://shop.example/c/item", "/c/item", "", true},
		{"HTTPS://Shop.Example.:8443/c/item?x=1", "/c/item", "x=1", true},
		{"http://shop.example", "/", "", true},
		{"http://shop.example?x=1", "/", "x=1", true},
		{"http://evil.example/c/item", "", "", false},
		{"//shop.example/c/item", "", "", false},
		{"http://evil.example@shop.example/c/item", "", "", false},
		{"c/item", "", "", false},
		{"ftp://shop.example/c/item", "", "", false},
		{"", "", "", false},
	} {
		path, query, ok := sameHostTarget([]byte(tc.loc), []byte("shop.example:8080"))
		if ok != tc.ok || string(path) != tc.path || string(query) != tc.query {
			t.Errorf("%q: %q %q %v, want %q %q %v", tc.loc, path, query, ok, tc.path, tc.query, tc.ok)
		}
	}
}

// TestCacheUnsafeDropsVariants: a POST the origin accepts drops every
// variant of a Vary answer and its marker; the purge reads keys as text.
func TestCacheUnsafeDropsVariants(t *testing.T) {
	origin, n := countingOrigin(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Vary", "Accept-Language")
	})
	e, _, m := cachedRoute(t, conf.CacheConfig{TTL: time.Minute}, origin)
	for _, lang := range []string{"de", "fr"} {
		e.get(t, "/p?x=1", "Accept-Language", lang)
		if _, _, xc := e.get(t, "/p?x=1", "Accept-Language", lang); xc != "HIT" {
			t.Fatalf("%s: %s, want HIT", lang, xc)
		}
	}
	if s := statsOf(t, m); s.Entries != 3 {
		t.Fatalf("entries %d, want 3 (two variants, one marker)", s.Entries)
	}
	if code, _, _ := e.do(t, "POST", "shop.example", "/p?x=1", []byte("x")); code != 200 {
		t.Fatalf("POST: %d", code)
	}
	if s := statsOf(t, m); s.Entries != 0 || s.Invalidated != 3 {
		t.Fatalf("after the POST: entries %d invalidated %d, want 0 and 3", s.Entries, s.Invalidated)
	}
	before := n.Load()
	if _, _, xc := e.get(t, "/p?x=1", "Accept-Language", "de"); xc != "MISS" || n.Load() != before+1 {
		t.Fatalf("de after the POST: %s, want MISS", xc)
	}

	e.get(t, "/q", "Accept-Language", "de")
	if got, found := m.Purge("/", "GET|shop.example|/q|"); !found || got != 2 {
		t.Fatalf("purge of /q: %d %v, want 2 (the variant and its marker)", got, found)
	}
	if got, _ := m.Purge("", "GET|shop.example|/p|x=1|de|"); got != 1 {
		t.Fatalf("purge of the de variant by its full key: %d, want 1", got)
	}
	if _, found := m.Purge("/nope/", ""); found {
		t.Fatal("a purge of an unknown route found one")
	}
}
