package browser

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// paySale is a one-unit sale whose orders must be paid within timeout.
func paySale(id string, timeout string) string {
	return fmt.Sprintf("  - {product_id: %s, name: \"Pay Sneaker\", price: \"9.00\", stock: 1, limit: 1, start: \"+0s\", end: \"+1h\", pay_timeout: %s}\n", id, timeout)
}

var payLine = regexp.MustCompile(`^Order (\d+) is reserved\. Pay by \d\d:\d\d \((\d+:\d\d) left\)\.$`)

// TestPayDeadlineExpires: the shopper buys the only unit, sees the time to
// pay counting down, reloads and still sees the order and its countdown,
// lets the deadline pass, and sees the order expire and the unit back on
// sale — which another shopper then buys.
func TestPayDeadlineExpires(t *testing.T) {
	t.Parallel()
	e := startEdge(t, activities(paySale("p1", "3s")))
	b := newTab(t, "alice")
	b.open(e.page("p1"))
	b.signIn("alice")
	b.clickBuy()
	msg := b.waitText(10*time.Second, "message", payLine)
	id := payLine.FindStringSubmatch(msg)[1]
	if got := b.text("order-id"); got != id {
		t.Errorf("#order-id = %q, the message names order %s", got, id)
	}
	if r := e.result("alice", "p1", id); r.Status != 200 || r.field("status") != "success" || r.field("payByMs") == "" {
		t.Errorf("result of %s: %v, want success with payByMs", id, r)
	}
	// The only unit is held: sold out for now.
	b.waitBuy(3*time.Second, `^Sold out$`, false)

	// A reload forgets nothing: the order and its countdown are back.
	b.do(chromedp.Reload())
	again := b.waitText(5*time.Second, "message", payLine)
	if got := payLine.FindStringSubmatch(again)[1]; got != id {
		t.Errorf("after a reload the page shows order %s, want %s", got, id)
	}
	b.waitJS(3*time.Second, "the order line after the reload", `document.getElementById('order-id').textContent === `+jsString(id))

	b.waitText(10*time.Second, "message", regexp.MustCompile(`^Expired — the item went back on sale\.$`))
	msgs, _ := b.history()
	var left []string
	for _, m := range msgs {
		if sm := payLine.FindStringSubmatch(m); sm != nil && !slices.Contains(left, sm[2]) {
			left = append(left, sm[2])
		}
	}
	if len(left) < 2 {
		t.Errorf("the countdown showed %q after the reload, want it ticking", left)
	}
	// Back on sale: Buy turns on again, for this shopper too.
	b.waitBuy(5*time.Second, `^Buy now$`, true)
	if r := e.result("alice", "p1", id); r.Status != 200 || r.field("status") != "expired" {
		t.Errorf("result of %s after the deadline: %v, want expired", id, r)
	}
	// The unit is really there: another shopper gets it.
	bob := e.mustBuy("bob", "p1", 1)
	if bob == id {
		t.Fatalf("bob got alice's order id %s", id)
	}
	// A reload after the expiry shows nothing stale.
	b.do(chromedp.Reload())
	b.waitJS(5*time.Second, "the status after the reload", `document.getElementById('status').textContent !== 'Loading…'`)
	if m := b.text("message"); strings.Contains(m, "Pay by") {
		t.Errorf("after the expiry a reload shows %q", m)
	}
}

// TestPayDeadlinePaid: paid in time (the payment system calls the admin
// API), the page says so, and a reload still does; the deadline then
// changes nothing.
func TestPayDeadlinePaid(t *testing.T) {
	t.Parallel()
	e := startEdge(t, activities(paySale("p1", "4s")))
	b := newTab(t, "carol")
	b.open(e.page("p1"))
	b.signIn("carol")
	b.clickBuy()
	id := payLine.FindStringSubmatch(b.waitText(10*time.Second, "message", payLine))[1]
	if r := e.adminPost("/admin/orders/paid", map[string]any{"productId": "p1", "orderId": id}); r.field("status") != "paid" {
		t.Fatalf("paid: %v", r)
	}
	paid := regexp.MustCompile(`^Paid — thank you\. Order ` + id + ` is yours\.$`)
	b.waitText(8*time.Second, "message", paid)
	b.do(chromedp.Reload())
	b.waitText(5*time.Second, "message", paid)
	// Past the deadline (and a sweep) the order stays paid and the unit sold.
	b.waitJS(6*time.Second, "the deadline to pass", `Date.now() > `+fmt.Sprint(time.Now().Add(4500*time.Millisecond).UnixMilli()))
	if r := e.result("carol", "p1", id); r.field("status") != "paid" {
		t.Errorf("result after the deadline: %v, want paid", r)
	}
	if st := e.status("p1"); st["remaining"] != float64(0) {
		t.Errorf("remaining after the deadline of a paid order: %v, want 0", st["remaining"])
	}
}

// TestDashboardPayments: the dashboard's Payments panel shows a sale's
// unpaid, paid and expired units and its next deadlines, and follows a
// payment and an expiry.
func TestDashboardPayments(t *testing.T) {
	t.Parallel()
	e := startEdge(t, activities(
		"  - {product_id: d1, name: \"Deadline Drone\", price: \"5.00\", stock: 10, limit: 5, start: \"+0s\", end: \"+1h\", pay_timeout: 1h}\n",
		paySale("d2", "2s")))
	b := newTab(t, "ops")
	b.do(chromedp.EmulateViewport(1280, 900))
	b.open(e.admin + "/admin/")
	row := func(p string) string { return `document.querySelector('#payments tr[data-product="` + p + `"]')` }
	cell := func(p, cls string) string {
		return `((` + row(p) + ` || {querySelector: function () { return null; }}).querySelector('.` + cls + `') || {}).textContent`
	}
	b.waitJS(5*time.Second, "d1's payments row with nothing due", cell("d1", "deadlines")+` === 'none' && `+cell("d1", "unpaid")+` === '0'`)

	paid := e.mustBuy("ops-a", "d1", 1)
	e.mustBuy("ops-b", "d1", 2)
	e.mustBuy("ops-c", "d2", 1)
	b.waitJS(10*time.Second, "d1: 3 units unpaid, 2 orders due in about an hour",
		cell("d1", "unpaid")+` === '3' && `+cell("d1", "due")+` === '2' && /^(59:\d\d|1:00:00), (59:\d\d|1:00:00)$/.test(`+cell("d1", "deadlines")+`)`)
	e.adminPost("/admin/orders/paid", map[string]any{"productId": "d1", "orderId": paid})
	b.waitJS(10*time.Second, "d1: 1 paid, 2 unpaid, 1 due", cell("d1", "paid")+` === '1' && `+cell("d1", "unpaid")+` === '2' && `+cell("d1", "due")+` === '1'`)
	b.waitJS(15*time.Second, "d2's unit expired and nothing due", cell("d2", "expired")+` === '1' && `+cell("d2", "unpaid")+` === '0' && `+cell("d2", "deadlines")+` === 'none'`)
}
