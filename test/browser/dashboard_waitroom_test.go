package browser

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// roomRow is p1's line of GET /admin/waitroom.
func (e *edge) roomRow(product string) map[string]any {
	e.t.Helper()
	r := e.request("GET", e.admin+"/admin/waitroom", e.token, nil)
	var body struct {
		Sales []map[string]any `json:"sales"`
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &body) != nil {
		e.t.Fatalf("GET /admin/waitroom: %v", r)
	}
	for _, s := range body.Sales {
		if s["productId"] == product {
			return s
		}
	}
	e.t.Fatalf("GET /admin/waitroom has no %s: %s", product, r.Body)
	return nil
}

// TestDashboardWaitingRoomPanel: a sale with a waiting room gets a row in
// the dashboard's waiting-room panel (a sale without one does not), with
// the figures of GET /admin/waitroom; the operator's buttons change the
// room on the edge — the rate, pause and resume, and close, which asks
// once more before it closes.
func TestDashboardWaitingRoomPanel(t *testing.T) {
	t.Parallel()
	b := newTab(t, "ops")
	room := "waiting_room: {enabled: true, prequeue_opens: 2h, admit_per_minute: 600, session: 5m}"
	e := startEdge(t, activities(
		fmt.Sprintf("  - {product_id: p1, name: \"Queued Drone\", price: \"49.00\", stock: 50, limit: 1, start: \"+1h\", end: \"+2h\", %s}\n", room),
		sale("p2", "Plain Drone", "9.00", 10, 1, "+0s", "+1h")))
	for i := range 3 {
		r := e.request("POST", e.base+"/api/seckill/queue", e.session(fmt.Sprintf("queued-%d", i)), map[string]string{"productId": "p1"})
		if r.Status != 200 {
			t.Fatalf("join %d: %v", i, r)
		}
	}
	b.do(chromedp.EmulateViewport(1280, 900))
	b.open(e.admin + "/admin/")
	row := `document.querySelector('#waitrooms tr[data-product="p1"]')`
	cell := func(cls string) string { return row + `.querySelector('.` + cls + `')` }
	num := func(cls string) string { return `Number(` + cell(cls) + `.getAttribute('data-value'))` }
	want := e.roomRow("p1")
	b.waitJS(5*time.Second, "the p1 row of the waiting-room panel with the admin's figures",
		`!!`+row+` && !document.getElementById('waitroom').hidden && `+
			fmt.Sprintf(`%s === %v && %s === %v && %s === 600`, num("waiting"), want["waiting"], num("admitted"), want["admitted"], num("rate")))
	if st := eval[string](b, cell("queue")+`.textContent`); st != "pre-queue" {
		t.Errorf("p1's queue shows %q, want pre-queue", st)
	}
	if n := eval[int](b, `document.querySelectorAll('#waitrooms tr[data-product]').length`); n != 1 {
		t.Errorf("%d rows in the waiting-room panel, want 1 (p2 has no room)", n)
	}
	result := `document.getElementById('waitroom-result')`
	okResult := func(what string, re string) {
		t.Helper()
		b.waitJS(5*time.Second, what, result+`.getAttribute('data-ok') === 'true' && /`+re+`/.test(`+result+`.textContent)`)
	}

	b.do(chromedp.SendKeys(chromedp.CSS(`#waitrooms tr[data-product="p1"] input[name=admitPerMinute]`), "1200"),
		chromedp.Click(chromedp.CSS(`#waitrooms tr[data-product="p1"] button[data-action=rate]`)))
	okResult("the rate's success", `now admits 1,200 shoppers per minute`)
	if r := e.roomRow("p1"); r["admitPerMinute"] != float64(1200) {
		t.Fatalf("the page said 1,200/min, the edge has %v", r["admitPerMinute"])
	}
	b.waitJS(5*time.Second, "the rate cell at 1200", num("rate")+` === 1200`)

	b.do(chromedp.Click(chromedp.CSS(`#waitrooms tr[data-product="p1"] button[data-action=pause]`)))
	okResult("the pause's success", `Paused admission to p1`)
	if r := e.roomRow("p1"); r["paused"] != true {
		t.Fatalf("the page said paused, the edge did not: %v", r)
	}
	b.waitJS(5*time.Second, "PAUSED and a Resume button", cell("queue")+`.textContent === 'PAUSED' && `+
		row+`.querySelector('button[data-action=pause]').textContent === 'Resume'`)
	b.do(chromedp.Click(chromedp.CSS(`#waitrooms tr[data-product="p1"] button[data-action=pause]`)))
	okResult("the resume's success", `resumed`)
	if r := e.roomRow("p1"); r["paused"] != false {
		t.Fatalf("the page said resumed, the edge is paused: %v", r)
	}

	// Close asks once more: the first press closes nothing.
	b.do(chromedp.Click(chromedp.CSS(`#waitrooms tr[data-product="p1"] button[data-action=close]`)))
	b.waitJS(3*time.Second, "Confirm close", row+`.querySelector('button[data-action=close]').textContent === 'Confirm close'`)
	if r := e.roomRow("p1"); r["closed"] != false {
		t.Fatalf("one press closed the queue: %v", r)
	}
	b.do(chromedp.Click(chromedp.CSS(`#waitrooms tr[data-product="p1"] button[data-action=close]`)))
	okResult("the close's success", `is closed`)
	if r := e.roomRow("p1"); r["closed"] != true {
		t.Fatalf("the page said closed, the edge did not: %v", r)
	}
	b.waitJS(5*time.Second, "CLOSED and the buttons off", cell("queue")+`.textContent === 'CLOSED' && `+
		row+`.querySelector('button[data-action=rate]').disabled`)
	if s := b.text("waitroom-result"); !regexp.MustCompile(`^The queue of p1 is closed`).MatchString(s) {
		t.Errorf("result %q", s)
	}
	b.keepShot("dashboard-waitroom")
}
