package sale

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/orders/stock"
)

// TestRefusedDeductionIsNotSent: with Redis stopped, a purchase whose call
// is refused at the dial did not happen. It is answered a plain 503 (no
// order to follow), logged as not sent with a known outcome, and counted
// by the product's breaker: Redis is failing.
func TestRefusedDeductionIsNotSent(t *testing.T) {
	brks := NewBreakers(1000, time.Hour, nil, nil)
	r := newDoRig(t, stock.Options{Timeout: 500 * time.Millisecond}, brks, "nr")
	if code := r.do("nr", "warmup"); code != 200 {
		t.Fatalf("warm-up purchase: %d", code)
	}
	r.srv.Stop()

	// The connection the stop broke may take one more write before the
	// client notices; from then on every call dials and is refused.
	var code int
	var body string
	i := 0
	await.Until(t, 10*time.Second, "a purchase refused at the dial", func() bool {
		i++
		code, body = r.doBody("nr", "u"+strconv.Itoa(i))
		return strings.Contains(r.logs.String(), "connection refused")
	})
	if code != 503 || !strings.Contains(body, `"code":"DEGRADED"`) || strings.Contains(body, "orderId") {
		t.Errorf("refused purchase answered %d %s; want a plain 503 DEGRADED, no order to follow", code, body)
	}
	var line string
	for l := range strings.SplitSeq(r.logs.String(), "\n") {
		if strings.Contains(l, "connection refused") {
			line = l
		}
	}
	if !strings.Contains(line, `msg="deduction not sent"`) || !strings.Contains(line, "unknown_outcome=false") {
		t.Errorf("refused purchase logged %q; want \"deduction not sent\", unknown_outcome=false", line)
	}
	if got := brks.For("nr").consec.Load(); got < 1 {
		t.Errorf("breaker counted %d failures after a refused call, want it counted", got)
	}
}
