package browser

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	eventsPath    = "/api/seckill/events"
	resultPath    = "/api/seckill/result"
	eventsPattern = "*://*:*" + eventsPath + "?*"
)

// purchase signs user in on a fresh tab, presses Buy and waits for the
// success; it returns the tab and the index of the first request of the
// purchase.
func purchase(t *testing.T, e *edge, user string, before func(b *tab)) (*tab, int) {
	t.Helper()
	b := newTab(t, user)
	if before != nil {
		before(b)
	}
	b.open(e.page("p1"))
	b.signIn(user)
	mark := b.mark()
	b.clickBuy()
	b.waitText(10*time.Second, "message", regexp.MustCompile(`^Success! Order \d+ confirmed\.$`))
	msgs, _ := b.history()
	if !containsPrefix(msgs, "Queued — order ") {
		t.Errorf("messages %q: no 'Queued' before the success", msgs)
	}
	return b, mark
}

func containsPrefix(list []string, p string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// TestPurchaseWithoutResultPolling: when the edge offers the result stream,
// the page waits on it and never polls /api/seckill/result. Skipped, with
// the reason, while the edge answers the stream 404 (not implemented).
func TestPurchaseWithoutResultPolling(t *testing.T) {
	t.Parallel()
	e := startEdge(t, activities(sale("p1", "Streamed", "3.00", 10, 1, "+0s", "+1h")))
	b, mark := purchase(t, e, "stream-user", nil)

	var events []netReq
	for _, r := range b.requests(mark) {
		if strings.Contains(r.URL, eventsPath) {
			events = append(events, r)
		}
	}
	if len(events) == 0 {
		t.Fatalf("the page never opened %s during the purchase: %v", eventsPath, b.requests(mark))
	}
	ev := events[0]
	if ev.Status == 404 {
		t.Skipf("GET %s answered 404: the edge has no result stream yet (the page fell back to polling %s %d times)",
			eventsPath, resultPath, b.countReqs(mark, resultPath))
	}
	if ev.Status != 200 || !strings.HasPrefix(ev.MIME, "text/event-stream") {
		t.Fatalf("GET %s answered %d %q (failed: %q), want 200 text/event-stream", ev.URL, ev.Status, ev.MIME, ev.Failed)
	}
	if len(events) > 1 {
		t.Errorf("the page opened the stream %d times for one purchase", len(events))
	}
	if n := b.countReqs(mark, resultPath); n > 0 {
		t.Errorf("the stream worked, yet the page polled %s %d times", resultPath, n)
	}
	noJSONInMessages(t, b)
}

// TestPurchaseWithResultPolling: with the stream failing (blocked in the
// browser, as a proxy that cuts streams would), the page falls back to
// polling the result and still shows the success.
func TestPurchaseWithResultPolling(t *testing.T) {
	t.Parallel()
	e := startEdge(t, activities(sale("p1", "Polled", "3.00", 10, 1, "+0s", "+1h")))
	b, mark := purchase(t, e, "poll-user", func(b *tab) { b.block(eventsPattern) })

	var streams, polls, polled200 int
	for _, r := range b.requests(mark) {
		switch {
		case strings.Contains(r.URL, eventsPath):
			streams++
			if !r.Blocked {
				t.Errorf("%s was not blocked (status %d, failed %q)", r.URL, r.Status, r.Failed)
			}
		case strings.Contains(r.URL, resultPath):
			polls++
			if r.Status == 200 {
				polled200++
			}
			if !strings.Contains(r.URL, "productId=p1") || !strings.Contains(r.URL, "orderId=") {
				t.Errorf("result poll %s lacks orderId or productId", r.URL)
			}
		}
	}
	if streams != 1 {
		t.Errorf("the page tried the stream %d times, want once (then poll)", streams)
	}
	if polled200 == 0 {
		t.Errorf("the page showed success without a 200 from %s (%d polls)", resultPath, polls)
	}
	t.Logf("stream blocked; %d result polls until success", polls)
	noJSONInMessages(t, b)
}
