package browser

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

// TestPurchaseOfUnknownOutcome: Redis hangs (SIGSTOP) while the shopper's
// purchase is on its way, so the edge cannot tell whether it went through.
// The page is told the order id all the same, says it is checking, and
// follows the order to its end under that id:
//
//   - placed: Redis resumes and runs the purchase it had received; the
//     order goes the normal way (the outbox relay sends it) and the page
//     shows the success.
//   - not placed: the edge's first purchase on a fresh Redis, whose script
//     the server does not know yet: what it receives is the script's hash
//     (EVALSHA), answered NOSCRIPT when it resumes, after the client gave
//     up, so nothing ran. The edge settles it as not placed, and the page
//     says the order could not be completed.
func TestPurchaseOfUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		warmUp bool
		end    string
		status string
	}{
		{"placed", true, `^Success! Order %s confirmed\.$`, "success"},
		{"not placed", false, `^Sorry — order %s could not be completed\.`, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.New(t)
			e := startEdge(t, activities(sale("p1", "Hung", "5.00", 10, 1, "+0s", "+1h")),
				fmt.Sprintf("redis: {addr: %q, timeout: 300ms}\n", srv.Addr()))
			if tc.warmUp {
				e.mustBuy("warm-up", "p1", 1) // loads the script
			}
			b := newTab(t, "unknown-shopper")
			b.open(e.page("p1"))
			b.signIn("unknown-shopper")
			b.waitBuy(5*time.Second, `^Buy now$`, true)

			srv.Pause()
			defer srv.Resume()
			b.clickBuy()
			checking := regexp.MustCompile(`^The sale is busy — checking whether order (\d+) went through…$`)
			b.waitText(10*time.Second, "message", checking)
			id := checking.FindStringSubmatch(b.text("message"))[1]
			if got := b.text("order-id"); got != id {
				t.Errorf("#order-id = %q while checking order %s", got, id)
			}
			srv.Resume()

			b.waitText(30*time.Second, "message", regexp.MustCompile(fmt.Sprintf(tc.end, id)))
			if r := e.result("unknown-shopper", "p1", id); r.Status != 200 || r.field("status") != tc.status {
				t.Errorf("result of %s: %v, want %s", id, r, tc.status)
			}
			noJSONInMessages(t, b)
		})
	}
}
