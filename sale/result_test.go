package sale

import (
	"strings"
	"testing"

	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// TestAppendResultStatuses: the shopper sees every Redis state by its
// contract name, and the pay deadline while the order waits to be paid.
func TestAppendResultStatuses(t *testing.T) {
	o := order.Order{ID: 42, ProductID: "p1", UserID: "u", Qty: 1, PriceCents: 990, CreatedMs: 1000, PayByMs: 61000}
	for _, c := range []struct {
		state   string
		paidMs  int64
		want    []string
		wantNot []string
	}{
		{stock.StatePending, 0, []string{`"status":"pending"`}, []string{`{"status":"pending","payByMs"`}},
		{stock.StateSuccess, 0, []string{`"status":"success","payByMs":61000`, `"payByMs":61000}`}, nil},
		{stock.StatePaid, 5000, []string{`"status":"paid"`, `"paidMs":5000`}, []string{`"status":"paid","payByMs"`}},
		{stock.StateExpired, 0, []string{`"status":"expired"`}, nil},
		{stock.StateReleased, 0, []string{`"status":"cancelled"`}, []string{"released"}},
		{stock.StateFailed, 0, []string{`"status":"failed"`}, nil},
	} {
		got := string(AppendResult(nil, stock.OrderInfo{Order: o, State: c.state, PaidMs: c.paidMs}))
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %s lacks %s", c.state, got, w)
			}
		}
		for _, w := range c.wantNot {
			if strings.Contains(got, w) {
				t.Errorf("%s: %s has %s", c.state, got, w)
			}
		}
	}
	noDeadline := o
	noDeadline.PayByMs = 0
	if got := string(AppendResult(nil, stock.OrderInfo{Order: noDeadline, State: stock.StateSuccess})); strings.Contains(got, "payByMs") {
		t.Errorf("an order without a deadline: %s", got)
	}
}
