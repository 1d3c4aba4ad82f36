package stock

import (
	"context"
	_ "embed"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The previous version's deduction and success-mark scripts, verbatim
// (git show main:orders/stock/lua/...): it knows only the per-order
// ledger, one string key and one outbox entry per order. The older edge of
// the ledger's rolling upgrade in these tests.
var (
	//go:embed testdata/deduct_orders.lua
	ordersDeductLua string
	//go:embed testdata/mark_success_orders.lua
	ordersMarkLua string
	//go:embed testdata/order_fn_orders.lua
	ordersFnLua string

	ordersDeductScript = rueidis.NewLuaScript(ordersDeductLua)
	ordersMarkScript   = rueidis.NewLuaScript(ordersFnLua + ordersMarkLua)
)

// ordersEdgeDeduct places a as an edge of the previous version does (its
// call shape: both buyer layouts' keys, one token hash), and reports
// whether it succeeded.
func ordersEdgeDeduct(t testing.TB, s *Store, a Attempt) bool {
	t.Helper()
	p := a.ProductID
	keys := append([]string{StockKey(p), OutboxKey(p), MetaKey(p)}, buyerShardKeys(p)...)
	keys = append(keys, BuyerKey(p, a.UserID), OrderKey(p, a.ID), TokenKey(p, a.TokenNonceHex), TokenBucketKey(p, a.TokenExpiresMs))
	args := []string{p, s.graceMs, s.orderTTLMs, s.fenceArg(), a.UserID, strconv.Itoa(a.Qty), strconv.Itoa(a.Limit),
		i64(a.ID), i64(a.PriceCents), i64(a.CreatedMs), i64(a.TokenExpiresMs - a.CreatedMs), strconv.Itoa(a.Edge), i64(a.PayByMs),
		"s", shardArgs[BuyerShard(a.UserID)], "1"}
	res, err := ordersDeductScript.Exec(context.Background(), s.c, keys, args).ToArray()
	if err != nil || len(res) != 2 {
		t.Errorf("previous deduct.lua: %v %v", res, err)
		return false
	}
	_, err = res[1].ToString()
	return err == nil
}

// ordersEdgeRead reads an order as the previous version does: a GET of its
// key (its orders are strings); ok is false when it finds none.
func ordersEdgeRead(t testing.TB, s *Store, p string, id int64) (OrderInfo, bool) {
	t.Helper()
	v, err := s.c.Do(context.Background(), s.c.B().Get().Key(OrderKey(p, id)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return OrderInfo{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return parseOrderValue(p, id, v)
}

// The ledger's rolling upgrade: an edge of the previous version
// (testdata/deduct_orders.lua, verbatim) and one of this version sell one
// sale at once, attempts interleaved and racing, every token tried on both:
// nobody gets past the limit, no token is used twice, the stock adds up,
// every order is in the outbox once, and every order is readable by this
// version. In a sale warmed with OrderKeys — what the upgrade's edges
// do while the previous version runs — every order is also readable by the
// previous version, and its success mark marks this version's orders (and
// this version's the previous one's): both serve the sale whole. In a
// sale of ledger "b" the previous version's deductions keep the limit and
// the tokens exact (the buyer hashes are the same), but it cannot read
// this version's orders, nor parse their batch entries, nor rebuild the
// sale: that is why sale.order_keys must stay true while it runs.
func TestLedgerRollingUpgrade(t *testing.T) {
	for _, l := range ledgers {
		t.Run(l.name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := openReal(t, Options{OrderKeys: l.orderKeys})
			const limit, users, stockN = 3, 20, 1000
			p := "roll" + l.name
			warm(t, s, p, stockN, limit)
			if batchedSale(t, s, p) == l.orderKeys {
				t.Fatalf("sale of ledger b: %v, warmed with OrderKeys %v", !l.orderKeys, l.orderKeys)
			}
			var mu sync.Mutex
			bought, uses := map[string]int{}, map[string]int{}
			var placed, byOld []Attempt
			record := func(a Attempt, ok, old bool) {
				mu.Lock()
				defer mu.Unlock()
				if ok {
					bought[a.UserID] += a.Qty
					uses[a.TokenNonceHex]++
					placed = append(placed, a)
					if old {
						byOld = append(byOld, a)
					}
				}
			}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 60 {
						u := "u" + strconv.Itoa((g*7+i)%users)
						a := attempt(p, u, 1+i%2, limit)
						b := sameToken(a, u, a.Qty)
						if (g+i)%2 == 0 {
							record(a, ordersEdgeDeduct(t, s, a), true)
							out, err := s.Deduct(ctx, b)
							if err != nil {
								t.Error(err)
							}
							record(b, out.Code == OK, false)
						} else {
							out, err := s.Deduct(ctx, a)
							if err != nil {
								t.Error(err)
							}
							record(a, out.Code == OK, false)
							record(b, ordersEdgeDeduct(t, s, b), true)
						}
					}
				})
			}
			wg.Wait()
			sold := checkRaced(t, s, p, limit, bought, uses)
			if len(byOld) == 0 || len(byOld) == len(placed) || len(bought) != users {
				t.Fatalf("%d successes (%d by the previous version) for %d buyers of %d: the test sold too little to prove anything",
					len(placed), len(byOld), len(bought), users)
			}
			if rem := remaining(t, s, p); rem != int64(stockN-sold) {
				t.Errorf("remaining %d, sold %d of %d", rem, sold, stockN)
			}
			// Every order in the outbox once, and readable by this version,
			// whoever wrote it; by the previous one in the per-order ledger,
			// and its own orders in either.
			ids := checkPlaced(t, s, p, placed)
			oldReads := placed
			if !l.orderKeys {
				oldReads = byOld
			}
			for _, a := range oldReads {
				if o, ok := ordersEdgeRead(t, s, p, a.ID); !ok || o.Order != a.Order || o.State != StatePending {
					t.Errorf("order %d read by the previous version: %+v %v, want pending %+v", a.ID, o, ok, a.Order)
				}
			}
			if !l.orderKeys {
				// One outbox entry per call: fewer entries than orders.
				if n, _ := s.OutboxLen(ctx, p); n >= int64(len(placed)) {
					t.Errorf("ledger b: %d outbox entries for %d orders", n, len(placed))
				}
				return
			}
			if n, _ := s.OutboxLen(ctx, p); n != int64(len(placed)) {
				t.Errorf("per-order ledger: %d outbox entries for %d orders", n, len(placed))
			}
			// The success marks: each version's marks the other's orders.
			half := len(placed) / 2
			oldKeys := []string{DueKey(p)}
			var oldArgs []string
			for _, a := range placed[:half] {
				oldKeys = append(oldKeys, OrderKey(p, a.ID))
				oldArgs = append(oldArgs, i64(a.ID))
			}
			if n, err := ordersMarkScript.Exec(ctx, s.c, oldKeys, oldArgs).AsInt64(); err != nil || n != int64(half) {
				t.Fatalf("previous mark_success.lua = %d, %v; want %d", n, err, half)
			}
			if n, err := s.MarkSuccess(ctx, p, ids[half:]...); err != nil || n != len(placed)-half {
				t.Fatalf("MarkSuccess = %d, %v; want %d", n, err, len(placed)-half)
			}
			for _, a := range placed {
				if o, ok := ordersEdgeRead(t, s, p, a.ID); !ok || o.State != StateSuccess {
					t.Errorf("order %d after both marks: %+v %v", a.ID, o, ok)
				}
			}
		})
	}
}

// A sale whose meta names a ledger this version does not know (a later
// version's) is refused by the deduction, which writes nothing: this
// version never writes orders a later one would not find.
func TestDeductRefusesAnUnknownLedger(t *testing.T) {
	ctx := context.Background()
	s, _ := openReal(t, Options{})
	const p = "later"
	warm(t, s, p, 10, 3)
	if err := s.c.Do(ctx, s.c.B().Hset().Key(MetaKey(p)).FieldValue().FieldValue("ledger", "z").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if out := mustDeduct(t, s, attempt(p, "alice", 1, 3)); out.Code != NotReady {
		t.Fatalf("deduct on a sale of ledger z: %+v", out)
	}
	if rem := remaining(t, s, p); rem != 10 {
		t.Errorf("remaining %d after a refused call", rem)
	}
	if n, _ := s.OutboxLen(ctx, p); n != 0 {
		t.Errorf("%d outbox entries after a refused call", n)
	}
}

// The ledger rebuild is exact in both ledgers, on a standalone Redis and on
// a cluster: after a loss (the stock key, an order, a buyer's count gone)
// the rebuild gives every order the ledger's state in the sale's ledger —
// the lost one made again where this ledger keeps it, with a TTL — the due
// set exactly the unpaid orders with a deadline, every buyer her count and
// the stock what is left; and the reopened sale settles each order once.
func TestRebuildIsExactInBothLedgers(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		for _, l := range ledgers {
			t.Run(kind+"/"+l.name, func(t *testing.T) {
				var s *Store
				if kind == "cluster" {
					s, _ = openCluster(t, Options{OrderKeys: l.orderKeys})
				} else {
					s, _ = openReal(t, Options{OrderKeys: l.orderKeys})
				}
				testRebuildExact(t, s, !l.orderKeys)
			})
		}
	}
	// The per-key buyers and tokens too: their names are made in the
	// scripts from prefixes (the lean calls), undeclared keys of the
	// product's slot, which a Cluster node must serve.
	t.Run("cluster/per-key-buyers", func(t *testing.T) {
		s, _ := openCluster(t, Options{BuyerKeys: true, OrderKeys: true})
		testRebuildExact(t, s, false)
	})
}

func testRebuildExact(t *testing.T, s *Store, batches bool) {
	ctx := context.Background()
	const p, stockN, limit = "rx", 40, 5
	warm(t, s, p, stockN, limit)
	if batchedSale(t, s, p) != batches {
		t.Fatalf("sale of ledger b: %v, want %v", !batches, batches)
	}
	// Eight purchases at once (group commit: a few calls), all stored.
	as := make([]Attempt, 8)
	var wg sync.WaitGroup
	for i := range as {
		as[i] = attempt(p, "w"+strconv.Itoa(i), 1+i%2, limit)
		as[i].PayByMs = as[i].CreatedMs + time.Hour.Milliseconds()
		wg.Go(func() {
			if out := mustDeduct(t, s, as[i]); out.Code != OK {
				t.Errorf("deduct %d: %v", i, out.Code)
			}
		})
	}
	wg.Wait()
	ids := make([]int64, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	if n, err := s.MarkSuccess(ctx, p, ids...); err != nil || n != len(as) {
		t.Fatalf("MarkSuccess = %d, %v", n, err)
	}
	paid, err := s.Pay(ctx, p, as[0].ID, "", 0)
	if err != nil || !paid.Changed {
		t.Fatalf("pay: %+v %v", paid, err)
	}
	cancelled, err := s.Cancel(ctx, p, as[1].ID)
	if err != nil || !cancelled.Changed {
		t.Fatalf("cancel: %+v %v", cancelled, err)
	}
	for i, a := range as {
		if home := orderHome(t, s, p, a.ID); (home == OrderBucketKey(p, a.ID)) != batches {
			t.Fatalf("order %d lives in %s", i, home)
		}
	}
	// The loss: the stock key, order 2 and w3's count.
	info := saleInfo(t, s, p)
	c := s.c
	lost := c.B().Del().Key(OrderKey(p, as[2].ID)).Build()
	if batches {
		lost = c.B().Hdel().Key(OrderBucketKey(p, as[2].ID)).Field(i64(as[2].ID)).Build()
	}
	for _, cmd := range []rueidis.Completed{c.B().Del().Key(StockKey(p)).Build(), lost} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	forgetBuyer(t, s, p, "w3")

	// The ledger's view.
	var orders []OrderInfo
	buyers := map[string]int64{}
	var held int64
	for i, a := range as {
		o := OrderInfo{Order: a.Order, State: StateSuccess}
		switch i {
		case 0:
			o.State, o.PaidMs, o.ClosedMs = StatePaid, paid.AtMs, paid.AtMs
		case 1:
			o.State, o.ClosedMs = StateReleased, cancelled.AtMs
		}
		orders = append(orders, o)
		if i != 1 {
			buyers[a.UserID] = int64(a.Qty)
			held += int64(a.Qty)
		} else {
			buyers[a.UserID] = 0
		}
	}
	fence := fenceNow(t, s, p)
	_, reopened, err := s.Rebuild(ctx, Rebuild{
		SaleStock: SaleStock{ProductID: p, Stock: stockN - held, Initial: stockN, Released: int64(as[1].Qty),
			Paid: int64(as[0].Qty), Limit: limit, Price: 1999, EndMs: info.EndMs},
		Fence: fence, Buyers: buyers, Orders: orders,
	})
	if err != nil || !reopened {
		t.Fatalf("Rebuild = %v, %v", reopened, err)
	}
	got, err := s.Orders(ctx, p, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range orders {
		o := got[want.ID]
		if o.Order != want.Order || o.State != want.State || o.PaidMs != want.PaidMs || o.ClosedMs != want.ClosedMs {
			t.Errorf("order %d after the rebuild: %+v, want %+v", i, o, want)
		}
		home := orderHome(t, s, p, want.ID)
		if (home == OrderBucketKey(p, want.ID)) != batches || pttl(t, s, home) <= 0 {
			t.Errorf("order %d lives in %s, PTTL %d", i, home, pttl(t, s, home))
		}
	}
	if _, total, err := s.NextDeadlines(ctx, p, 20); err != nil || total != int64(len(as)-2) {
		t.Errorf("due set holds %d (%v), want the %d unpaid orders", total, err, len(as)-2)
	}
	for u, n := range buyers {
		if b, err := s.Bought(ctx, p, u); err != nil || b != n {
			t.Errorf("%s bought %d (%v), want %d", u, b, err, n)
		}
	}
	if rem := remaining(t, s, p); rem != stockN-held {
		t.Fatalf("remaining %d, want %d", rem, stockN-held)
	}
	// Each order settles once: the lost one cancelled gives its units back
	// once; the paid one stays paid.
	for range 2 {
		if _, err := s.Cancel(ctx, p, as[2].ID); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := s.Cancel(ctx, p, as[0].ID); err != nil || again.Changed || again.Info.State != StatePaid {
		t.Errorf("cancel of a paid order after the rebuild: %+v %v", again, err)
	}
	if rem := remaining(t, s, p); rem != stockN-held+int64(as[2].Qty) {
		t.Errorf("remaining %d after one cancel (twice), want %d", rem, stockN-held+int64(as[2].Qty))
	}
}

// The consumer's success mark, in both ledgers: one call for a stored
// batch, each order marked once even when its id comes twice (a retried
// batch beside a new one), its deadline in the due set once, and a second
// mark changes nothing.
func TestMarkSuccessOnceInBothLedgers(t *testing.T) {
	for _, l := range ledgers {
		t.Run(l.name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := openReal(t, Options{OrderKeys: l.orderKeys})
			const p = "mk"
			warm(t, s, p, 10, 5)
			a, b := attempt(p, "alice", 1, 5), attempt(p, "bob", 1, 5)
			a.PayByMs = a.CreatedMs + time.Hour.Milliseconds()
			for _, x := range []Attempt{a, b} {
				if out := mustDeduct(t, s, x); out.Code != OK {
					t.Fatalf("deduct: %v", out.Code)
				}
			}
			if n, err := s.MarkSuccess(ctx, p, a.ID, b.ID, a.ID); err != nil || n != 2 {
				t.Fatalf("MarkSuccess(a, b, a) = %d, %v; want 2", n, err)
			}
			mustState(t, s, a, StateSuccess)
			mustState(t, s, b, StateSuccess)
			if _, total, err := s.NextDeadlines(ctx, p, 10); err != nil || total != 1 {
				t.Errorf("due set holds %d (%v), want a's deadline once", total, err)
			}
			if n, err := s.MarkSuccess(ctx, p, a.ID, b.ID); err != nil || n != 0 {
				t.Errorf("second MarkSuccess = %d, %v; want 0", n, err)
			}
		})
	}
}
