package browser

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardCharts: under a little load (a few purchases a second) the
// dashboard's charts draw and move; flipping the degrade switch leaves its
// marker on the time axis of every chart and in the list; the charts fit a
// 1280 px ops screen and a 390 px phone; the all-edges view reads the
// sales' timelines. Screenshots at both widths with BROWSER_SHOTS set.
func TestDashboardCharts(t *testing.T) {
	t.Parallel()
	b := newTab(t, "ops")
	e := startEdge(t, activities(sale("p1", "Chart Drone", "19.00", 5000, 1, "+0s", "+1h")))

	// A little load until the test ends: one buyer after another.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			quietBuy(e, fmt.Sprintf("chart-buyer-%d", i), "p1")
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })

	b.do(chromedp.EmulateViewport(1280, 900))
	b.open(e.admin + "/admin/")
	attempts := `document.querySelector('[data-chart=attempts] path[data-series=attempts]')`
	b.waitJS(15*time.Second, "the attempts line drawn with purchases in it",
		`!!`+attempts+` && Number(`+attempts+`.getAttribute('data-last')) > 0 && Number(document.querySelector('[data-chart=attempts] svg').getAttribute('data-points')) >= 3`)
	if ok := eval[bool](b, `!!document.querySelector('[data-chart=attempts] path[data-series="200"]')`); !ok {
		t.Error("no line for the 200 answers")
	}
	b.waitJS(10*time.Second, "a latency p99 line", `!!document.querySelector('[data-chart=latency] path[data-series=p99]')`)
	b.waitJS(10*time.Second, "the stock line of p1 going down",
		`(function () { var p = document.querySelector('[data-chart=stock] path[data-series=p1]'); return !!p && Number(p.getAttribute('data-last')) < 5000; })()`)
	// The lines move: the path a second later is another one.
	before := eval[string](b, attempts+`.getAttribute('d')`)
	b.waitJS(5*time.Second, "the attempts line to move", attempts+`.getAttribute('d') !== `+jsString(before))
	// A minute's span, to see the seconds.
	b.do(chromedp.SetValue(chromedp.ID("chart-span"), "1"))
	b.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('chart-span').dispatchEvent(new Event('change'))`))
	b.waitText(3*time.Second, "charts-h", regexp.MustCompile(`^Last 1 minute$`))
	b.waitJS(15*time.Second, "ten seconds charted", `Number(document.querySelector('[data-chart=attempts] svg').getAttribute('data-points')) >= 10`)

	// A fault: degrade every sale. Its marker appears on the time axis (and
	// in the list), and the answers turn to 503.
	if r := e.adminPost("/admin/degrade", map[string]any{"on": true}); r.Status != 200 {
		t.Fatalf("degrade: %v", r)
	}
	b.waitJS(5*time.Second, "the degrade marker on the attempts chart",
		`!!document.querySelector('[data-chart=attempts] svg g[data-mark=degrade_on] line') && !!document.querySelector('#chart-marks li[data-mark=degrade_on]')`)
	// While degraded nobody buys: the stock line stands still.
	points := eval[int](b, `Number(document.querySelector('[data-chart=attempts] svg').getAttribute('data-points'))`)
	b.waitJS(10*time.Second, "four seconds more", fmt.Sprintf(`Number(document.querySelector('[data-chart=attempts] svg').getAttribute('data-points')) >= %d`, points+8))
	if n := eval[int](b, `document.querySelectorAll('svg g[data-mark=degrade_on]').length`); n != 6 {
		t.Errorf("the degrade marker is on %d charts, want all 6", n)
	}
	b.keepShot("charts-1280")
	if r := e.adminPost("/admin/degrade", map[string]any{"on": false}); r.Status != 200 {
		t.Fatalf("restore: %v", r)
	}
	b.waitJS(5*time.Second, "the restore marker", `!!document.querySelector('[data-chart=attempts] svg g[data-mark=degrade_off]')`)
	if over := eval[bool](b, `document.getElementById('charts').scrollWidth > document.getElementById('charts').clientWidth + 1`); over {
		t.Error("at 1280 px the charts panel scrolls sideways")
	}

	// A phone: the charts are redrawn to its width, one per row.
	b.do(chromedp.EmulateViewport(390, 844))
	b.waitJS(5*time.Second, "charts redrawn for 390 px", `Array.from(document.querySelectorAll('.chart svg')).every(function (s) { return Number(s.getAttribute('width')) <= 370; })`)
	if over := eval[string](b, `(function () {
  var c = document.getElementById('charts'), out = [];
  if (document.documentElement.scrollWidth > 390 + 1) out.push('page ' + document.documentElement.scrollWidth);
  if (c.scrollWidth > c.clientWidth + 1) out.push('charts ' + c.scrollWidth + '>' + c.clientWidth);
  return out.join(' ');
})()`); over != "" {
		t.Errorf("at 390 px something is wider than the screen: %s", over)
	}
	if fs := eval[float64](b, `parseFloat(getComputedStyle(document.querySelector('.chart .xtick')).fontSize)`); fs < 10 {
		t.Errorf("axis labels at %v px on a phone, want at least 10", fs)
	}
	b.keepShot("charts-390")

	// All edges: the timelines in Redis, summed (this edge is node 7).
	b.do(chromedp.EmulateViewport(1280, 900))
	b.do(chromedp.SetValue(chromedp.ID("chart-scope"), "fleet"))
	b.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('chart-scope').dispatchEvent(new Event('change'))`))
	b.waitJS(10*time.Second, "the all-edges attempts line", attempts+` && Number(`+attempts+`.getAttribute('data-last')) >= 0 && /edge 7/.test(document.getElementById('charts-note').textContent)`)
}

// quietBuy is a purchase (token, then do) that never fails the test: the
// load runs on its own goroutine, and an answer or an error is all the same
// to it.
func quietBuy(e *edge, user, product string) {
	post := func(path, body string) map[string]any {
		req, _ := http.NewRequest("POST", e.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+e.session(user))
		res, err := e.hc.Do(req)
		if err != nil {
			return nil
		}
		defer res.Body.Close()
		var m map[string]any
		json.NewDecoder(res.Body).Decode(&m)
		return m
	}
	tok, _ := post("/api/seckill/token", `{"productId":"`+product+`"}`)["token"].(string)
	if tok != "" {
		post("/api/seckill/do", `{"productId":"`+product+`","token":"`+tok+`","quantity":1}`)
	}
}
