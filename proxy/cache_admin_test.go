package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/syncbuf"
)

// xCache is the X-Cache of a plain GET of path on shop.example.
func xCache(t *testing.T, e *edge, path string, hdr ...string) string {
	t.Helper()
	st, h, _, err := plainGet(e, path, hdr...)
	if err != nil || st != 200 {
		t.Fatalf("GET %s: %d %v", path, st, err)
	}
	return h.Get("X-Cache")
}

// stored fills the cache with path and checks that the next GET is a hit.
func stored(t *testing.T, e *edge, path string, hdr ...string) {
	t.Helper()
	xCache(t, e, path, hdr...)
	if xc := xCache(t, e, path, hdr...); xc != "HIT" {
		t.Fatalf("GET %s again: X-Cache %s, want HIT", path, xc)
	}
}

// unsafe sends method path (a raw request from a client) and returns the
// status.
func unsafe(t *testing.T, e *edge, method, target string) int {
	t.Helper()
	resp, _ := send(t, e, fromClient, method+" "+target+" HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 2\r\n\r\n{}")
	return resp.StatusCode
}

// TestCacheUnsafeMethodsInvalidate: an unsafe request the origin answers
// 2xx or 3xx drops the stored answers of its URL, every variant of it, and
// of its Location and Content-Location on the same host (RFC 9111 §4.4); an
// error answer, or another host's Location, drops nothing.
func TestCacheUnsafeMethodsInvalidate(t *testing.T) {
	o := startEchoOrigin(t)
	e := cacheEdge(t, o, `, key: [method, host, path, query, "cookie:lang"]`)
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		stored(t, e, "/c/item", "Cookie", "lang=de")
		stored(t, e, "/c/item", "Cookie", "lang=fr")
		stored(t, e, "/c/other")
		if st := unsafe(t, e, m, "/c/item"); st != 200 {
			t.Fatalf("%s: %d", m, st)
		}
		if xc := xCache(t, e, "/c/item", "Cookie", "lang=de"); xc != "MISS" {
			t.Errorf("after %s /c/item: the de variant %s, want MISS", m, xc)
		}
		if xc := xCache(t, e, "/c/item", "Cookie", "lang=fr"); xc != "MISS" {
			t.Errorf("after %s /c/item: the fr variant %s, want MISS", m, xc)
		}
		if xc := xCache(t, e, "/c/other"); xc != "HIT" {
			t.Errorf("after %s /c/item: /c/other %s, want HIT", m, xc)
		}
	}

	stored(t, e, "/c/item")
	if st := unsafe(t, e, "POST", "/c/item?status=500"); st != 500 {
		t.Fatalf("POST answered %d", st)
	}
	if st := unsafe(t, e, "POST", "/c/item?status=404"); st != 404 {
		t.Fatalf("POST answered %d", st)
	}
	if xc := xCache(t, e, "/c/item"); xc != "HIT" {
		t.Errorf("after POSTs answered 500 and 404: %s, want HIT", xc)
	}

	stored(t, e, "/c/item")
	stored(t, e, "/c/list?page=2")
	if st := unsafe(t, e, "POST", "/c/new?status=201&loc=/c/item&cloc=http://SHOP.example:8080/c/list%3Fpage%3D2"); st != 201 {
		t.Fatalf("POST answered %d", st)
	}
	if xc := xCache(t, e, "/c/item"); xc != "MISS" {
		t.Errorf("the Location of a 201: %s, want MISS", xc)
	}
	if xc := xCache(t, e, "/c/list?page=2"); xc != "MISS" {
		t.Errorf("the Content-Location of a 201: %s, want MISS", xc)
	}
	stored(t, e, "/c/item")
	for _, loc := range []string{"http://evil.example/c/item", "//evil.example/c/item", "http://evil.example@shop.example/c/item"} {
		unsafe(t, e, "POST", "/c/new?status=303&loc="+strings.ReplaceAll(loc, "/", "%2F"))
		if xc := xCache(t, e, "/c/item"); xc != "HIT" {
			t.Errorf("Location %s: /c/item %s, want HIT (another host's URL is not dropped)", loc, xc)
		}
	}
	m := scrapeEdgeMetrics(t, e)
	// Two variants four times; then the Location's three (de and fr stored
	// again by the checks, and the plain one) and the Content-Location's one.
	if got := m[`flashgate_cache_invalidated_total{route="/c/"}`]; got != 4*2+3+1 {
		t.Errorf("flashgate_cache_invalidated_total = %v, want 12", got)
	}
}

func scrapeEdgeMetrics(t *testing.T, e *edge) map[string]float64 {
	t.Helper()
	resp, err := http.Get(e.adminBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && line[0] != '#' {
			var v float64
			if json.Unmarshal([]byte(line[i+1:]), &v) == nil {
				out[line[:i]] = v
			}
		}
	}
	return out
}

// TestAdminCachePurge: POST /admin/cache/purge drops the stored answers of
// a route, or of the keys with a prefix; the admin guards apply; its metric
// counts them.
func TestAdminCachePurge(t *testing.T) {
	o := startEchoOrigin(t)
	e := cacheEdge(t, o, "")
	for _, p := range []string{"/c/a", "/c/b/1", "/c/b/2"} {
		stored(t, e, p)
	}
	for _, tc := range []struct {
		method, ct, body string
		status           int
	}{
		{"GET", "application/json", "", 405},
		{"POST", "text/plain", `{"route":"/c/"}`, 415},
		{"POST", "application/json", `{}`, 400},
		{"POST", "application/json", `{"route":"/nope/"}`, 404},
		{"POST", "application/json", `{"route":"/c/","extra":1}`, 400},
	} {
		req, _ := http.NewRequest(tc.method, e.adminBase+"/admin/cache/purge", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s %s: %d %s, want %d", tc.method, tc.ct, tc.body, resp.StatusCode, b, tc.status)
		}
	}
	for _, p := range []string{"/c/a", "/c/b/1", "/c/b/2"} {
		if xc := xCache(t, e, p); xc != "HIT" {
			t.Fatalf("%s after refused purges: %s, want HIT", p, xc)
		}
	}

	st, body := post(t, e.adminBase+"/admin/cache/purge", `{"prefix":"GET|shop.example|/c/b/"}`)
	if st != 200 || !strings.Contains(body, `"purged":2`) {
		t.Fatalf("purge by prefix: %d %s", st, body)
	}
	for p, want := range map[string]string{"/c/a": "HIT", "/c/b/1": "MISS", "/c/b/2": "MISS"} {
		if xc := xCache(t, e, p); xc != want {
			t.Errorf("%s after the prefix purge: %s, want %s", p, xc, want)
		}
	}
	st, body = post(t, e.adminBase+"/admin/cache/purge", `{"route":"/c/"}`)
	if st != 200 || !strings.Contains(body, `"purged":3`) {
		t.Fatalf("purge by route: %d %s", st, body)
	}
	for _, p := range []string{"/c/a", "/c/b/1", "/c/b/2"} {
		if xc := xCache(t, e, p); xc != "MISS" {
			t.Errorf("%s after the route purge: %s, want MISS", p, xc)
		}
	}
	if got := scrapeEdgeMetrics(t, e)[`flashgate_cache_purged_total{route="/c/"}`]; got != 5 {
		t.Errorf("flashgate_cache_purged_total = %v, want 5", got)
	}
}

// TestAccessLogNamesTheTrace: the access log line of a proxied request
// names the trace id its origin got in traceparent: the client's when
// valid, a new one otherwise; never a malformed one.
func TestAccessLogNamesTheTrace(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	logs := &syncbuf.Buffer{}
	cfg := strings.Replace(fmt.Sprintf(forwardConfig, "", origin.addr, admin.addr), "access_sample: 0", "access_sample: 1", 1)
	e := startEdgeLogged(t, cfg, logs)
	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct{ name, header, want string }{
		{"valid", "Traceparent: " + client + "\r\n", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"absent", "", ""},
		{"malformed", "Traceparent: 00-ZZZ92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n", ""},
	} {
		send(t, e, fromClient, "GET /page-"+tc.name+" HTTP/1.1\r\nHost: shop.example\r\n"+tc.header+"\r\n")
		tp := origin.next(t).cgi()["HTTP_TRACEPARENT"]
		if len(tp) != 1 || len(tp[0]) != 55 {
			t.Fatalf("%s: the origin got traceparent %q", tc.name, tp)
		}
		id := tp[0][3:35]
		if tc.want != "" && id != tc.want {
			t.Errorf("%s: the origin got trace %s, want the client's %s", tc.name, id, tc.want)
		}
		if tc.want == "" && strings.Contains(tc.header, id) {
			t.Errorf("%s: the origin got the client's trace id %s", tc.name, id)
		}
		line := awaitLogLine(t, logs, "path=/page-"+tc.name)
		if !strings.Contains(line, " trace="+id) {
			t.Errorf("%s: the access log %q, want trace=%s", tc.name, line, id)
		}
		if strings.Contains(line, "ZZZ") {
			t.Errorf("%s: the malformed traceparent reached the log: %q", tc.name, line)
		}
	}
}

// startEdgeLogged is startEdge with its log in logs.
func startEdgeLogged(t *testing.T, body string, logs *syncbuf.Buffer) *edge {
	t.Helper()
	return startEdgeWith(t, body, slog.New(slog.NewTextHandler(logs, nil)))
}

// awaitLogLine returns the first log line containing s; the access log is
// written after the answer, so the test waits for it.
func awaitLogLine(t *testing.T, logs *syncbuf.Buffer, s string) string {
	t.Helper()
	var found string
	await.Until(t, 5*time.Second, "a log line with "+s, func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, s) {
				found = line
				return true
			}
		}
		return false
	})
	return found
}
