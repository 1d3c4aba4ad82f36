package browser

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
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

// hiddenSwitch lets a test hide the tab: document.hidden and
// visibilityState follow window.__setHidden, which also fires
// visibilitychange, as a browser does when a tab goes to the background.
const hiddenSwitch = `(function () {
  var h = false;
  Object.defineProperty(Document.prototype, 'hidden', { get: function () { return h; }, configurable: true });
  Object.defineProperty(Document.prototype, 'visibilityState', { get: function () { return h ? 'hidden' : 'visible'; }, configurable: true });
  window.__setHidden = function (v) { h = v; document.dispatchEvent(new Event('visibilitychange')); };
})();`

// TestWaitingRoomHiddenTabPollsSlower (issue 28): a shopper waiting in
// line asks for her place every 1–2 s while the tab is in front and every
// 5–6 s once it is hidden.
func TestWaitingRoomHiddenTabPollsSlower(t *testing.T) {
	t.Parallel()
	b := newTab(t, "hidden")
	b.initScript(roomRecorder)
	b.initScript(hiddenSwitch)
	e := startEdge(t, activities("  - {product_id: p5, name: \"Slow Queue\", price: \"5.00\", stock: 5, limit: 1,"+
		" start: \"+1s\", end: \"+1h\", waiting_room: {enabled: true, prequeue_opens: 1h, admit_per_minute: 1,"+
		" session: 5m, order: fifo}}\n"))
	for _, u := range []string{"a1", "a2", "a3", "a4"} {
		e.joinRoom(u, "p5")
	}
	b.open(e.page("p5"))
	b.signIn("slow-fan")
	b.waitJS(5*time.Second, "Join on", `!document.getElementById('join').disabled`)
	b.do(chromedp.Click(chromedp.ID("join")))
	b.waitText(5*time.Second, "room-line", regexp.MustCompile(`^You are number \d+ in line`))
	const window = 8 * time.Second
	polls := func() int {
		mark := b.mark()
		time.Sleep(window) // the number of requests over time is the point
		return b.countReqs(mark, "/api/seckill/queue?")
	}
	front := polls()
	// Hidden: the poll scheduled while in front still comes; from it on the
	// page asks every 5-6 s.
	mark := b.mark()
	eval[bool](b, `(window.__setHidden(true), true)`)
	b.waitNet(5*time.Second, "the poll scheduled before hiding", func(rs []netReq) bool {
		for _, r := range rs[mark:] {
			if strings.Contains(r.URL, "/api/seckill/queue?") && r.Finished {
				return true
			}
		}
		return false
	})
	hidden := polls()
	t.Logf("queue polls over %v: %d in front, %d hidden", window, front, hidden)
	if front < 3 || hidden > 2 {
		t.Errorf("queue polls over %v: %d with the tab in front (want 3 or more: every 1-2 s), %d hidden (want at most 2: every 5-6 s)", window, front, hidden)
	}
}

// TestWaitingRoomJoinAgainAfterBadTicket (issue 28): a shopper whose ticket
// cookie no longer verifies (another device's, tampered, a rotated secret)
// hears BAD_TICKET at the next poll, gets the Join button back, and joining
// again gives her the place she had: one ticket per shopper and sale.
func TestWaitingRoomJoinAgainAfterBadTicket(t *testing.T) {
	t.Parallel()
	b := newTab(t, "badticket")
	b.initScript(roomRecorder)
	e := startEdge(t, activities("  - {product_id: p6, name: \"Ticket Cup\", price: \"5.00\", stock: 5, limit: 1,"+
		" start: \"+1s\", end: \"+1h\", waiting_room: {enabled: true, prequeue_opens: 1h, admit_per_minute: 1,"+
		" session: 5m, order: fifo}}\n"))
	for _, u := range []string{"c1", "c2", "c3"} {
		e.joinRoom(u, "p6")
	}
	b.open(e.page("p6"))
	b.signIn("cup-fan")
	b.waitJS(5*time.Second, "Join on", `!document.getElementById('join').disabled`)
	b.do(chromedp.Click(chromedp.ID("join")))
	place := regexp.MustCompile(`^You are number (\d+) in line`)
	before := place.FindStringSubmatch(b.waitText(5*time.Second, "room-line", place))[1]

	httpOnly := true
	b.call(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetCookie, network.SetCookieParams{Name: "fg_wr_p6", Value: "AAAA-not-a-ticket",
			URL: e.base + "/api/seckill/queue", Path: "/api/seckill", HTTPOnly: &httpOnly})
		return err
	})
	b.waitText(8*time.Second, "message", regexp.MustCompile(`^Your place in the queue could not be confirmed on this device — please join again\.$`))
	b.waitJS(5*time.Second, "Join back on", `!document.getElementById('join').disabled && document.getElementById('join').offsetParent !== null`)
	b.do(chromedp.Click(chromedp.ID("join")))
	again := place.FindStringSubmatch(b.waitText(5*time.Second, "room-line", place))[1]
	if again != before {
		t.Errorf("joined again at number %s, had number %s", again, before)
	}
}
