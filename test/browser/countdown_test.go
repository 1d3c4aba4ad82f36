package browser

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// skewClock makes the tab's Date.now an hour (or off ms) wrong, as on a
// phone with a bad clock. performance.now stays right, so the recorder's
// timestamps are true wall-clock times.
func skewClock(off time.Duration) string {
	return fmt.Sprintf(`(function () {
  var real = Date.now.bind(Date), off = %d;
  Date.now = function () { return real() + off; };
})();`, off.Milliseconds())
}

// TestCountdownFromServerTime opens a sale that starts ~10 s after the edge
// in three tabs: one with a right clock, one an hour fast, one an hour
// slow. Each must show the server's countdown with Buy off, then turn Buy
// on at the server's start, without a reload. (10 s: opening three tabs and
// signing in took over 8 s on a loaded 2-core machine.)
func TestCountdownFromServerTime(t *testing.T) {
	t.Parallel()
	type shopper struct {
		b    *tab
		user string
		skew time.Duration
	}
	// Tabs first: the sale's clock starts with the edge.
	var shoppers []shopper
	for i, skew := range []time.Duration{0, time.Hour, -time.Hour} {
		name := map[time.Duration]string{0: "right-clock", time.Hour: "clock+1h", -time.Hour: "clock-1h"}[skew]
		s := shopper{b: newTab(t, name), user: fmt.Sprintf("clock-%d", i), skew: skew}
		if skew != 0 {
			s.b.initScript(skewClock(skew))
		}
		shoppers = append(shoppers, s)
	}
	e := startEdge(t, activities(sale("p1", "Countdown Watch", "10.00", 100, 1, "+10s", "+1h")))
	startMs := int64(e.status("p1")["startMs"].(float64))
	start := time.UnixMilli(startMs)

	for _, s := range shoppers {
		s.b.open(e.page("p1"))
		s.b.waitText(3*time.Second, "status", regexp.MustCompile(`^(Coming soon|On sale now)$`))
		s.b.signIn(s.user)
	}
	if left := time.Until(start); left < 300*time.Millisecond {
		t.Fatalf("setting up took too long: the sale starts in %v, nothing left to check before it", left)
	}

	// Before the start: Buy off, the countdown is the server's, whatever
	// the device's clock says.
	for _, s := range shoppers {
		if skew := eval[float64](s.b, `Date.now() - (performance.timeOrigin + performance.now())`); math.Abs(skew-float64(s.skew.Milliseconds())) > 1000 {
			t.Fatalf("%s: Date.now is off by %v ms, want %v", s.b.name, skew, s.skew)
		}
		before := time.Now()
		st := eval[struct {
			Countdown string `json:"countdown"`
			Buy       string `json:"buy"`
			Disabled  bool   `json:"disabled"`
			Status    string `json:"status"`
		}](s.b, `({ countdown: document.getElementById('countdown').textContent, buy: document.getElementById('buy').textContent,
  disabled: document.getElementById('buy').disabled, status: document.getElementById('status').textContent })`)
		after := time.Now()
		if !after.Before(start) {
			t.Fatalf("%s: the sale started while checking the countdown; machine too slow for this test", s.b.name)
		}
		if st.Status != "Coming soon" || !st.Disabled {
			t.Errorf("%s: before the start the page shows status %q, Buy %q disabled=%v; want 'Coming soon' and Buy off", s.b.name, st.Status, st.Buy, st.Disabled)
		}
		// The page ceils to whole seconds and renders every 200 ms.
		lo := int(math.Ceil(float64(start.Sub(after)) / float64(time.Second)))
		hi := int(math.Ceil(float64(start.Sub(before)+200*time.Millisecond) / float64(time.Second)))
		secs := countdownSeconds(st.Countdown, "Starts in ")
		if secs < lo || secs > hi {
			t.Errorf("%s: countdown %q = %d s, the server's start is %d..%d s away", s.b.name, st.Countdown, secs, lo, hi)
		}
		if bs := countdownSeconds(st.Buy, "Starts in "); bs < lo || bs > hi {
			t.Errorf("%s: Buy says %q, the server's start is %d..%d s away", s.b.name, st.Buy, lo, hi)
		}
	}
	shoppers[1].b.keepShot("countdown")
	ids := make([]float64, len(shoppers))
	for i, s := range shoppers {
		ids[i] = eval[float64](s.b, `__fg.id`)
	}

	// At the start Buy turns on by itself, at the server's time.
	for i, s := range shoppers {
		s.b.waitBuy(time.Until(start)+3*time.Second, `^Buy now$`, true)
		at := eval[float64](s.b, `__fg.enabledAt`)
		d := time.Duration((at - float64(startMs)) * float64(time.Millisecond))
		// Early by more than the clock estimate's error is wrong; late by
		// more than a render tick and a poll is slow.
		if d < -150*time.Millisecond || d > 1200*time.Millisecond {
			t.Errorf("%s: Buy turned on %v from the server's start, want within -150ms..+1.2s", s.b.name, d)
		} else {
			t.Logf("%s: Buy turned on %v after the server's start", s.b.name, d.Round(time.Millisecond))
		}
		if id := eval[float64](s.b, `__fg.id`); id != ids[i] {
			t.Errorf("%s: the page reloaded", s.b.name)
		}
		_, buttons := s.b.history()
		if !slices.ContainsFunc(buttons, func(b string) bool { return strings.HasPrefix(b, "off:Starts in ") }) {
			t.Errorf("%s: Buy states %q: never showed the countdown while off", s.b.name, buttons)
		}
		if st := s.b.text("status"); st != "On sale now" {
			t.Errorf("%s: status %q after the start", s.b.name, st)
		}
	}

	// The fast clock's Buy was not early: the server takes the purchase.
	fast := shoppers[1].b
	fast.clickBuy()
	fast.waitText(10*time.Second, "message", regexp.MustCompile(`^(Queued|Success)`))
	noJSONInMessages(t, fast)
}

// countdownSeconds parses "Starts in 00:00:03" into seconds (-1 if not).
func countdownSeconds(s, prefix string) int {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return -1
	}
	total := 0
	for p := range strings.SplitSeq(rest, ":") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return -1
		}
		total = total*60 + n
	}
	return total
}
