package browser

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardActionsPassTheAdminGuard: the admin listener refuses
// state-changing calls that are not JSON, a foreign Host and a foreign
// Origin (what a web page could send). The dashboard's own forms are
// same-origin JSON calls and must still work: a reload (a POST without a
// body) and the degrade switch, from the page, with the admin token.
func TestDashboardActionsPassTheAdminGuard(t *testing.T) {
	t.Parallel()
	const token = "browser-admin-token-0123456789abcdef"
	b := newTab(t, "ops")
	e := startEdge(t,
		activities(sale("p1", "Guarded Drone", "49.00", 50, 5, "+0s", "+1h")),
		"admin: {token: \""+token+"\"}\n")
	b.open(e.admin + "/admin/")
	b.do(
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS("#token-form button[type=submit]")),
	)
	result := func(form string) string {
		return `document.querySelector('#` + form + ` .result')`
	}
	b.do(chromedp.Click(chromedp.CSS("#form-reload button[type=submit]")))
	b.waitJS(5*time.Second, "the reload's success", result("form-reload")+`.getAttribute('data-ok') === 'true' && /now version 2/.test(`+result("form-reload")+`.textContent)`)

	b.do(
		chromedp.SendKeys(chromedp.CSS("#form-degrade input[name=productId]"), "p1"),
		chromedp.Click(chromedp.CSS("#form-degrade button[data-on=true]")),
	)
	b.waitJS(5*time.Second, "the degrade's success", result("form-degrade")+`.getAttribute('data-ok') === 'true'`)
	if !e.srv.Sale().Degraded([]byte("p1")) {
		t.Fatalf("the page said degraded, the edge did not: %s", b.state())
	}
}
