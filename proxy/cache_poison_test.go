package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
)

// The microcache and the proxied path as a cache-poisoning tester sees
// them (issue 25): a hostile client writes raw requests to a real edge, and
// an origin on loopback echoes what it received, so that whatever the edge
// passes on or stores is visible in the body the next plain client gets.

// echoOrigin answers every request with the header block it received, byte
// for byte, and keeps each request's block by path. /slow/ paths wait until
// release; /etag/ paths carry ETag "v1" and answer 304 to a request whose
// If-None-Match names it (or that has If-Modified-Since), as any origin
// does.
type echoOrigin struct {
	addr     string
	hold     chan struct{}
	holdOnce sync.Once
	arrived  chan string // the path of each request, as it arrives
	mu       sync.Mutex
	heads    map[string][]string
}

func startEchoOrigin(t *testing.T) *echoOrigin {
	t.Helper()
	o := &echoOrigin{hold: make(chan struct{}), arrived: make(chan string, 1024), heads: map[string][]string{}}
	s := &fasthttp.Server{
		DisableHeaderNamesNormalizing: true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			path := string(ctx.Path())
			head := string(ctx.Request.Header.RawHeaders())
			o.mu.Lock()
			o.heads[path] = append(o.heads[path], head)
			o.mu.Unlock()
			o.arrived <- path
			if strings.HasPrefix(path, "/c/slow/") {
				<-o.hold
			}
			if strings.Contains(path, "/etag/") {
				ctx.Response.Header.Set("ETag", `"v1"`)
				ctx.Response.Header.Set("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
				if string(ctx.Request.Header.Peek("If-None-Match")) == `"v1"` || len(ctx.Request.Header.Peek("If-Modified-Since")) > 0 {
					ctx.SetStatusCode(fasthttp.StatusNotModified)
					return
				}
			}
			// ?status=201&loc=/c/item: an answer with that status and
			// Location (for the unsafe methods' tests).
			if st := ctx.QueryArgs().GetUintOrZero("status"); st > 0 {
				ctx.SetStatusCode(st)
			}
			if loc := ctx.QueryArgs().Peek("loc"); len(loc) > 0 {
				ctx.Response.Header.SetBytesV("Location", loc)
			}
			if cloc := ctx.QueryArgs().Peek("cloc"); len(cloc) > 0 {
				ctx.Response.Header.SetBytesV("Content-Location", cloc)
			}
			ctx.SetContentType("text/plain")
			fmt.Fprintf(ctx, "page %s\n%s", ctx.RequestURI(), head)
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().String()
	go s.Serve(ln)
	t.Cleanup(func() { o.release(); s.Shutdown() })
	return o
}

func (o *echoOrigin) release() { o.holdOnce.Do(func() { close(o.hold) }) }

// requests returns the header blocks the origin received for path.
func (o *echoOrigin) requests(path string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.heads[path]...)
}

// cacheEdge is forwardConfig's edge in front of o (127.0.0.1 a trusted
// proxy, / not cached) with one more route, /c/, cached (cacheExtra goes
// into its cache settings).
func cacheEdge(t *testing.T, o *echoOrigin, cacheExtra string) *edge {
	t.Helper()
	return startEdge(t, cacheEdgeConfig(o.addr, cacheExtra))
}

func cacheEdgeConfig(origin, cacheExtra string) string {
	return fmt.Sprintf(forwardConfig, "", origin, origin) +
		"    - prefix: /c/\n      pool: origin\n      cache: {ttl: 30s, lock_timeout: 30s" + cacheExtra + "}\n"
}

// plainGet is a browser's GET of path on shop.example, with the given
// header lines.
func plainGet(e *edge, path string, hdr ...string) (int, http.Header, string, error) {
	req, _ := http.NewRequest("GET", e.base+path, nil)
	req.Host = "shop.example"
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), err
}

// TestCacheConditionalMissIsNotShared (defect 1): a conditional request
// for a key not cached leads the one origin request; the plain shoppers
// waiting for it must get the full page, never its 304.
func TestCacheConditionalMissIsNotShared(t *testing.T) {
	o := startEchoOrigin(t)
	e := cacheEdge(t, o, "")
	const path = "/c/slow/etag/page"
	type answer struct {
		status int
		body   string
		err    error
	}
	lead := make(chan answer, 1)
	go func() {
		st, _, body, err := plainGet(e, path, "If-None-Match", `"v1"`)
		lead <- answer{st, body, err}
	}()
	if p := <-o.arrived; p != path {
		t.Fatalf("the origin got %q first", p)
	}
	const waiters = 8
	answers := make(chan answer, waiters)
	for range waiters {
		go func() {
			st, _, body, err := plainGet(e, path)
			answers <- answer{st, body, err}
		}()
	}
	await.Until(t, 10*time.Second, "the plain shoppers waiting inside the edge", func() bool {
		return e.srv.m.active.Value() >= waiters+1
	})
	o.release()
	for range waiters {
		a := <-answers
		if a.err != nil || a.status != 200 || !strings.HasPrefix(a.body, "page "+path) {
			t.Errorf("a plain shopper got %d %q (%v), want 200 and the page", a.status, a.body, a.err)
		}
	}
	if a := <-lead; a.err != nil || a.status != 304 || a.body != "" {
		t.Errorf("the conditional shopper got %d %q (%v), want 304 (its validator matches)", a.status, a.body, a.err)
	}
	heads := o.requests(path)
	if len(heads) != 1 {
		t.Fatalf("the origin saw %d requests for the key, want 1", len(heads))
	}
	if strings.Contains(strings.ToLower(heads[0]), "if-none-match") {
		t.Errorf("the cache's origin request carried the client's validator:\n%s", heads[0])
	}
	// Answered from the stored page: a plain client gets it, a
	// conditional one whose validator matches gets 304, one whose does
	// not the page.
	if st, h, body, _ := plainGet(e, path); st != 200 || h.Get("X-Cache") != "HIT" || !strings.HasPrefix(body, "page ") {
		t.Errorf("plain after: %d %s %q, want 200 HIT page", st, h.Get("X-Cache"), body)
	}
	if st, h, body, _ := plainGet(e, path, "If-None-Match", `W/"v0", "v1"`); st != 304 || body != "" || h.Get("ETag") != `"v1"` {
		t.Errorf("conditional after: %d ETag %q %q, want 304 with the ETag", st, h.Get("ETag"), body)
	}
	if st, _, body, _ := plainGet(e, path, "If-None-Match", `"v0"`); st != 200 || !strings.HasPrefix(body, "page ") {
		t.Errorf("another validator after: %d %q, want 200 page", st, body)
	}
	if st, _, body, _ := plainGet(e, path, "If-Modified-Since", "Tue, 02 Jan 2024 00:00:00 GMT"); st != 304 || body != "" {
		t.Errorf("If-Modified-Since after: %d %q, want 304", st, body)
	}
	if st, _, body, _ := plainGet(e, path, "If-Modified-Since", "Sun, 31 Dec 2023 00:00:00 GMT"); st != 200 || body == "" {
		t.Errorf("an older If-Modified-Since after: %d %q, want 200 page", st, body)
	}
}

// TestUserinfoNeverBecomesAuthorization (defect 2): userinfo in an
// absolute request-target is refused on a cached route and on one
// without a cache; nothing reaches the origin, nothing is stored.
func TestUserinfoNeverBecomesAuthorization(t *testing.T) {
	o := startEchoOrigin(t)
	e := cacheEdge(t, o, "")
	for _, path := range []string{"/c/account", "/account"} {
		for _, target := range []string{"http://attacker:pw@shop.example" + path, "http://:pw@shop.example" + path, "http://attacker@shop.example" + path} {
			resp, body := send(t, e, fromClient, "GET "+target+" HTTP/1.1\r\nHost: shop.example\r\n\r\n")
			if resp.StatusCode != 400 || strings.Contains(body, "Authorization") {
				t.Errorf("%s: %d %q, want 400", target, resp.StatusCode, body)
			}
		}
		for _, h := range o.requests(path) {
			t.Errorf("the origin received %s with\n%s", path, h)
		}
		if _, _, body, _ := plainGet(e, path); strings.Contains(body, "Authorization") {
			t.Errorf("a plain client of %s got the attacker's page:\n%s", path, body)
		}
	}
}

// TestCacheKeyReadsEveryLine (defect 3): a key part naming a header reads
// all its lines, comma-joined, as the origin will; a key naming a cookie
// sent twice does not cache; Vary reads every line too.
func TestCacheKeyReadsEveryLine(t *testing.T) {
	o := startEchoOrigin(t)
	e := cacheEdge(t, o, `, key: [method, host, path, query, "header:X-Host", "cookie:lang"]`)
	get := func(raw string) (int, string, string) {
		resp, body := send(t, e, fromClient, raw)
		return resp.StatusCode, resp.Header.Get("X-Cache"), body
	}
	// The German entry, stored by a plain client.
	if st, xc, _ := get("GET /c/de HTTP/1.1\r\nHost: shop.example\r\nCookie: lang=de\r\n\r\n"); st != 200 || xc != "MISS" {
		t.Fatalf("lang=de: %d %s", st, xc)
	}
	// lang named twice: the origin may read either; not the German entry.
	st, xc, body := get("GET /c/de HTTP/1.1\r\nHost: shop.example\r\nCookie: lang=de; lang=evil\r\n\r\n")
	if xc == "HIT" || !strings.Contains(body, "lang=evil") {
		t.Errorf("lang=de; lang=evil: %d %s, want it sent to the origin, not the German entry:\n%s", st, xc, body)
	}
	st, xc, _ = get("GET /c/de2 HTTP/1.1\r\nHost: shop.example\r\nCookie: lang=de\r\nCookie: lang=evil\r\n\r\n")
	if xc != "BYPASS" {
		t.Errorf("lang in two Cookie lines: %d %s, want BYPASS", st, xc)
	}
	if st, xc, body := get("GET /c/de2 HTTP/1.1\r\nHost: shop.example\r\nCookie: lang=de\r\n\r\n"); xc != "MISS" || strings.Contains(body, "evil") {
		t.Errorf("lang=de after the doubled cookie: %d %s, want a MISS of its own:\n%s", st, xc, body)
	}

	// X-Host: an empty line, then evil: not the key of no X-Host.
	if st, xc, _ := get("GET /c/host HTTP/1.1\r\nHost: shop.example\r\n\r\n"); st != 200 || xc != "MISS" {
		t.Fatalf("no X-Host: %d %s", st, xc)
	}
	if _, xc, body := get("GET /c/host HTTP/1.1\r\nHost: shop.example\r\nX-Host:\r\nX-Host: evil.test\r\n\r\n"); xc == "HIT" {
		t.Errorf("X-Host empty then evil.test: %s, want its own key:\n%s", xc, body)
	}
	if _, xc, body := get("GET /c/host HTTP/1.1\r\nHost: shop.example\r\n\r\n"); xc != "HIT" || strings.Contains(body, "evil") {
		t.Errorf("no X-Host again: %s, want the first entry:\n%s", xc, body)
	}
}

// TestCacheVaryReadsEveryLine (defect 3, Vary): an answer that varies on
// Accept-Language is keyed by all its lines.
func TestCacheVaryReadsEveryLine(t *testing.T) {
	vary := startEchoOriginVary(t)
	e := startEdge(t, cacheEdgeConfig(vary, ""))
	get := func(raw string) (string, string) {
		resp, body := send(t, e, fromClient, raw)
		return resp.Header.Get("X-Cache"), body
	}
	if xc, _ := get("GET /c/v HTTP/1.1\r\nHost: shop.example\r\nAccept-Language: de\r\n\r\n"); xc != "MISS" {
		t.Fatalf("de: %s", xc)
	}
	if xc, body := get("GET /c/v HTTP/1.1\r\nHost: shop.example\r\nAccept-Language: de\r\nAccept-Language: evil\r\n\r\n"); xc == "HIT" {
		t.Errorf("de + a second line: %s, want a variant of its own:\n%s", xc, body)
	}
	if xc, body := get("GET /c/v HTTP/1.1\r\nHost: shop.example\r\nAccept-Language: de\r\n\r\n"); xc != "HIT" || strings.Contains(body, "evil") {
		t.Errorf("de again: %s, want the German variant:\n%s", xc, body)
	}
}

// startEchoOriginVary is an origin whose answers vary on Accept-Language
// and render every line of it.
func startEchoOriginVary(t *testing.T) string {
	t.Helper()
	return startQuietOrigin(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Vary", "Accept-Language")
		fmt.Fprintf(ctx, "lang %q", ctx.Request.Header.PeekAll("Accept-Language"))
	})
}

// TestForwardedSchemeFromClients (defect 4): X-Forwarded-Scheme (and the
// other scheme headers Rack and gunicorn read) go like X-Forwarded-Proto
// unless the peer is a trusted proxy.
func TestForwardedSchemeFromClients(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")
	const scheme = "X-Forwarded-Scheme: http\r\nX-Forwarded-Ssl: on\r\nX-Forwarded-Protocol: ssl\r\nX_Forwarded_Scheme: http\r\n"
	send(t, e, fromClient, "GET /page HTTP/1.1\r\nHost: shop.example\r\n"+scheme+"\r\n")
	s := origin.next(t)
	wantCGI(t, s.cgi(), map[string][]string{
		"HTTP_X_FORWARDED_SCHEME": nil, "HTTP_X_FORWARDED_SSL": nil, "HTTP_X_FORWARDED_PROTOCOL": nil,
		"HTTP_X_FORWARDED_PROTO": {"http"},
	})
	send(t, e, fromProxy, "GET /page HTTP/1.1\r\nHost: shop.example\r\n"+scheme+"\r\n")
	s = origin.next(t)
	wantCGI(t, s.cgi(), map[string][]string{
		"HTTP_X_FORWARDED_SCHEME": {"http"}, "HTTP_X_FORWARDED_SSL": {"on"}, "HTTP_X_FORWARDED_PROTOCOL": {"ssl"},
	})
	if t.Failed() {
		t.Logf("the origin received:\n%s", s.head)
	}
}

// TestConnectionCannotStripEdgeHeaders (defect 5): whatever Connection
// names, the origin gets the forwarding headers the edge writes, from a
// client and from a trusted proxy.
func TestConnectionCannotStripEdgeHeaders(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")
	const named = "Connection: keep-alive, X-Forwarded-Proto, X-Forwarded-For, X-Real-IP\r\n"
	for _, tc := range []struct {
		from, extra string
		want        map[string][]string
	}{
		{fromClient, "", map[string][]string{
			"HTTP_X_FORWARDED_PROTO": {"http"}, "HTTP_X_FORWARDED_FOR": {fromClient}, "HTTP_X_REAL_IP": {fromClient}}},
		{fromClient, "X-Forwarded-Proto: https\r\n", map[string][]string{
			"HTTP_X_FORWARDED_PROTO": {"http"}, "HTTP_X_FORWARDED_FOR": {fromClient}, "HTTP_X_REAL_IP": {fromClient}}},
		{fromProxy, "X-Forwarded-Proto: https\r\nX-Forwarded-For: 198.51.100.7\r\n", map[string][]string{
			"HTTP_X_FORWARDED_PROTO": {"http"}, "HTTP_X_FORWARDED_FOR": {fromProxy}, "HTTP_X_REAL_IP": {"198.51.100.7"}}},
	} {
		send(t, e, tc.from, "GET /page HTTP/1.1\r\nHost: shop.example\r\n"+named+tc.extra+"\r\n")
		s := origin.next(t)
		wantCGI(t, s.cgi(), tc.want)
		if t.Failed() {
			t.Logf("from %s %q the origin received:\n%s", tc.from, tc.extra, s.head)
		}
	}
}
