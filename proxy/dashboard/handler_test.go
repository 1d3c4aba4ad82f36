package dashboard

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func fakeSource() (func() Snapshot, *atomic.Int64) {
	var n atomic.Int64
	return func() Snapshot {
		i := n.Add(1)
		return Snapshot{
			ServerTimeMs: 1_700_000_000_000 + i*1000,
			Node:         "edge-1",
			Version:      "v1.2.3",
			Reload:       Reload{At: "2025-06-18T12:00:00Z", Trigger: "file", Version: 3},
			Breaker:      BreakerClosed,
			Products: []Product{{
				ProductID: "p1", Name: "Phone", Status: "active", Stock: 100, Remaining: 90, Sold: 10,
				Attempts: uint64(i * 50), Stored: Unknown,
			}},
			Filters:  []Filter{{Name: "ip", Type: "ip_limit", Passed: uint64(i * 40), Rejected: uint64(i * 10)}},
			Pipeline: Pipeline{KafkaLag: Unknown, Stored: 9, ConsumerRunning: true},
		}
	}, &n
}

// serve runs h behind a real fasthttp server on loopback, the way the admin
// listener will: paths the handler does not own get a 404 from the caller.
func serve(t *testing.T, h *Handler) (string, *fasthttp.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if !h.Serve(ctx) {
				ctx.SetStatusCode(fasthttp.StatusTeapot) // "not mine" marker
			}
		},
		WriteTimeout: 2 * time.Second, // the admin listener has one: the stream must outlive it
	}
	go srv.Serve(ln)
	t.Cleanup(func() { h.Close(); srv.Shutdown() })
	return "http://" + ln.Addr().String(), srv
}

func get(t *testing.T, url string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	// No transparent gunzip: the test checks what is on the wire.
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPageAndAssets(t *testing.T) {
	src, _ := fakeSource()
	h := New(src, NewHistory())
	base, _ := serve(t, h)

	for _, p := range []string{"/admin/", "/admin/dashboard", "/admin"} {
		t.Run("page "+p, func(t *testing.T) {
			r := get(t, base+p)
			body := readAll(t, r)
			if r.StatusCode != 200 {
				t.Fatalf("status %d", r.StatusCode)
			}
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Fatalf("content type %q", ct)
			}
			csp := r.Header.Get("Content-Security-Policy")
			if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
				t.Fatalf("csp %q", csp)
			}
			for _, id := range []string{"breaker", "degraded-all", "reload", "products", "filters", "pipeline", "updated", "token", "actions"} {
				if !bytes.Contains(body, []byte(`id="`+id+`"`)) {
					t.Errorf("page lacks #%s", id)
				}
			}
			// Asset links are versioned so that they can be cached for long.
			if !regexp.MustCompile(`"/admin/_static/dash\.js\?v=[0-9a-f]{10}"`).Match(body) {
				t.Error("dash.js link is not versioned")
			}
		})
	}

	// Every link on the page resolves, gzipped, with an ETag.
	page := readAll(t, get(t, base+"/admin/"))
	links := regexp.MustCompile(`"(/admin/_static/[^"?]+)(\?v=[0-9a-f]+)?"`).FindAllSubmatch(page, -1)
	if len(links) < 3 {
		t.Fatalf("found %d asset links", len(links))
	}
	for _, m := range links {
		u := string(m[1]) + string(m[2])
		r := get(t, base+u, "Accept-Encoding", "gzip")
		body := readAll(t, r)
		if r.StatusCode != 200 || r.Header.Get("Etag") == "" {
			t.Fatalf("%s: status %d etag %q", u, r.StatusCode, r.Header.Get("Etag"))
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", u)
		}
		if r.Header.Get("Content-Encoding") == "gzip" {
			if _, err := gzip.NewReader(bytes.NewReader(body)); err != nil {
				t.Errorf("%s: bad gzip: %v", u, err)
			}
		}
	}

	t.Run("HEAD", func(t *testing.T) {
		req, _ := http.NewRequest("HEAD", base+"/admin/_static/dash.css", nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 || r.ContentLength <= 0 {
			t.Fatalf("status %d length %d", r.StatusCode, r.ContentLength)
		}
	})
	t.Run("unknown asset", func(t *testing.T) {
		for _, p := range []string{"/admin/_static/nope.js", "/admin/_static/sub/dash.js", "/admin/_static/index.html", "/admin/_static/"} {
			if r := get(t, base+p); r.StatusCode != 404 {
				t.Errorf("%s: status %d, want 404", p, r.StatusCode)
			}
		}
	})
	t.Run("POST", func(t *testing.T) {
		r, err := http.Post(base+"/admin/dashboard", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 405 || r.Header.Get("Allow") != "GET, HEAD" {
			t.Fatalf("status %d allow %q", r.StatusCode, r.Header.Get("Allow"))
		}
	})
}

func TestETag(t *testing.T) {
	src, _ := fakeSource()
	base, _ := serve(t, New(src, NewHistory()))
	for _, enc := range []string{"", "gzip"} {
		for _, p := range []string{"/admin/", "/admin/_static/dash.js", "/admin/_static/dash.css"} {
			r := get(t, base+p, "Accept-Encoding", enc)
			readAll(t, r)
			tag := r.Header.Get("Etag")
			if tag == "" {
				t.Fatalf("%s: no ETag", p)
			}
			if enc == "gzip" && (r.Header.Get("Content-Encoding") != "gzip" || !strings.HasSuffix(tag, `-gz"`)) {
				t.Errorf("%s: encoding %q tag %s", p, r.Header.Get("Content-Encoding"), tag)
			}
			for _, inm := range []string{tag, "W/" + tag, `"x", ` + tag, "*"} {
				r2 := get(t, base+p, "Accept-Encoding", enc, "If-None-Match", inm)
				if b := readAll(t, r2); r2.StatusCode != 304 || len(b) != 0 {
					t.Errorf("%s If-None-Match %s: status %d, %d bytes", p, inm, r2.StatusCode, len(b))
				}
			}
			if r3 := get(t, base+p, "If-None-Match", `"other"`); r3.StatusCode != 200 {
				t.Errorf("%s: stale tag got %d", p, r3.StatusCode)
			}
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for ae, want := range map[string]bool{
		"": false, "gzip": true, "gzip, deflate, br": true, "br;q=1, gzip;q=0.5": true,
		"gzip;q=0": false, "gzip; q=0.000": false, "*": true, "*;q=0": false, "identity": false,
		"GZIP": true, "x-gzip": true, "*, gzip;q=0": false,
	} {
		if got := acceptsGzip([]byte(ae)); got != want {
			t.Errorf("%q: got %v", ae, got)
		}
	}
}

func TestJSON(t *testing.T) {
	src, _ := fakeSource()
	base, _ := serve(t, New(src, NewHistory()))
	r := get(t, base+"/admin/dashboard.json")
	body := readAll(t, r)
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("status %d type %q cache %q", r.StatusCode, r.Header.Get("Content-Type"), r.Header.Get("Cache-Control"))
	}
	var s Snapshot
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	if s.Node != "edge-1" || len(s.Products) != 1 || s.Products[0].Stored != Unknown || s.Filters[0].Name != "ip" {
		t.Fatalf("%+v", s)
	}
	// The wire names are the contract the page (and the edge) rely on.
	for _, k := range []string{`"serverTimeMs"`, `"degradedAll"`, `"productId"`, `"outboxPending"`, `"soldOut"`,
		`"dryRunRejected"`, `"kafkaLag"`, `"deadLettered"`, `"consumerRunning"`, `"reload":{"at"`, `"breaker":"closed"`} {
		if !bytes.Contains(body, []byte(k)) {
			t.Errorf("JSON lacks %s: %s", k, body)
		}
	}
}

func TestJSONEmptyListsAndPanics(t *testing.T) {
	calls := 0
	h := New(func() Snapshot {
		calls++
		if calls == 2 {
			panic("boom")
		}
		return Snapshot{}
	}, NewHistory())
	base, _ := serve(t, h)
	b := readAll(t, get(t, base+"/admin/dashboard.json"))
	if !bytes.Contains(b, []byte(`"products":[]`)) || !bytes.Contains(b, []byte(`"filters":[]`)) {
		t.Fatalf("nil lists not sent as []: %s", b)
	}
	r := get(t, base+"/admin/dashboard.json")
	b = readAll(t, r)
	if r.StatusCode != 500 || !bytes.Contains(b, []byte(`"code":"INTERNAL"`)) {
		t.Fatalf("panicking source: %d %s", r.StatusCode, b)
	}
}

func TestNotMine(t *testing.T) {
	src, _ := fakeSource()
	base, _ := serve(t, New(src, NewHistory()))
	for _, p := range []string{"/admin/reload", "/admin/activities", "/metrics", "/healthz", "/admin/dashboardx", "/admin/dashboard/other", "/", "/seckill/p1", "/admin/_staticx"} {
		if r := get(t, base+p); r.StatusCode != fasthttp.StatusTeapot {
			t.Errorf("%s: handler claimed it (status %d)", p, r.StatusCode)
		}
	}
}

func TestIsPublic(t *testing.T) {
	for p, want := range map[string]bool{
		"/admin/": true, "/admin/dashboard": true, "/admin": true, "/admin/_static/dash.js": true,
		"/admin/dashboard.json": false, "/admin/dashboard/events": false, "/admin/reload": false, "/metrics": false,
	} {
		if got := IsPublic([]byte(p)); got != want {
			t.Errorf("%s: %v", p, got)
		}
	}
}

// readEvent reads lines up to the next blank line and returns the data.
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if data != "" {
				return data
			}
			continue
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data += d
		}
	}
}

func TestEvents(t *testing.T) {
	src, _ := fakeSource()
	h := New(src, NewHistory())
	h.interval = 50 * time.Millisecond
	base, _ := serve(t, h)

	r := get(t, base+"/admin/dashboard/events")
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "text/event-stream" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("status %d type %q cache %q", r.StatusCode, r.Header.Get("Content-Type"), r.Header.Get("Cache-Control"))
	}
	br := bufio.NewReader(r.Body)
	var first, second Snapshot
	if err := json.Unmarshal([]byte(readEvent(t, br)), &first); err != nil {
		t.Fatal(err)
	}
	if first.Node != "edge-1" || len(first.Products) != 1 {
		t.Fatalf("first event %+v", first)
	}
	if err := json.Unmarshal([]byte(readEvent(t, br)), &second); err != nil {
		t.Fatal(err)
	}
	if second.Products[0].Attempts <= first.Products[0].Attempts {
		t.Fatalf("counters did not move: %d then %d", first.Products[0].Attempts, second.Products[0].Attempts)
	}
	if h.streams.Load() != 1 {
		t.Fatalf("%d streams open", h.streams.Load())
	}
	// The client goes away: the stream must notice and end.
	r.Body.Close()
	waitStreams(t, h, 0)
}

func waitStreams(t *testing.T, h *Handler, want int32) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for h.streams.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams open, want %d", h.streams.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A stream outlives the listener's WriteTimeout (2 s in serve), ends at its
// own maximum, and sends heartbeats.
func TestEventsOutliveWriteTimeoutAndEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 3 s")
	}
	src, _ := fakeSource()
	h := New(src, NewHistory())
	h.interval = 100 * time.Millisecond
	h.heartbeat = 500 * time.Millisecond
	h.maxStream = 3 * time.Second
	base, _ := serve(t, h)
	start := time.Now()
	r := get(t, base+"/admin/dashboard/events")
	b, err := io.ReadAll(r.Body) // until the server ends the stream
	if err != nil {
		t.Fatalf("stream broke after %v: %v", time.Since(start), err)
	}
	if d := time.Since(start); d < 2900*time.Millisecond || d > 4500*time.Millisecond {
		t.Fatalf("stream lasted %v, want about 3 s", d)
	}
	if n := bytes.Count(b, []byte("\ndata: {")); n < 20 {
		t.Errorf("%d events in 3 s", n)
	}
	if !bytes.Contains(b, []byte("\n: ping\n")) {
		t.Error("no heartbeat")
	}
	waitStreams(t, h, 0)
}

func TestEventsClose(t *testing.T) {
	src, _ := fakeSource()
	h := New(src, NewHistory())
	base, _ := serve(t, h)
	r := get(t, base+"/admin/dashboard/events")
	readEvent(t, bufio.NewReader(r.Body))
	h.Close()
	waitStreams(t, h, 0)
	if r := get(t, base+"/admin/dashboard/events"); r.StatusCode != 503 {
		t.Fatalf("after Close: status %d", r.StatusCode)
	}
}

func TestEventsLimit(t *testing.T) {
	src, _ := fakeSource()
	h := New(src, NewHistory())
	h.maxStreams = 2
	base, _ := serve(t, h)
	for i := 0; i < 2; i++ {
		r := get(t, base+"/admin/dashboard/events")
		readEvent(t, bufio.NewReader(r.Body))
	}
	r := get(t, base+"/admin/dashboard/events")
	b := readAll(t, r)
	if r.StatusCode != 503 || !bytes.Contains(b, []byte(PathJSON)) {
		t.Fatalf("third stream: %d %s", r.StatusCode, b)
	}
	if h.streams.Load() != 2 {
		t.Fatalf("%d streams counted", h.streams.Load())
	}
}

// The whole page, gzipped as served, stays small: it is what an on-call
// engineer loads over a bad VPN in an incident.
func TestPageWeight(t *testing.T) {
	src, _ := fakeSource()
	h := New(src, NewHistory())
	total := gzLen(h.page)
	for _, f := range h.assets {
		total += gzLen(f)
	}
	t.Logf("page and assets: %d bytes gzipped", total)
	if total >= 60<<10 {
		t.Fatalf("page and assets are %d bytes gzipped, want < 60 KB", total)
	}
}

func gzLen(f *file) int {
	if f.gz != nil {
		return len(f.gz)
	}
	return len(f.body)
}

// Nothing on the page may load from, link to or post to anyone else: the
// CSP would block it anyway, and the dashboard must work with nothing else up.
func TestNoThirdPartyURLs(t *testing.T) {
	// The SVG namespace is an identifier, never fetched.
	allowed := map[string]bool{"http://www.w3.org/2000/svg": true}
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s"'<>)]*`)
	err := fs.WalkDir(siteFS, "site", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(siteFS, p)
		if err != nil {
			return err
		}
		for _, m := range url.FindAll(b, -1) {
			if !allowed[string(m)] {
				t.Errorf("%s: third-party URL %s", p, m)
			}
		}
		if bytes.Contains(b, []byte("@import")) {
			t.Errorf("%s: @import", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
