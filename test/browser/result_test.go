package browser

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
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

// TestPurchaseWithoutResultPolling: when the result stream works, the page
// waits on it and never polls /api/seckill/result.
//
// "edge stream" uses the edge's /api/seckill/events and is skipped, with the
// reason, while the edge answers it 404 (not implemented). "browser-side
// stream" answers the page's stream in the browser (Fetch interception)
// with the edge's real result, so the page's side is checked either way.
func TestPurchaseWithoutResultPolling(t *testing.T) {
	t.Parallel()
	e := startEdge(t, activities(sale("p1", "Streamed", "3.00", 10, 1, "+0s", "+1h")))

	t.Run("edge stream", func(t *testing.T) {
		t.Parallel()
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
	})

	t.Run("browser-side stream", func(t *testing.T) {
		t.Parallel()
		var served atomic.Int32
		b, mark := purchase(t, e, "stream-user-2", func(b *tab) { serveStream(t, b, e, "stream-user-2", &served) })
		if served.Load() != 1 {
			t.Errorf("the stream was answered %d times, want once", served.Load())
		}
		if n := b.countReqs(mark, resultPath); n > 0 {
			t.Errorf("the stream worked, yet the page polled %s %d times", resultPath, n)
		}
		noJSONInMessages(t, b)
	})
}

// serveStream answers the tab's /api/seckill/events requests itself: once
// the edge says the order is settled (GET result, as the order's owner),
// it sends that answer as one server-sent event.
func serveStream(t *testing.T, b *tab, e *edge, user string, served *atomic.Int32) {
	t.Helper()
	paused := chromedp.Events(b.ctx, fetch.RequestPaused)
	b.call(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*" + eventsPath + "?*"}}})
		return err
	})
	jwt := e.session(user)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			u, _ := url.Parse(ev.Request.URL)
			q := u.Query()
			body := settledResult(e, jwt, q.Get("orderId"), q.Get("productId"))
			served.Add(1)
			chromedp.Call(b.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{
				RequestID:    ev.RequestID,
				ResponseCode: 200,
				ResponseHeaders: []*fetch.HeaderEntry{
					{Name: "Content-Type", Value: "text/event-stream"},
					{Name: "Cache-Control", Value: "no-store"},
				},
				Body: []byte("retry: 60000\ndata: " + body + "\n\n"),
			})
		}
	}()
}

// settledResult polls the edge's result for the order until it is no
// longer pending (10 s at most) and returns the last answer's body. It runs
// off the test goroutine, so it reports nothing itself: the page's message
// shows what it got.
func settledResult(e *edge, jwt, orderID, productID string) string {
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := `{"status":"pending"}`
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", e.base+resultPath+"?orderId="+url.QueryEscape(orderID)+"&productId="+url.QueryEscape(productID), nil)
		req.Header.Set("Authorization", "Bearer "+jwt)
		if res, err := e.hc.Do(req); err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				last = string(b)
				if !strings.Contains(last, `"pending"`) {
					return last
				}
			}
		}
		<-tick.C
	}
	return last
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
