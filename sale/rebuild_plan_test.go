package sale

import (
	"cmp"
	"maps"
	"slices"
	"testing"

	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
)

// The rebuild's arithmetic without a server: what planStock makes of what
// the old Redis, the ledger and the catalogue say. The end-to-end rebuilds
// (rebuild_test.go, rebuild_deadline_test.go) run the same code through
// real Redis and both stores.

const planProduct = "plan-p"

func planOrder(id int64, user string, qty int) order.Order {
	return order.Order{ID: id, ProductID: planProduct, UserID: user, Qty: qty, CreatedMs: 1000 + id}
}

func placed(id int64, user string, qty int) order.Event {
	return order.Event{V: 1, Type: order.TypeOrder, Order: planOrder(id, user, qty)}
}

func released(id int64, user string, qty int, reason string, at int64) order.Event {
	return order.Event{V: 1, Type: order.TypeRelease, Order: planOrder(id, user, qty), Reason: reason, ReleasedMs: at}
}

func paid(id int64, user string, qty int, at int64) order.Event {
	return order.Event{V: 1, Type: order.TypePaid, Order: planOrder(id, user, qty), PaidMs: at}
}

func unpaid() orderstore.OrderStatus { return orderstore.OrderStatus{Status: orderstore.StatusUnpaid} }

// planIn is a sale configured with 10 units, limit 5, nothing read yet.
func planIn() planInput {
	return planInput{sale: stock.SaleStock{ProductID: planProduct, Stock: 10, Limit: 5}}
}

// figures is the part of a plan the counts are checked on.
type figures struct {
	Stock, Initial, Restocked, Released, Paid, Expired int64
	Pending, Held, LostRestock                         int64
}

func figuresOf(sp stockPlan) figures {
	s := sp.rebuild.SaleStock
	return figures{s.Stock, s.Initial, s.Restocked, s.Released, s.Paid, s.Expired, sp.pending, sp.held, sp.lostRestock}
}

func TestPlanStockCounts(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     func(in *planInput)
		want   figures
		buyers map[string]int64
	}{{
		name:   "a new sale: the configured stock",
		in:     func(*planInput) {},
		want:   figures{Stock: 10, Initial: 10},
		buyers: map[string]int64{},
	}, {
		name: "stored orders hold their units, the ledger's counts carry over",
		in: func(in *planInput) {
			in.ledger = orderstore.LedgerState{Sold: 3, Released: 2, Paid: 1, Expired: 1, Buyers: map[string]int64{"u1": 2, "u2": 1}}
		},
		want:   figures{Stock: 7, Initial: 10, Released: 2, Paid: 1, Expired: 1, Held: 3},
		buyers: map[string]int64{"u1": 2, "u2": 1},
	}, {
		name: "the durable catalogue's first stock beats the config",
		in: func(in *planInput) {
			in.durable = durableSale{Known: true, Initial: 6, Restocked: 4}
		},
		want:   figures{Stock: 10, Initial: 6, Restocked: 4},
		buyers: map[string]int64{},
	}, {
		name: "the meta's figures beat the catalogue's and the config's",
		in: func(in *planInput) {
			in.known = true
			in.meta = stock.SaleStock{Initial: 8, Restocked: 1}
			in.durable = durableSale{Known: true, Initial: 6}
		},
		want:   figures{Stock: 9, Initial: 8, Restocked: 1},
		buyers: map[string]int64{},
	}, {
		name: "an unknown meta's initial is not used",
		in: func(in *planInput) {
			in.meta = stock.SaleStock{Initial: 8}
		},
		want:   figures{Stock: 10, Initial: 10},
		buyers: map[string]int64{},
	}, {
		name: "restocks: the larger of the meta's and the catalogue's (a stale snapshot's meta is older)",
		in: func(in *planInput) {
			in.known = true
			in.meta = stock.SaleStock{Initial: 10, Restocked: 2}
			in.durable = durableSale{Known: true, Restocked: 5}
		},
		want:   figures{Stock: 15, Initial: 10, Restocked: 5},
		buyers: map[string]int64{},
	}, {
		name: "orders in the outbox the ledger has not stored count once, a stored one not again",
		in: func(in *planInput) {
			in.events = []order.Event{placed(1, "u1", 2), placed(1, "u1", 2), placed(2, "u2", 1), placed(3, "u3", 1)}
			in.ledger = orderstore.LedgerState{Sold: 1, Buyers: map[string]int64{"u3": 1},
				Statuses: map[int64]orderstore.OrderStatus{3: unpaid()}}
		},
		want:   figures{Stock: 6, Initial: 10, Pending: 3, Held: 4},
		buyers: map[string]int64{"u1": 2, "u2": 1, "u3": 1},
	}, {
		name: "a release on its way of a stored unpaid order gives its units back",
		in: func(in *planInput) {
			in.events = []order.Event{released(1, "u1", 2, order.ReasonCancelled, 50)}
			in.ledger = orderstore.LedgerState{Sold: 3, Buyers: map[string]int64{"u1": 3},
				Statuses: map[int64]orderstore.OrderStatus{1: unpaid()}}
		},
		want:   figures{Stock: 9, Initial: 10, Released: 2, Held: 1},
		buyers: map[string]int64{"u1": 1},
	}, {
		name: "an expiry on its way counts as released and expired; the buyer at 0 stays named",
		in: func(in *planInput) {
			in.events = []order.Event{released(1, "u1", 2, order.ReasonExpired, 50), released(1, "u1", 2, order.ReasonExpired, 50)}
			in.ledger = orderstore.LedgerState{Sold: 2, Buyers: map[string]int64{"u1": 2},
				Statuses: map[int64]orderstore.OrderStatus{1: unpaid()}}
		},
		want:   figures{Stock: 10, Initial: 10, Released: 2, Expired: 2},
		buyers: map[string]int64{"u1": 0},
	}, {
		name: "an order and its release both on their way: nothing held",
		in: func(in *planInput) {
			in.events = []order.Event{placed(1, "u1", 2), released(1, "u1", 2, order.ReasonCancelled, 50)}
		},
		want:   figures{Stock: 10, Initial: 10, Released: 2, Pending: 2},
		buyers: map[string]int64{"u1": 0},
	}, {
		name: "a settlement the ledger has already, or of an order nobody holds, changes nothing",
		in: func(in *planInput) {
			in.events = []order.Event{released(1, "u1", 2, order.ReasonCancelled, 50), released(2, "u2", 1, order.ReasonExpired, 50), paid(3, "u3", 1, 60)}
			in.ledger = orderstore.LedgerState{Sold: 1, Released: 2, Paid: 1, Buyers: map[string]int64{"u3": 1},
				Statuses: map[int64]orderstore.OrderStatus{1: {Status: orderstore.StatusCancelled}, 3: {Status: orderstore.StatusPaid}}}
		},
		want:   figures{Stock: 9, Initial: 10, Released: 2, Paid: 1, Held: 1},
		buyers: map[string]int64{"u1": 0, "u2": 0, "u3": 1},
	}, {
		name: "a payment on its way counts as paid and keeps its units",
		in: func(in *planInput) {
			in.events = []order.Event{paid(1, "u1", 2, 60)}
			in.ledger = orderstore.LedgerState{Sold: 2, Buyers: map[string]int64{"u1": 2},
				Statuses: map[int64]orderstore.OrderStatus{1: unpaid()}}
		},
		want:   figures{Stock: 8, Initial: 10, Paid: 2, Held: 2},
		buyers: map[string]int64{"u1": 2},
	}, {
		name: "more held than initial and restocks: the lost restocks are recorded, nothing more is sold",
		in: func(in *planInput) {
			in.known = true
			in.meta = stock.SaleStock{Initial: 10, Restocked: 1}
			in.events = []order.Event{placed(9, "u9", 3)}
			in.ledger = orderstore.LedgerState{Sold: 12, Buyers: map[string]int64{"u1": 12}}
		},
		want:   figures{Stock: 0, Initial: 10, Restocked: 5, Pending: 3, Held: 15, LostRestock: 4},
		buyers: map[string]int64{"u1": 12, "u9": 3},
	}, {
		name: "users of the due set the ledger does not count hold 0",
		in: func(in *planInput) {
			in.due = []stock.Deadline{{OrderID: 4, UserID: "u4", PayByMs: 99}}
			in.ledger = orderstore.LedgerState{Buyers: map[string]int64{}}
		},
		want:   figures{Stock: 10, Initial: 10},
		buyers: map[string]int64{"u4": 0},
	}} {
		t.Run(c.name, func(t *testing.T) {
			in := planIn()
			c.in(&in)
			sp := planStock(in)
			if got := figuresOf(sp); got != c.want {
				t.Errorf("figures %+v, want %+v", got, c.want)
			}
			if !maps.Equal(sp.rebuild.Buyers, c.buyers) {
				t.Errorf("buyers %v, want %v", sp.rebuild.Buyers, c.buyers)
			}
			if s := sp.rebuild.SaleStock; s.ProductID != planProduct || s.Limit != 5 {
				t.Errorf("the sale's own fields changed: %+v", s)
			}
		})
	}
}

func TestPlanStockLeavesItsInputAlone(t *testing.T) {
	in := planIn()
	in.events = []order.Event{placed(1, "u1", 2), released(2, "u2", 1, order.ReasonCancelled, 50)}
	in.ledger = orderstore.LedgerState{Sold: 1, Buyers: map[string]int64{"u2": 1},
		Statuses: map[int64]orderstore.OrderStatus{2: unpaid()}}
	planStock(in)
	if want := map[string]int64{"u2": 1}; !maps.Equal(in.ledger.Buyers, want) {
		t.Fatalf("the ledger's buyers became %v, want %v", in.ledger.Buyers, want)
	}
}

func sortedInfos(infos []stock.OrderInfo) []stock.OrderInfo {
	out := slices.Clone(infos)
	slices.SortFunc(out, func(a, b stock.OrderInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func TestPlanStockOrderStates(t *testing.T) {
	in := planIn()
	withDeadline := func(o order.Order) order.Order { o.PayByMs = 5000; return o }
	// 1: unpaid with a deadline, nothing on its way: back in the due set.
	// 2: unpaid with a deadline, its payment on its way: paid.
	// 3: unpaid without a deadline, its expiry on its way: expired.
	// 4: on its way, its cancel too: released.
	// 5: stored and paid, a surviving hash: the ledger's state (lookup).
	// 6: stored and cancelled, in the due set: the ledger's state (lookup).
	// 7: asked but not stored and not on its way: left alone.
	in.events = []order.Event{
		paid(2, "u2", 1, 70),
		released(3, "u3", 1, order.ReasonExpired, 80),
		placed(4, "u4", 1),
		released(4, "u4", 1, order.ReasonCancelled, 90),
	}
	in.due = []stock.Deadline{{OrderID: 1, UserID: "u1", PayByMs: 5000}, {OrderID: 6, UserID: "u6", PayByMs: 5000}}
	in.ids = []int64{1, 2, 3, 4, 5, 6, 7}
	in.ledger = orderstore.LedgerState{
		Sold: 4, Released: 1, Paid: 1,
		Buyers: map[string]int64{"u1": 1, "u2": 1, "u3": 1, "u5": 1},
		Statuses: map[int64]orderstore.OrderStatus{
			1: {Status: orderstore.StatusUnpaid, PayByMs: 5000},
			2: {Status: orderstore.StatusUnpaid, PayByMs: 5000},
			3: unpaid(),
			5: {Status: orderstore.StatusPaid, PaidMs: 40},
			6: {Status: orderstore.StatusCancelled, Expired: true, PayByMs: 5000},
		},
		Deadlines: []orderstore.Row{
			{Order: withDeadline(planOrder(1, "u1", 1))},
			{Order: withDeadline(planOrder(2, "u2", 1))},
		},
	}
	sp := planStock(in)
	want := []stock.OrderInfo{
		{Order: withDeadline(planOrder(1, "u1", 1)), State: stock.StateSuccess},
		{Order: planOrder(2, "u2", 1), State: stock.StatePaid, PaidMs: 70, ClosedMs: 70},
		{Order: planOrder(3, "u3", 1), State: stock.StateExpired, ClosedMs: 80},
		{Order: planOrder(4, "u4", 1), State: stock.StateReleased, ClosedMs: 90},
	}
	if got := sortedInfos(sp.rebuild.Orders); !slices.Equal(got, want) {
		t.Errorf("orders\n got %+v\nwant %+v", got, want)
	}
	if want := []int64{5, 6}; !slices.Equal(sp.lookup, want) {
		t.Errorf("lookup %v, want %v", sp.lookup, want)
	}
	if got, want := figuresOf(sp), (figures{Stock: 7, Initial: 10, Released: 3, Paid: 2, Expired: 1, Pending: 1, Held: 3}); got != want {
		t.Errorf("figures %+v, want %+v", got, want)
	}
	if want := map[string]int64{"u1": 1, "u2": 1, "u3": 0, "u4": 0, "u5": 1, "u6": 0}; !maps.Equal(sp.rebuild.Buyers, want) {
		t.Errorf("buyers %v, want %v", sp.rebuild.Buyers, want)
	}

	// The lookup's hashes: 5 survived as unpaid, 6 as success with its
	// deadline; 9 survived but is no lookup's.
	have := map[int64]stock.OrderInfo{
		5: {Order: planOrder(5, "u5", 1), State: stock.StateSuccess},
		6: {Order: withDeadline(planOrder(6, "u6", 1)), State: stock.StateSuccess},
		9: {Order: planOrder(9, "u9", 1), State: stock.StateSuccess},
	}
	got := ledgerStates([]int64{5, 6, 7}, have, in.ledger.Statuses)
	wantStates := []stock.OrderInfo{
		{Order: planOrder(5, "u5", 1), State: stock.StatePaid, PaidMs: 40, ClosedMs: 40},
		{Order: withDeadline(planOrder(6, "u6", 1)), State: stock.StateExpired},
	}
	if !slices.Equal(got, wantStates) {
		t.Errorf("ledger states\n got %+v\nwant %+v", got, wantStates)
	}
}

func TestAskedOrders(t *testing.T) {
	got := askedOrders(
		[]order.Event{placed(5, "u", 1), released(5, "u", 1, order.ReasonCancelled, 1), placed(2, "u", 1)},
		map[int64]string{3: "h", 5: "h"},
		[]stock.Deadline{{OrderID: 1}, {OrderID: 3}},
	)
	if want := []int64{1, 2, 3, 5}; !slices.Equal(got, want) {
		t.Fatalf("asked %v, want %v", got, want)
	}
}

// The topic's uncommitted tail (the ledger's Tail) counts as the outbox
// does, once per order id, whichever of the store, the outbox and the tail
// (copies included) hold it; its orders on their way are written pending.
func TestPlanStockTail(t *testing.T) {
	in := planIn()
	withDeadline := func(o order.Order) order.Order { o.PayByMs = 5000; return o }
	// 1: stored unpaid, its cancel in the tail: released.
	// 2: in the tail and stored (a consumer killed between its insert and
	//    its commit): the ledger's, not counted again.
	// 3: in the tail twice (a producer's retry): once, pending.
	// 4: in the tail and in the outbox: once, pending.
	// 5: in the tail with a deadline, paid in the tail: paid, not pending.
	// 6: in the tail with a deadline: pending, the deadline kept.
	// 7: only in the outbox: counted, no hash written (it has one).
	in.events = []order.Event{placed(4, "u4", 1), placed(7, "u7", 1)}
	in.ids = []int64{1, 2, 3, 4, 5, 6, 7}
	in.ledger = orderstore.LedgerState{
		Sold: 3, Buyers: map[string]int64{"u1": 1, "u2": 2},
		Statuses: map[int64]orderstore.OrderStatus{1: unpaid(), 2: unpaid()},
		Tail: []order.Event{
			released(1, "u1", 1, order.ReasonCancelled, 60),
			placed(2, "u2", 2),
			placed(3, "u3", 1), placed(3, "u3", 1),
			placed(4, "u4", 1),
			{V: 1, Type: order.TypeOrder, Order: withDeadline(planOrder(5, "u5", 1))},
			{V: 1, Type: order.TypePaid, Order: withDeadline(planOrder(5, "u5", 1)), PaidMs: 70},
			{V: 1, Type: order.TypeOrder, Order: withDeadline(planOrder(6, "u6", 2))},
		},
		TailRead: true,
	}
	sp := planStock(in)
	// Held: 2 (u2, stored) + 1 (3) + 1 (4) + 1 (5) + 2 (6) + 1 (7); u1's
	// unit back.
	if got, want := figuresOf(sp), (figures{Stock: 2, Initial: 10, Released: 1, Paid: 1, Pending: 6, Held: 8}); got != want {
		t.Errorf("figures %+v, want %+v", got, want)
	}
	if want := map[string]int64{"u1": 0, "u2": 2, "u3": 1, "u4": 1, "u5": 1, "u6": 2, "u7": 1}; !maps.Equal(sp.rebuild.Buyers, want) {
		t.Errorf("buyers %v, want %v", sp.rebuild.Buyers, want)
	}
	want := []stock.OrderInfo{
		{Order: planOrder(1, "u1", 1), State: stock.StateReleased, ClosedMs: 60},
		{Order: planOrder(3, "u3", 1), State: stock.StatePending},
		{Order: planOrder(4, "u4", 1), State: stock.StatePending},
		{Order: withDeadline(planOrder(5, "u5", 1)), State: stock.StatePaid, PaidMs: 70, ClosedMs: 70},
		{Order: withDeadline(planOrder(6, "u6", 2)), State: stock.StatePending},
	}
	if got := sortedInfos(sp.rebuild.Orders); !slices.Equal(got, want) {
		t.Errorf("orders\n got %+v\nwant %+v", got, want)
	}
	if got := slices.Sorted(slices.Values(sp.tailPending)); !slices.Equal(got, []int64{3, 4, 6}) {
		t.Errorf("tail pending %v, want [3 4 6]", got)
	}
	if want := []int64{2}; !slices.Equal(sp.lookup, want) {
		t.Errorf("lookup %v, want %v", sp.lookup, want)
	}
}
