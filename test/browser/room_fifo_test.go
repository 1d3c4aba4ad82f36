package browser

import (
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestWaitingRoomFIFOPrequeue (issue 28): a fifo room's pre-queue shows
// the shopper's real place at once, with the fifo wording — a join before
// the opening used to answer waiting with position 0, and the page said
// "Your place is being worked out…" until the opening — and at the opening
// the place counts down to the turn.
func TestWaitingRoomFIFOPrequeue(t *testing.T) {
	t.Parallel()
	b := newTab(t, "fifo")
	b.initScript(roomRecorder)
	e := startEdge(t, activities("  - {product_id: p4, name: \"Queue Teapot\", price: \"5.00\", stock: 5, limit: 1,"+
		" start: \"+12s\", end: \"+1h\", waiting_room: {enabled: true, prequeue_opens: 1h, admit_per_minute: 60,"+
		" session: 5m, order: fifo}}\n"))
	e.joinRoom("before-1", "p4")
	e.joinRoom("before-2", "p4")
	b.open(e.page("p4"))
	b.signIn("teapot-fan")
	b.waitJS(5*time.Second, "Join on", `!document.getElementById('join').disabled`)
	b.do(chromedp.Click(chromedp.ID("join")))
	b.waitText(5*time.Second, "room-line", regexp.MustCompile(`^You are number 3 in line, in the order people joined; the sale opens in \d:\d\d\.$`))
	for _, l := range roomLines(b) {
		if l == "You’re in the queue. Your place is being worked out…" {
			t.Errorf("the fifo pre-queue showed %q", l)
		}
	}
	// At the opening the line lets in one a second: third in line, the turn
	// comes about 3 s after the opening.
	b.waitText(25*time.Second, "room-line", regexp.MustCompile(`^It’s your turn`))
}
