package browser

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestPhoneViewportAndNoThirdParty loads the sale page as a 390×844 phone:
// nothing overflows sideways in any state of the purchase, Buy is on
// screen, every request goes to the edge itself, and the whole load
// (compressed) stays under 50 KB.
func TestPhoneViewportAndNoThirdParty(t *testing.T) {
	t.Parallel()
	b := newTab(t, "phone")
	e := startEdge(t, activities(sale("p1", "A Product With A Rather Long Name For A Small Screen", "1299.00", 10, 3, "+0s", "+1h")))
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch))

	b.open(e.page("p1"))
	b.waitText(5*time.Second, "status", regexp.MustCompile(`^On sale now$`))
	waitAnswered(t, b, 0, "/api/seckill/status", 1)
	b.waitNet(5*time.Second, "every request of the load answered", func(reqs []netReq) bool {
		for _, r := range reqs {
			if !r.Finished && r.Failed == "" {
				return false
			}
		}
		return true
	})

	total := 0.0
	var lines []string
	for _, r := range b.requests(0) {
		if !strings.HasPrefix(r.URL, e.base+"/") {
			t.Errorf("request to another origin: %s %s (%s)", r.Method, r.URL, r.Type)
		}
		if r.Failed != "" {
			t.Errorf("request failed: %s: %s", r.URL, r.Failed)
		}
		total += r.Encoded
		lines = append(lines, fmt.Sprintf("%6.0f B %-4s %3d %-10s %s", r.Encoded, r.Encoding, r.Status, r.Type, strings.TrimPrefix(r.URL, e.base)))
		switch r.Type {
		case "Document", "Script", "Stylesheet":
			if r.Encoding != "gzip" && r.Encoding != "br" {
				t.Errorf("%s came with Content-Encoding %q, want gzip", r.URL, r.Encoding)
			}
		}
	}
	t.Logf("page load, %d requests, %.1f KB on the wire:\n  %s", len(lines), total/1024, strings.Join(lines, "\n  "))
	if total >= 50*1024 {
		t.Errorf("the page load took %.1f KB on the wire, want < 50 KB", total/1024)
	}

	fits := func(when string) {
		t.Helper()
		m := eval[struct {
			ScrollWidth float64 `json:"scrollWidth"`
			InnerWidth  float64 `json:"innerWidth"`
			InnerHeight float64 `json:"innerHeight"`
			Left        float64 `json:"left"`
			Right       float64 `json:"right"`
			Bottom      float64 `json:"bottom"`
			Widest      string  `json:"widest"`
		}](b, `(function () {
  var r = document.getElementById('buy').getBoundingClientRect(), de = document.documentElement, widest = '';
  document.querySelectorAll('body *').forEach(function (n) {
    var x = n.getBoundingClientRect();
    if (x.right > innerWidth + 0.5 && !widest) widest = n.tagName + (n.id ? '#' + n.id : '') + ' right=' + x.right;
  });
  return { scrollWidth: de.scrollWidth, innerWidth: innerWidth, innerHeight: innerHeight,
    left: r.left, right: r.right, bottom: r.bottom + scrollY, widest: widest };
})()`)
		if m.InnerWidth != 390 {
			t.Errorf("%s: innerWidth %v, want 390 (viewport meta)", when, m.InnerWidth)
		}
		if m.ScrollWidth > m.InnerWidth {
			t.Errorf("%s: horizontal overflow: scrollWidth %v > innerWidth %v (first too wide: %s)", when, m.ScrollWidth, m.InnerWidth, m.Widest)
		}
		if m.Left < 0 || m.Right > m.InnerWidth {
			t.Errorf("%s: Buy spans x %v..%v, outside the %v px screen", when, m.Left, m.Right, m.InnerWidth)
		}
		if m.Bottom > m.InnerHeight {
			t.Logf("%s: Buy is below the fold (bottom at %v px of %v)", when, m.Bottom, m.InnerHeight)
		}
	}
	loaded := b.mark()
	b.do(chromedp.WaitVisible(chromedp.ID("buy")))
	fits("signed out")
	b.signIn("phone-user-with-a-long-identifier-0123456789")
	b.waitBuy(3*time.Second, `^Buy now$`, true)
	fits("signed in")
	b.do(chromedp.Tap(chromedp.ID("buy")))
	b.waitText(10*time.Second, "message", regexp.MustCompile(`^Success!`))
	fits("after a purchase")
	b.keepShot("phone")
	for _, r := range b.requests(loaded) {
		if !strings.HasPrefix(r.URL, e.base+"/") {
			t.Errorf("request to another origin: %s %s (%s)", r.Method, r.URL, r.Type)
		}
	}
}
