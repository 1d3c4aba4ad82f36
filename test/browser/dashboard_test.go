package browser

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardMoves opens the ops dashboard on the admin listener, buys
// through the API while it is open, and watches the product's numbers
// move. Without an admin token the page uses the live stream; with one it
// needs the token typed in and polls.
func TestDashboardMoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, token, mode string
	}{
		{"open listener", "", "live stream"},
		{"admin token", "browser-admin-token-0123456789abcdef", "polling every second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newTab(t, "ops")
			e := startEdge(t,
				activities(sale("p1", "Dashboard Drone", "49.00", 50, 5, "+0s", "+1h")),
				fmt.Sprintf("admin: {token: %q}\n", tc.token))
			// An ops screen; the products table is made to fit 1200 px.
			b.do(chromedp.EmulateViewport(1280, 900))
			b.open(e.admin + "/admin/")
			if tc.token != "" {
				b.waitText(5*time.Second, "notice", regexp.MustCompile(`needs the admin token`))
				b.do(
					chromedp.SendKeys(chromedp.ID("token"), tc.token),
					chromedp.Click(chromedp.CSS("#token-form button[type=submit]")),
				)
			}
			row := `document.querySelector('#products tr[data-product="p1"]')`
			num := func(cls string) string {
				return `Number((` + row + `.querySelector('.` + cls + `') || {}).getAttribute('data-value'))`
			}
			b.waitJS(5*time.Second, "the p1 row with 50 left, 0 sold", `!!`+row+` && `+num("remaining")+` === 50 && `+num("sold")+` === 0`)
			b.waitText(3*time.Second, "breaker", regexp.MustCompile(`^Breaker: closed$`))
			if tone := eval[string](b, `document.getElementById('breaker').getAttribute('data-tone')`); tone != "ok" {
				t.Errorf("#breaker tone %q, want ok", tone)
			}
			b.waitText(3*time.Second, "updated", regexp.MustCompile(`^Updated \d\d:\d\d:\d\d · `+tc.mode+`$`))
			filters := eval[[]string](b, `Array.from(document.querySelectorAll('#filters tr[data-filter]')).map(function (r) { return r.getAttribute('data-filter'); })`)
			if len(filters) < 3 {
				t.Errorf("filters table rows %q, want the chain's filters", filters)
			}

			for i := range 3 {
				e.mustBuy(fmt.Sprintf("ops-buyer-%d", i), "p1", 1)
			}
			b.waitJS(5*time.Second, "the p1 row at 47 left, 3 sold", num("remaining")+` === 47 && `+num("sold")+` === 3`)
			b.waitJS(5*time.Second, "a purchase rate above 0", num("aps")+` > 0`)
			b.waitJS(5*time.Second, "3 stored orders", `Number(document.querySelector('#pipeline dd.stored').textContent) >= 3`)
			if n := eval[string](b, row+`.querySelector('.remaining').textContent`); n != "47" {
				t.Errorf("p1 .remaining shows %q, want 47", n)
			}
			if s := b.text("updated"); !regexp.MustCompile(`^Updated `).MatchString(s) {
				t.Errorf("#updated %q: stale", s)
			}
			if over := eval[string](b, `Array.from(document.querySelectorAll('.scroll')).filter(function (s) { return s.scrollWidth > s.clientWidth + 1; }).map(function (s) { return s.parentNode.id || s.parentNode.getAttribute('aria-labelledby'); }).join(' ')`); over != "" {
				t.Errorf("at 1280 px these tables scroll sideways: %s", over)
			}
			b.keepShot("dashboard")
		})
	}
}

// TestDashboardShowsNoRawSentinels: a figure the edge does not know is sent
// as -1 (dashboard.Unknown); the page must say so in words, never print
// "-1" in a table an operator reads during an incident.
func TestDashboardShowsNoRawSentinels(t *testing.T) {
	t.Parallel()
	b := newTab(t, "ops")
	e := startEdge(t, activities(sale("p1", "Sentinel", "1.00", 5, 1, "+0s", "+1h")))
	b.do(chromedp.EmulateViewport(1280, 900))
	b.open(e.admin + "/admin/")
	b.waitJS(5*time.Second, "the p1 row", `!!document.querySelector('#products tr[data-product="p1"] .remaining[data-value="5"]')`)
	cells := eval[[]string](b, `Array.from(document.querySelectorAll('#products td, #products th, #filters td, #pipeline dd')).map(function (c) {
  return (c.className || c.tagName) + '=' + c.textContent.trim();
})`)
	for _, c := range cells {
		if regexp.MustCompile(`=-\d`).MatchString(c) {
			t.Errorf("dashboard cell %q shows a raw negative sentinel; want 'unknown' (or the real figure)", c)
		}
	}
}
