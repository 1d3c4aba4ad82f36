package stock

import (
	"context"
	_ "embed"
	"strconv"
	"sync"
	"testing"

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
			var sold int
			for u, n := range bought {
				if n > limit {
					t.Errorf("%s bought %d, limit %d", u, n, limit)
				}
				if got, err := s.Bought(ctx, p, u); err != nil || got != int64(n) {
					t.Errorf("Bought(%s) = %d, %v; want %d", u, got, err, n)
				}
				sold += n
			}
			for nonce, n := range uses {
				if n > 1 {
					t.Errorf("token %s used %d times", nonce, n)
				}
			}
			if len(byOld) == 0 || len(byOld) == len(placed) || len(bought) != users {
				t.Fatalf("%d successes (%d by the previous version) for %d buyers of %d: the test sold too little to prove anything",
					len(placed), len(byOld), len(bought), users)
			}
			if rem := remaining(t, s, p); rem != int64(stockN-sold) {
				t.Errorf("remaining %d, sold %d of %d", rem, sold, stockN)
			}
			// Every order in the outbox once.
			obs, err := s.OutboxOrders(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			inOutbox := map[int64]int{}
			for _, o := range obs {
				inOutbox[o.ID]++
			}
			ids := make([]int64, len(placed))
			for i, a := range placed {
				ids[i] = a.ID
				if inOutbox[a.ID] != 1 {
					t.Errorf("order %d in the outbox %d times", a.ID, inOutbox[a.ID])
				}
			}
			if len(obs) != len(placed) {
				t.Errorf("outbox has %d orders, %d placed", len(obs), len(placed))
			}
			// Readable by this version, whoever wrote it; by the previous
			// one in the per-order ledger, and its own orders in either.
			got, err := s.Orders(ctx, p, ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range placed {
				if o := got[a.ID]; o.Order != a.Order || o.State != StatePending {
					t.Errorf("order %d read by this version: %+v, want pending %+v", a.ID, o, a.Order)
				}
			}
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
