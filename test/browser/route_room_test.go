package browser

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
)

// startShopOrigin is a loopback origin with a page per path; /shop/done
// ends the visitor's session (the room's end header). It counts the page
// requests it served.
func startShopOrigin(t *testing.T) (addr string, served *atomic.Int64) {
	t.Helper()
	served = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		served.Add(1)
		if string(ctx.Path()) == "/shop/done" {
			ctx.Response.Header.Set("Flashgate-Room", "end")
		}
		ctx.SetContentType("text/html; charset=utf-8")
		fmt.Fprintf(ctx, `<!doctype html><title>Shop</title><h1 id="origin">The origin's page %s</h1>`, ctx.Path())
	}}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String(), served
}

// startShopEdge is an edge whose /shop/ route goes to origin behind the
// waiting room room (a YAML flow mapping).
func startShopEdge(t *testing.T, origin, room string) *edge {
	return startEdge(t, fmt.Sprintf(`
upstreams:
  pools:
    - name: shop
      servers: [%q]
  routes:
    - prefix: /shop/
      pool: shop
      waiting_room: %s
`, origin, room))
}

func (b *tab) setCookie(base, name, value string) {
	b.t.Helper()
	b.call(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, network.SetCookie, network.SetCookieParams{Name: name, Value: value, URL: base + "/"})
		return err
	})
}

func (b *tab) setHeaders(h map[string]any) {
	b.t.Helper()
	b.call(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers(h)})
		return err
	})
}

// TestRouteRoomInBrowser: a room (max_active 1) in front of a proxied
// route. The first visitor gets the origin's page; the second the queue
// page, with their place, polling; the origin ends the first visitor's
// session and the second is let in on their next poll and lands on the
// origin's page without a click; a visitor with a minted bypass cookie
// walks past the queue; a Chinese browser gets the page in Chinese; no
// page asks anything of another origin.
func TestRouteRoomInBrowser(t *testing.T) {
	origin, served := startShopOrigin(t)
	e := startShopEdge(t, origin, "{name: shop, title: Launch day, max_active: 1, session: 1m, poll: 1s}")
	first, second := newTab(t, "first"), newTab(t, "second")
	first.open(e.base + "/shop/")
	first.waitJS(5*time.Second, "the origin's page", `!!document.getElementById('origin')`)

	second.setHeaders(map[string]any{"Accept-Language": "en-GB,en;q=0.9"})
	before := served.Load()
	second.open(e.base + "/shop/")
	second.waitJS(5*time.Second, "the queue page", `(document.getElementById('fg-room') || {}).dataset && document.getElementById('fg-room').dataset.status === 'waiting'`)
	if p := second.text("fg-place"); p != "1" {
		t.Fatalf("second visitor's place %q, want 1", p)
	}
	if !strings.Contains(second.text("fg-room"), "Launch day") || !strings.Contains(second.text("fg-room"), "You are in the queue") {
		t.Errorf("queue page: %q", second.text("fg-room"))
	}
	second.keepShot("queue-page-en")
	// The page polls (the edge answers; the origin sees none of it).
	mark := second.mark()
	second.waitNet(5*time.Second, "two polls", func(rs []netReq) bool {
		n := 0
		for _, r := range rs[mark:] {
			if r.Type == network.ResourceTypeFetch && strings.HasSuffix(r.URL, "/shop/") && r.Status == 200 {
				n++
			}
		}
		return n >= 2
	})
	if got := served.Load(); got != before {
		t.Fatalf("the origin served %d requests while the second visitor waited", got-before)
	}

	// Chinese.
	zh := newTab(t, "zh")
	zh.setHeaders(map[string]any{"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"})
	zh.open(e.base + "/shop/")
	zh.waitJS(5*time.Second, "the Chinese queue page", `!!document.getElementById('fg-room') && document.getElementById('fg-room').textContent.indexOf('您正在排队') >= 0`)
	if p := zh.text("fg-place"); p != "2" {
		t.Errorf("the Chinese visitor's place %q, want 2", p)
	}
	zh.keepShot("queue-page-zh")

	// A bypass cookie walks past the full room.
	r := e.adminPost("/admin/rooms/bypass", map[string]string{"room": "shop", "ttl": "10m"})
	staff := newTab(t, "staff")
	staff.setCookie(e.base, "fg_room_bypass", r.field("token"))
	staff.open(e.base + "/shop/staff")
	staff.waitJS(5*time.Second, "the origin's page past the queue", `!!document.getElementById('origin')`)

	// The origin ends the first visitor's session; the second is let in on
	// their next poll and the page reloads onto the origin's.
	first.open(e.base + "/shop/done")
	first.waitJS(5*time.Second, "the origin's done page", `!!document.getElementById('origin')`)
	// The page reloads itself: wait across the navigation.
	await.Until(t, 8*time.Second, "the second visitor on the origin's page", func() bool {
		ctx, cancel := context.WithTimeout(second.ctx, time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.getElementById('origin')`))
		return err == nil && ok
	})
	// The first visitor, whose session ended, queues again.
	first.open(e.base + "/shop/")
	first.waitJS(5*time.Second, "the first visitor queued again", `!!document.getElementById('fg-room')`)

	for _, tb := range []*tab{first, second, zh, staff} {
		for _, r := range tb.requests(0) {
			if !strings.HasPrefix(r.URL, e.base+"/") {
				t.Errorf("%s: request to another origin: %s %s", tb.name, r.Method, r.URL)
			}
		}
	}
}

// TestRouteRoomDashboard: the dashboard's Route rooms panel shows a room
// and switches its method live (POST /admin/rooms), which the edge then
// applies to the next visitor.
func TestRouteRoomDashboard(t *testing.T) {
	origin, _ := startShopOrigin(t)
	e := startShopEdge(t, origin, "{name: shop, max_active: 5}")
	b := newTab(t, "dashboard")
	b.open(e.admin + "/admin/")
	b.waitJS(8*time.Second, "the route rooms panel", `(function () {
  var p = document.getElementById('routerooms'), r = document.querySelector('#routerooms-rows tr[data-room="shop"] .method');
  return !!p && !p.hidden && !!r && r.textContent === 'fifo';
})()`)
	b.do(chromedp.SetValue(chromedp.CSS(`#routerooms-rows tr[data-room="shop"] select`), "queue_all"))
	b.do(chromedp.Click(chromedp.CSS(`#routerooms-rows tr[data-room="shop"] button`)))
	b.waitText(5*time.Second, "routerooms-result", regexp.MustCompile(`^Room shop now queues by queue_all, on every edge\.$`))
	b.waitJS(5*time.Second, "the panel shows the operator's method", `document.querySelector('#routerooms-rows tr[data-room="shop"] .method').textContent === 'queue_all (operator)'`)
	visitor := newTab(t, "visitor")
	visitor.open(e.base + "/shop/")
	visitor.waitJS(5*time.Second, "the queue page", `!!document.getElementById('fg-room')`)
	// Over time: the waiting visitor reaches the panel's count and its line
	// (two polls at least), and the last minute's figures are shown.
	b.waitJS(10*time.Second, "the room's line over time", `(function () {
  var tr = document.querySelector('#routerooms-rows tr[data-room="shop"]');
  var p = tr && tr.querySelector('.spark polyline.spark-w');
  return tr.querySelector('.waiting').textContent === '1' && !!p && p.getAttribute('points').split(' ').length >= 2 &&
    tr.querySelector('.perMin').textContent !== '' && tr.querySelector('.abandonRate').textContent !== '';
})()`)
	b.keepShot("route-rooms-panel")
}

// TestRouteRoomChallengeInBrowser: a room with challenge.difficulty serves
// a new visitor the queue page with a proof of work, which its script
// solves in the sale page's worker (/seckill/_static/pow.js, allowed by the
// page's worker-src) and sends with its poll; there is a free seat, so the
// visitor lands on the origin's page without a click, and the origin
// served nothing before.
func TestRouteRoomChallengeInBrowser(t *testing.T) {
	origin, served := startShopOrigin(t)
	e := startShopEdge(t, origin, "{name: shop, max_active: 5, poll: 1s, challenge: {difficulty: 10}}")
	b := newTab(t, "visitor")
	b.open(e.base + "/shop/")
	// The page reloads itself once in: wait across the navigation.
	await.Until(t, 15*time.Second, "the origin's page after the proof of work", func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.getElementById('origin')`))
		return err == nil && ok
	})
	var worker bool
	for _, r := range b.requests(0) {
		worker = worker || strings.HasSuffix(r.URL, "/seckill/_static/pow.js")
	}
	if !worker {
		t.Error("the page did not load the proof-of-work worker")
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the origin served %d pages, want 1 (none before the proof)", n)
	}
}
