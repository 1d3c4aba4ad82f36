package browser

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestBuyFlow is a shopper's whole purchase: the page renders the product,
// price and countdown, the shopper signs in, presses Buy, sees "Queued"
// with the order id, then "success"; a reload shows the order again; a
// second Buy for the same product is refused in plain words and the button
// says so.
func TestBuyFlow(t *testing.T) {
	t.Parallel()
	b := newTab(t, "shopper")
	e := startEdge(t, activities(sale("p1", "Flash Sneaker", "99.00", 10, 1, "+0s", "+1h")))

	b.open(e.page("p1"))
	b.waitText(5*time.Second, "product-name", regexp.MustCompile(`^Flash Sneaker$`))
	if p := b.text("price"); !strings.Contains(p, "99.00") {
		t.Errorf("price shows %q, want 99.00 in it", p)
	}
	b.waitText(3*time.Second, "status", regexp.MustCompile(`^On sale now$`))
	// The sale ends in an hour: the countdown says so, ticking.
	b.waitText(3*time.Second, "countdown", regexp.MustCompile(`^Ends in 00:(59|60):\d\d$`))
	if st := b.buy(); st.Enabled || st.Text != "Sign in to buy" {
		t.Errorf("signed out: Buy is %+v, want disabled 'Sign in to buy'", st)
	}

	b.signIn("alice")
	b.waitBuy(3*time.Second, `^Buy now$`, true)
	// Signed in on an open sale, her status answer carries a purchase
	// token: the purchase is one request, no token call (issue 26).
	b.waitJS(5*time.Second, "the status answer's token", `document.getElementById('buy').hasAttribute('data-token')`)

	mark := b.mark()
	b.clickBuy()
	b.waitText(10*time.Second, "message", regexp.MustCompile(`^Success! Order \d+ confirmed\.$`))

	if n := b.countReqs(mark, "/api/seckill/token"); n != 0 {
		t.Errorf("%d token calls for a purchase with the status answer's token", n)
	}
	// The id on the page is the one the API answered to the page's own do.
	b.keepShot("success")
	apiID := doOrderID(t, b, mark)
	if got := b.text("order-id"); got != apiID {
		t.Errorf("#order-id = %q, the API answered orderId %q", got, apiID)
	}
	if msg := b.text("message"); !strings.Contains(msg, apiID) {
		t.Errorf("success message %q does not name order %s", msg, apiID)
	}
	if vis := eval[bool](b, `!document.getElementById('order-line').hidden`); !vis {
		t.Error("the order line is hidden after a success")
	}
	msgs, buttons := b.history()
	queued := slices.IndexFunc(msgs, func(m string) bool { return strings.HasPrefix(m, "Queued — order "+apiID) })
	success := slices.IndexFunc(msgs, func(m string) bool { return strings.HasPrefix(m, "Success!") })
	if queued < 0 || queued > success {
		t.Errorf("messages %q: want 'Queued — order %s …' (pending) before the success", msgs, apiID)
	}
	if !slices.Contains(buttons, "off:Processing…") {
		t.Errorf("Buy states %q: want it off ('Processing…') while the purchase is in flight", buttons)
	}
	// The server agrees: the order is alice's and settled.
	if r := e.result("alice", "p1", apiID); r.Status != 200 || r.field("status") != "success" {
		t.Errorf("result of %s for alice: %v", apiID, r)
	}

	// Limit 1: the purchase used the whole allowance, so Buy turns off at
	// once instead of inviting a refusal.
	b.waitBuy(3*time.Second, `^Limit reached$`, false)
	// A reloaded page remembers the order (this device's storage): the order
	// and its outcome are back, and Buy stays off.
	b.open(e.page("p1"))
	b.waitText(5*time.Second, "message", regexp.MustCompile(`^Success! Order `+apiID+` confirmed\.$`))
	if got := b.text("order-id"); got != apiID {
		t.Errorf("after a reload #order-id = %q, want %s", got, apiID)
	}
	b.waitBuy(3*time.Second, `^Limit reached$`, false)
	// A page that does not know (another device): a second Buy is refused,
	// in words, and the button stops.
	eval[bool](b, `(localStorage.clear(), true)`)
	b.open(e.page("p1"))
	b.waitBuy(5*time.Second, `^Buy now$`, true)
	b.clickBuy()
	b.waitText(5*time.Second, "message", regexp.MustCompile(`already bought the maximum`))
	b.waitBuy(2*time.Second, `^Limit reached$`, false)
	b.keepShot("limit")
	if vis := eval[bool](b, `!document.getElementById('order-line').hidden`); vis {
		t.Error("the old order line still shows next to the limit message")
	}
	noJSONInMessages(t, b)
}

// doOrderID reads the orderId of the page's /api/seckill/do answer (recorded
// from index mark on) from the browser's network log.
func doOrderID(t *testing.T, b *tab, mark int) string {
	t.Helper()
	var id network.RequestID
	for _, r := range b.requests(mark) {
		if strings.HasSuffix(r.URL, "/api/seckill/do") && r.Finished {
			id = r.ID
		}
	}
	if id == "" {
		t.Fatalf("no finished /api/seckill/do request in %v", b.requests(mark))
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	body, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
	if err != nil {
		t.Fatalf("body of do: %v", err)
	}
	var v struct {
		OrderID json.Number `json:"orderId"`
		Status  string      `json:"status"`
	}
	if err := json.Unmarshal(body.Body, &v); err != nil || v.OrderID == "" {
		t.Fatalf("do answered %s (%v)", body.Body, err)
	}
	if v.Status != "pending" {
		t.Errorf("do answered status %q, want pending", v.Status)
	}
	return v.OrderID.String()
}

// noJSONInMessages checks that nothing the page said was a raw answer.
func noJSONInMessages(t *testing.T, b *tab) {
	t.Helper()
	msgs, _ := b.history()
	for _, m := range msgs {
		if strings.Contains(m, "{") || strings.Contains(m, `"code"`) {
			t.Errorf("#message showed raw JSON: %q", m)
		}
	}
}
