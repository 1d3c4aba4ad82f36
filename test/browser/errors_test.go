package browser

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statusPattern matches the page's status polls (a URLPattern, for
// Network.setBlockedURLs).
const statusPattern = "*://*:*/api/seckill/status?*"

// TestSoldOutAndErrorsInPlainWords checks that every refusal a shopper can
// meet reads as a sentence and puts the button in the matching state: sold
// out (raced by another shopper), rate limited (with the wait in seconds),
// and the degrade switch ("busy"). No message may be a JSON dump.
func TestSoldOutAndErrorsInPlainWords(t *testing.T) {
	t.Parallel()
	e := startEdge(t,
		activities(
			sale("last", "Last One", "5.00", 1, 1, "+0s", "+1h"),
			sale("rate", "Rate Limited Lamp", "5.00", 100, 5, "+0s", "+1h"),
			sale("busy", "Busy Bag", "5.00", 100, 5, "+0s", "+1h"),
		),
		// A tiny per-shopper rate: 3 purchase calls (token or do) at once,
		// then one a minute.
		`filters:
  - {type: access, scope: all, rules: ["allow all"]}
  - {type: session}
  - {type: sale_window}
  - {type: sold_out}
  - type: user_limit
    limits: [{rate: 1r/m, burst: 2, nodelay: true}]
  - {type: purchase_token}
`)

	t.Run("sold out", func(t *testing.T) {
		t.Parallel()
		b := newTab(t, "carol")
		b.open(e.page("last"))
		b.signIn("carol")
		b.waitBuy(3*time.Second, `^Buy now$`, true)

		// The page stops hearing the status (a slow network), so it still
		// offers Buy when another shopper takes the last one.
		b.block(statusPattern)
		e.mustBuy("dave", "last", 1)
		b.clickBuy()
		b.waitText(5*time.Second, "message", regexp.MustCompile(`^Sold out — every item has been claimed\.$`))
		b.waitBuy(time.Second, `^Sold out$`, false)
		b.keepShot("sold-out")
		if s := b.text("status"); s != "Sold out" {
			t.Errorf("status badge %q after a SOLD_OUT answer", s)
		}

		// The status comes back and agrees; Buy stays off.
		b.block()
		mark := b.mark()
		waitAnswered(t, b, mark, "/api/seckill/status", 1)
		if st := b.buy(); st.Enabled || st.Text != "Sold out" {
			t.Errorf("after the status came back Buy is %+v", st)
		}
		noJSONInMessages(t, b)

		// A fresh visit shows it sold out at once and never offers Buy.
		b.open(e.page("last"))
		b.waitText(3*time.Second, "status", regexp.MustCompile(`^Sold out$`))
		mark = b.mark()
		waitAnswered(t, b, mark, "/api/seckill/status", 2)
		b.waitBuy(time.Second, `^Sold out$`, false)
		if _, buttons := b.history(); slices.ContainsFunc(buttons, func(s string) bool { return strings.HasPrefix(s, "on:") }) {
			t.Errorf("a sold-out page turned Buy on: %q", buttons)
		}
	})

	t.Run("rate limited", func(t *testing.T) {
		t.Parallel()
		b := newTab(t, "erin")
		b.open(e.page("rate"))
		b.signIn("erin")
		// Three purchase calls pass: with the status answer's token a
		// purchase is one call (do), so three purchases, then a refusal.
		for range 3 {
			b.waitJS(5*time.Second, "the status answer's token", `document.getElementById('buy').hasAttribute('data-token')`)
			mark := b.mark()
			b.clickBuy()
			waitAnswered(t, b, mark, "/api/seckill/do", 1)
			b.waitBuy(10*time.Second, `^Buy now$`, true)
		}
		b.waitJS(5*time.Second, "the status answer's token", `document.getElementById('buy').hasAttribute('data-token')`)
		b.clickBuy()
		msg := b.waitText(5*time.Second, "message", regexp.MustCompile(`^Too many tries — please wait \d+ seconds?\.$`))
		n, _ := strconv.Atoi(regexp.MustCompile(`\d+`).FindString(msg))
		// 1r/m is 16 milli-requests/s, as nginx rounds it: up to 62.5 s.
		if n < 1 || n > 64 {
			t.Errorf("%q: want a wait of 1..64 s (1r/m)", msg)
		}
		b.waitBuy(time.Second, `^Try again in \d+s$`, false)
		b.keepShot("rate-limited")
		noJSONInMessages(t, b)
	})

	t.Run("degraded", func(t *testing.T) {
		t.Parallel()
		b := newTab(t, "frank")
		b.open(e.page("busy"))
		b.signIn("frank")
		e.adminPost("/admin/degrade", map[string]any{"productId": "busy", "on": true})
		b.clickBuy()
		b.waitText(5*time.Second, "message", regexp.MustCompile(`^The sale is busy right now — please try again in a moment\.$`))
		// Busy is passing: Buy stays on for another try.
		b.waitBuy(time.Second, `^Buy now$`, true)
		b.keepShot("busy")

		e.adminPost("/admin/degrade", map[string]any{"productId": "busy", "on": false})
		b.clickBuy()
		b.waitText(10*time.Second, "message", regexp.MustCompile(`^Success!`))
		noJSONInMessages(t, b)
	})
}

// waitAnswered waits until n requests whose URL contains s, recorded from
// mark on, have been answered 200 in full.
func waitAnswered(t *testing.T, b *tab, mark int, s string, n int) {
	t.Helper()
	b.waitNet(5*time.Second, strconv.Itoa(n)+" answers to "+s, func(reqs []netReq) bool {
		got := 0
		for _, r := range reqs[min(mark, len(reqs)):] {
			if strings.Contains(r.URL, s) && r.Finished && r.Status == 200 {
				got++
			}
		}
		return got >= n
	})
}
