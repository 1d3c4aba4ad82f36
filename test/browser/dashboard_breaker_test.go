package browser

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"flashgate/internal/redistest"
	"flashgate/orders/stock"
)

// TestDashboardShowsEachProductsBreaker: every deduction for one product
// fails inside Redis (its stock key holds the wrong type) until its breaker
// opens, while another product sells on. The dashboard shows the breaker per
// product — open for the one, closed for the other — and its badge counts
// the open ones; the charts mark the moment it opened, on that product only.
func TestDashboardShowsEachProductsBreaker(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	e := startEdge(t, activities(sale("good", "Fine", "1.00", 10, 5, "+0s", "+1h"), sale("bad", "Broken", "1.00", 10, 5, "+0s", "+1h")),
		fmt.Sprintf("redis: {addr: %q}\nsale: {breaker_failures: 2, breaker_open_for: 1h}\n", srv.Addr()))
	e.mustBuy("warm-up", "bad", 1) // the sale is warmed and selling
	rd := redistest.Client(t, srv.Addr())
	ctx := context.Background()
	rd.Do(ctx, rd.B().Del().Key(stock.StockKey("bad")).Build())
	if err := rd.Do(ctx, rd.B().Hset().Key(stock.StockKey("bad")).FieldValue().FieldValue("broken", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r := e.buy(fmt.Sprintf("bad-%d", i), "bad", 1); r.Status != 503 {
			t.Fatalf("purchase %d of the broken product: %v, want 503", i, r)
		}
	}
	e.mustBuy("good-buyer", "good", 1)

	b := newTab(t, "ops")
	b.do(chromedp.EmulateViewport(1280, 900))
	b.open(e.admin + "/admin/")
	cell := func(product string) string {
		return `document.querySelector('#products tr[data-product="` + product + `"] .breaker')`
	}
	b.waitJS(5*time.Second, "bad's breaker shown open", `!!`+cell("bad")+` && `+cell("bad")+`.getAttribute('data-state') === 'open'`)
	if got := eval[string](b, cell("bad")+`.textContent`); got != "OPEN" {
		t.Errorf("bad's breaker cell %q, want OPEN", got)
	}
	if got := eval[string](b, cell("good")+`.getAttribute('data-state') + ' ' + `+cell("good")+`.textContent`); got != "closed closed" {
		t.Errorf("good's breaker cell %q, want state and text closed", got)
	}
	b.waitText(3*time.Second, "breaker", regexp.MustCompile(`^Breaker: open \(1 open of 2 products\)$`))
	// The charts mark the moment bad's breaker opened, on bad's lines
	// and not on good's.
	b.waitJS(5*time.Second, "bad's breaker marked on the charts",
		`!!document.querySelector('[data-chart=attempts] svg g[data-mark=breaker_open][data-product=bad]') && !!document.querySelector('#chart-marks li[data-mark=breaker_open]')`)
	b.keepShot("breakers")
	b.do(chromedp.SetValue(chromedp.ID("chart-product"), "good"))
	b.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('chart-product').dispatchEvent(new Event('change'))`))
	b.waitJS(3*time.Second, "no breaker marker on good's charts", `!document.querySelector('svg g[data-mark=breaker_open]')`)
	if tone := eval[string](b, `document.getElementById('breaker').getAttribute('data-tone')`); tone != "bad" {
		t.Errorf("#breaker tone %q, want bad", tone)
	}
}
