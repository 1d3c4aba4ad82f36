package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
)

// roomOrigin counts the visitors it serves at once: a visitor is active
// from their first request until the origin answers their /shop/done with
// the end header. It removes them before the edge frees the seat, so its
// count never runs ahead of the room's.
type routeRoomOrigin struct {
	addr      string
	mu        sync.Mutex
	active    map[string]bool
	served    map[string]bool
	maxActive int
	requests  int
}

func startRouteRoomOrigin(t *testing.T) *routeRoomOrigin {
	o := &routeRoomOrigin{active: map[string]bool{}, served: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		v := string(ctx.Request.Header.Peek("X-Visitor"))
		o.mu.Lock()
		o.requests++
		if string(ctx.Path()) == "/shop/done" {
			delete(o.active, v)
			ctx.Response.Header.Set("Flashgate-Room", "end")
		} else {
			o.active[v] = true
			o.served[v] = true
			o.maxActive = max(o.maxActive, len(o.active))
		}
		o.mu.Unlock()
		ctx.Response.Header.Set("X-Origin", "yes")
		ctx.SetBodyString("origin")
	}}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	o.addr = ln.Addr().String()
	return o
}

// shopRoomConfig is the edges' config: the origin on /, and on /shop/
// behind room shop of the cap, sessions of a minute, polls every poll.
func shopRoomConfig(origin string, maxActive int, poll string) string {
	return fmt.Sprintf(`
upstreams:
  pools:
    - name: origin
      servers: [%q]
  routes:
    - prefix: /
      pool: origin
    - prefix: /shop/
      pool: origin
      waiting_room:
        name: shop
        max_active: %d
        session: 1m
        poll: %s
`, origin, maxActive, poll)
}

// TestRouteRoomTwoEdges: two real edge processes (the proxy binary) on one
// real Redis in front of a loopback origin, a room with max_active 4. 16
// visitors, each sending every request to the two edges in turn, wait
// until they reach the origin, make three requests there, and end their
// session at the origin. The origin never serves more than 4 at once (the
// cap holds across the edges, and nobody unadmitted reaches it), everyone
// gets in, and a method switched on one edge's admin API closes the room
// on the other within the tick.
func TestRouteRoomTwoEdges(t *testing.T) {
	bin := buildProxy(t)
	r := redistest.New(t)
	o := startRouteRoomOrigin(t)
	cfg := shopRoomConfig(o.addr, 4, "1s")
	adminA := ordFreePort(t)
	edges := []*process{
		startProcess(t, bin, r.Addr(), cfg, "node_id: 1\nadmin: {addr: \""+adminA+"\"}\n"),
		startProcess(t, bin, r.Addr(), cfg, "node_id: 2\n"),
	}
	const visitors = 16
	type outcome struct {
		queued, admitted bool
		err              error
	}
	results := make(chan outcome, visitors)
	for i := range visitors {
		go func() {
			jar, _ := cookiejar.New(nil) // cookies ignore the port: both edges see them
			c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
			n := 0
			get := func(path string, poll bool) (*http.Response, error) {
				req, _ := http.NewRequest("GET", "http://"+edges[n%2].addr+path, nil)
				n++
				req.Header.Set("X-Visitor", strconv.Itoa(i))
				if poll {
					req.Header.Set("Flashgate-Room-Poll", "1")
				}
				resp, err := c.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				return resp, err
			}
			var out outcome
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				resp, err := get("/shop/item", false)
				if err != nil {
					out.err = err
					break
				}
				if resp.Header.Get("X-Origin") == "yes" {
					out.admitted = true
					break
				}
				out.queued = true
				// Poll (answered by the edges, never the origin) until admitted.
				for time.Now().Before(deadline) {
					p, err := get("/shop/item", true)
					if err != nil || p.StatusCode != 200 {
						break
					}
					if strings.Contains(p.Header.Get("Content-Type"), "json") && p.Header.Get("Retry-After") == "" {
						break // admitted: the next page request goes through
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if out.admitted {
				for range 2 {
					if resp, err := get("/shop/item", false); err != nil || resp.Header.Get("X-Origin") != "yes" {
						out.err = fmt.Errorf("an admitted visitor lost the way: %v", err)
					}
				}
				if _, err := get("/shop/done", false); err != nil {
					out.err = err
				}
			}
			results <- out
		}()
	}
	queued := 0
	for range visitors {
		out := <-results
		if out.err != nil || !out.admitted {
			t.Errorf("visitor: %+v", out)
		}
		if out.queued {
			queued++
		}
	}
	o.mu.Lock()
	maxActive, served := o.maxActive, len(o.served)
	o.mu.Unlock()
	t.Logf("%d visitors, %d queued first; the origin served at most %d at once", visitors, queued, maxActive)
	if maxActive > 4 || served != visitors || queued == 0 {
		t.Fatalf("origin: at most %d at once (cap 4), %d served, %d queued", maxActive, served, queued)
	}

	// A switch on edge 1's admin API closes the room on edge 2 too.
	resp, err := http.Post("http://"+adminA+"/admin/rooms", "application/json", strings.NewReader(`{"room":"shop","method":"reject"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("switch: %v %v", err, resp)
	}
	resp.Body.Close()
	await.Until(t, 5*time.Second, "edge 2 closes the room", func() bool {
		r, err := http.Get("http://" + edges[1].addr + "/shop/item")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 503
	})
}

// TestRouteRoomTwoEdgesWakeAndEnd: two real edges on one Redis, a room of
// one seat. Visitor c's app request, at the head of the line, is held by
// edge 2; the origin ends visitor a's session through edge 1, and edge 2
// is told at once: c's held request is woken (not timed out) and goes on
// to the origin, and a copy of a's pass from before the end, replayed on
// edge 2, is not let in from memory (the room is full: it queues).
func TestRouteRoomTwoEdgesWakeAndEnd(t *testing.T) {
	bin := buildProxy(t)
	r := redistest.New(t)
	o := startRouteRoomOrigin(t)
	cfg := shopRoomConfig(o.addr, 1, "5s")
	admin2 := ordFreePort(t)
	e1 := startProcess(t, bin, r.Addr(), cfg, "node_id: 1\n")
	e2 := startProcess(t, bin, r.Addr(), cfg, "node_id: 2\nadmin: {addr: \""+admin2+"\"}\n")
	get := func(c *http.Client, base, path, visitor string, hdr ...string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+base+path, nil)
		req.Header.Set("X-Visitor", visitor)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", base, path, err)
			return 0, nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	metric := func(series string) string {
		resp, err := http.Get("http://" + admin2 + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, series+" ") {
				return strings.TrimPrefix(l, series+" ")
			}
		}
		return ""
	}
	jarA, _ := cookiejar.New(nil)
	a := &http.Client{Jar: jarA, Timeout: 10 * time.Second}
	if st, h := get(a, e1.addr, "/shop/item", "a"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("a: %d", st)
	}
	var pass string
	for _, ck := range jarA.Cookies(&url.URL{Scheme: "http", Host: e1.addr}) {
		if ck.Name == "fg_room_shop" {
			pass = ck.Value
		}
	}
	jarC, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jarC, Timeout: 10 * time.Second}
	app := []string{"Accept", "application/json"}
	if st, h := get(c, e2.addr, "/shop/item", "c", app...); st != 503 || h.Get("X-Origin") != "" {
		t.Fatalf("c's first request: %d", st)
	}
	held := make(chan bool, 1)
	go func() {
		st, h := get(c, e2.addr, "/shop/item", "c", app...)
		held <- st == 200 && h.Get("X-Origin") == "yes"
	}()
	await.Until(t, 5*time.Second, "edge 2 holds c's request", func() bool { return metric(`flashgate_route_room_held{room="shop"}`) == "1" })
	if st, h := get(a, e1.addr, "/shop/done", "a"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("a's end: %d", st)
	}
	if !<-held {
		t.Fatal("c's held request did not reach the origin")
	}
	if w := metric(`flashgate_route_room_holds_total{room="shop",end="woken"}`); w != "1" {
		t.Errorf("c's hold was not woken by the end on edge 1: woken %q, timed out %q", w, metric(`flashgate_route_room_holds_total{room="shop",end="timed_out"}`))
	}
	// a's pass from before the end, replayed on edge 2: queued, not in.
	replay := &http.Client{Timeout: 10 * time.Second}
	if st, h := get(replay, e2.addr, "/shop/item", "a-replayed", "Cookie", "fg_room_shop="+pass); st == 200 && h.Get("X-Origin") == "yes" {
		t.Fatal("a's ended pass, replayed on edge 2, reached the origin")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.served["a-replayed"] || o.maxActive > 1 {
		t.Fatalf("origin: served the replay %v, at most %d at once (cap 1)", o.served["a-replayed"], o.maxActive)
	}
}
