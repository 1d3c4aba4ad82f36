package stock

import (
	"context"
	_ "embed"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/internal/await"
)

// The older version's deduction and success-mark scripts, verbatim (its
// orders are hashes: HSET + PEXPIRE, HMGET + HSET): the older edge of a
// rolling upgrade in these tests.
var (
	//go:embed testdata/deduct_hash.lua
	hashDeductLua string
	//go:embed testdata/mark_success_hash.lua
	hashMarkLua string

	hashDeductScript = rueidis.NewLuaScript(hashDeductLua)
	hashMarkScript   = rueidis.NewLuaScript(hashMarkLua)
)

// oldEdgeDeduct places a as an edge of the older version did.
func oldEdgeDeduct(t testing.TB, s *Store, a Attempt) {
	t.Helper()
	p := a.ProductID
	keys := []string{StockKey(p), OutboxKey(p), MetaKey(p), BuyerKey(p, a.UserID), OrderKey(p, a.ID), TokenKey(p, a.TokenNonceHex)}
	args := []string{p, s.graceMs, s.orderTTLMs, s.fenceArg(), a.UserID, strconv.Itoa(a.Qty), strconv.Itoa(a.Limit),
		i64(a.ID), i64(a.PriceCents), i64(a.CreatedMs), i64(a.TokenExpiresMs - a.CreatedMs), strconv.Itoa(a.Edge), i64(a.PayByMs)}
	res, err := hashDeductScript.Exec(context.Background(), s.c, keys, args).ToArray()
	if err != nil || len(res) != 2 {
		t.Fatalf("old deduct.lua: %v %v", res, err)
	}
	if _, err := res[1].ToString(); err != nil {
		t.Fatalf("old deduct.lua did not place %+v: %v", a, res[1])
	}
}

func keyType(t testing.TB, s *Store, key string) string {
	t.Helper()
	typ, err := s.c.Do(context.Background(), s.c.B().Type().Key(key).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return typ
}

func mustState(t testing.TB, s *Store, a Attempt, want string) OrderInfo {
	t.Helper()
	o, ok, err := s.OrderState(context.Background(), a.ProductID, a.ID)
	if err != nil || !ok || o.State != want || o.Order != a.Order {
		t.Fatalf("OrderState(%d) = %+v %v %v, want %s of %+v", a.ID, o, ok, err, want, a.Order)
	}
	return o
}

// One product sold by an older edge (hash orders) and a new one (string
// orders) at once: every reader and every settlement of this version
// takes both, each order keeps its layout and its TTL, and the issue 16
// guarantees hold for both (exactly-once settle, the due set, the rebuild).
func TestOrderLayoutsMixedDuringUpgrade(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			// The older edge keeps its buyers and tokens per key: the
			// upgrade's edges warm with BuyerKeys.
			var s *Store
			if kind == "real" {
				s, _ = openReal(t, Options{BuyerKeys: true, OrderKeys: true})
			} else {
				s = openEmbedded(t, Options{BuyerKeys: true, OrderKeys: true})
			}
			testMixedLayouts(t, s, kind == "embedded")
		})
	}
}

func testMixedLayouts(t *testing.T, s *Store, embedded bool) {
	ctx := context.Background()
	const p = "mix"
	warm(t, s, p, 100, 10)
	ttl := s.opts.OrderTTL.Milliseconds()
	// Per layout: paid, cancelled, expired, left pending.
	var hashed, strs []Attempt
	for i, payIn := range []time.Duration{time.Hour, time.Hour, 300 * time.Millisecond, time.Hour} {
		h := attempt(p, "old"+strconv.Itoa(i), 1+i%2, 10)
		h.PayByMs = h.CreatedMs + payIn.Milliseconds()
		oldEdgeDeduct(t, s, h)
		n := attempt(p, "new"+strconv.Itoa(i), 1+i%2, 10)
		n.PayByMs = n.CreatedMs + payIn.Milliseconds()
		if out := mustDeduct(t, s, n); out.Code != OK {
			t.Fatalf("deduct %+v: %v", n, out.Code)
		}
		hashed, strs = append(hashed, h), append(strs, n)
	}
	for i := range hashed {
		if typ := keyType(t, s, OrderKey(p, hashed[i].ID)); typ != "hash" {
			t.Fatalf("old edge's order is a %s", typ)
		}
		if typ := keyType(t, s, OrderKey(p, strs[i].ID)); typ != "string" {
			t.Fatalf("new edge's order is a %s", typ)
		}
		if got := pttl(t, s, OrderKey(p, strs[i].ID)); got <= 0 || got > ttl {
			t.Fatalf("string order's TTL %d ms, want (0, %d]", got, ttl)
		}
		mustState(t, s, hashed[i], StatePending)
		mustState(t, s, strs[i], StatePending)
	}

	// The consumer's mark: both layouts in one call, once.
	marked := []int64{hashed[0].ID, strs[0].ID, hashed[1].ID, strs[1].ID, hashed[2].ID, strs[2].ID}
	if n, err := s.MarkSuccess(ctx, p, marked...); err != nil || n != 6 {
		t.Fatalf("MarkSuccess = %d, %v", n, err)
	}
	if n, err := s.MarkSuccess(ctx, p, marked...); err != nil || n != 0 {
		t.Fatalf("MarkSuccess again = %d, %v", n, err)
	}
	if ds, total, err := s.NextDeadlines(ctx, p, 10); err != nil || total != 6 || ds[0].OrderID != hashed[2].ID && ds[0].OrderID != strs[2].ID {
		t.Fatalf("due after the marks: %+v %d %v", ds, total, err)
	}
	if got := pttl(t, s, OrderKey(p, strs[0].ID)); got <= 0 || got > ttl {
		t.Fatalf("string order's TTL after the mark %d ms", got)
	}
	refs := []OrderRef{{p, hashed[0].ID}, {p, strs[0].ID}, {p, hashed[3].ID}, {p, strs[3].ID}, {p, 1 << 60}}
	if got := s.OrderStates(ctx, refs, []string{"before"}); !slices.Equal(got, []string{"before", StateSuccess, StateSuccess, StatePending, StatePending, ""}) {
		t.Fatalf("OrderStates = %q", got)
	}

	before := remaining(t, s, p)
	for _, a := range []Attempt{hashed[0], strs[0]} { // paid
		st, err := s.Pay(ctx, p, a.ID, "", 0)
		if err != nil || !st.Changed || st.Info.State != StatePaid || st.Info.PaidMs != st.AtMs || st.Info.ClosedMs != st.AtMs || st.Info.Order != a.Order {
			t.Fatalf("Pay(%d) = %+v, %v", a.ID, st, err)
		}
		outboxEvent(t, s, p, st)
		if got := mustState(t, s, a, StatePaid); got.PaidMs != st.AtMs || got.ClosedMs != st.AtMs {
			t.Fatalf("paid order read back %+v, settlement %+v", got, st)
		}
		if st, err := s.Pay(ctx, p, a.ID, "", 0); err != nil || st.Changed || st.Info.State != StatePaid {
			t.Fatalf("Pay again = %+v, %v", st, err)
		}
	}
	for _, a := range []Attempt{hashed[1], strs[1]} { // cancelled
		st, err := s.Cancel(ctx, p, a.ID)
		if err != nil || !st.Changed || st.Info.State != StateReleased || st.Info.ClosedMs != st.AtMs || st.Info.PaidMs != 0 {
			t.Fatalf("Cancel(%d) = %+v, %v", a.ID, st, err)
		}
		outboxEvent(t, s, p, st)
		if st, err := s.Cancel(ctx, p, a.ID); err != nil || st.Changed {
			t.Fatalf("Cancel again = %+v, %v", st, err)
		}
		if n, err := s.Bought(ctx, p, a.UserID); err != nil || n != 0 {
			t.Fatalf("Bought(%s) after the cancel = %d, %v", a.UserID, n, err)
		}
	}
	if got := remaining(t, s, p); got != before+int64(hashed[1].Qty+strs[1].Qty) {
		t.Fatalf("remaining %d after the cancels, want %d", got, before+int64(hashed[1].Qty+strs[1].Qty))
	}
	expired := map[int64]bool{} // the deadlines
	await.Until(t, 10*time.Second, "both short deadlines expire", func() bool {
		got, err := s.ExpireDue(ctx, p, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range got {
			if st.Info.State != StateExpired || expired[st.Info.ID] {
				t.Fatalf("ExpireDue gave %+v (seen: %v)", st, expired[st.Info.ID])
			}
			outboxEvent(t, s, p, st)
			expired[st.Info.ID] = true
		}
		return len(expired) == 2
	})
	for _, a := range []Attempt{hashed[2], strs[2]} {
		if !expired[a.ID] {
			t.Fatalf("order %d did not expire: %v", a.ID, expired)
		}
		if st, err := s.Pay(ctx, p, a.ID, "", 0); err != nil || st.Changed || st.Info.State != StateExpired {
			t.Fatalf("Pay of an expired order = %+v, %v", st, err)
		}
	}
	for i := range hashed {
		if typ := keyType(t, s, OrderKey(p, hashed[i].ID)); typ != "hash" {
			t.Fatalf("a settled hash order became a %s", typ)
		}
		if got := pttl(t, s, OrderKey(p, strs[i].ID)); got <= 0 || got > ttl {
			t.Fatalf("string order %d's TTL after its settlement %d ms", i, got)
		}
	}
	if _, total, _ := s.NextDeadlines(ctx, p, 1); total != 0 {
		t.Fatalf("due after every settlement: %d", total)
	}

	// An unknown outcome: either layout's order proves it placed; an attempt
	// never placed gets a failed order.
	for _, a := range []Attempt{hashed[3], strs[3]} {
		if v, err := s.ResolveUnknown(ctx, &a, true); err != nil || v != Placed {
			t.Fatalf("ResolveUnknown(%d) = %v, %v", a.ID, v, err)
		}
	}
	lost := attempt(p, "lost", 1, 10)
	if v, err := s.ResolveUnknown(ctx, &lost, true); err != nil || v != NotPlaced {
		t.Fatalf("ResolveUnknown(never placed) = %v, %v", v, err)
	}
	if v, err := s.ResolveUnknown(ctx, &lost, false); err != nil || v != NotPlaced {
		t.Fatalf("ResolveUnknown(failed) again = %v, %v", v, err)
	}
	mustState(t, s, lost, StateFailed)

	// The rebuild's reads and writes.
	all := append(append([]Attempt{}, hashed...), strs...)
	ids := make([]int64, 0, len(all))
	for _, a := range all {
		ids = append(ids, a.ID)
	}
	got, err := s.Orders(ctx, p, append(ids, 1<<60))
	if err != nil || len(got) != len(all) {
		t.Fatalf("Orders = %d orders, %v", len(got), err)
	}
	for _, a := range all {
		if want := mustState(t, s, a, got[a.ID].State); got[a.ID] != want {
			t.Fatalf("Orders[%d] = %+v, OrderState %+v", a.ID, got[a.ID], want)
		}
	}
	if embedded {
		surv, err := s.SurvivingOrders(ctx, p)
		if err != nil || len(surv) != len(all)+1 || surv[hashed[0].ID] != StatePaid || surv[strs[0].ID] != StatePaid ||
			surv[hashed[3].ID] != StatePending || surv[strs[3].ID] != StatePending || surv[lost.ID] != StateFailed {
			t.Fatalf("SurvivingOrders = %v, %v", surv, err)
		}
	}
	// The ledger says: the pending ones were stored and paid later, the
	// paid ones... paid; one order Redis lost is made again, unpaid.
	fence := fenceNow(t, s, p)
	now := time.Now().UnixMilli()
	gone := attempt(p, "gone", 1, 10)
	gone.PayByMs = now + time.Hour.Milliseconds()
	fix := []OrderInfo{
		{Order: hashed[3].Order, State: StatePaid, PaidMs: now, ClosedMs: now},
		{Order: strs[3].Order, State: StatePaid, PaidMs: now, ClosedMs: now},
		{Order: hashed[1].Order, State: StateReleased, ClosedMs: now},
		{Order: gone.Order, State: StateSuccess},
	}
	if lifted, err := s.fixOrders(ctx, fence, p, fix, false); err != nil || lifted {
		t.Fatalf("fixOrders = %v, %v", lifted, err)
	}
	for _, f := range fix {
		o, ok, err := s.OrderState(ctx, p, f.ID)
		if err != nil || !ok || o != f {
			t.Fatalf("order %d after the rebuild: %+v %v %v, want %+v", f.ID, o, ok, err, f)
		}
	}
	if typ := keyType(t, s, OrderKey(p, hashed[3].ID)); typ != "hash" {
		t.Fatalf("the rebuild turned a hash order into a %s", typ)
	}
	if typ := keyType(t, s, OrderKey(p, gone.ID)); typ != "string" {
		t.Fatalf("an order made again is a %s", typ)
	}
	for _, id := range []int64{strs[3].ID, gone.ID} {
		if got := pttl(t, s, OrderKey(p, id)); got <= 0 || got > ttl {
			t.Fatalf("order %d's TTL after the rebuild %d ms", id, got)
		}
	}
	if ds, total, _ := s.NextDeadlines(ctx, p, 5); total != 1 || ds[0].OrderID != gone.ID {
		t.Fatalf("due after the rebuild %+v (%d), want only order %d", ds, total, gone.ID)
	}
}

// With OrderHashes, for the first step of an upgrade from the hash
// version, new orders are hashes that an older edge's own scripts read.
func TestOrderHashesForOlderEdges(t *testing.T) {
	ctx := context.Background()
	s, _ := openReal(t, Options{OrderHashes: true})
	const p = "hashes"
	warm(t, s, p, 10, 10)
	a := attempt(p, "alice", 2, 10)
	a.PayByMs = a.CreatedMs + time.Hour.Milliseconds()
	if out := mustDeduct(t, s, a); out.Code != OK {
		t.Fatalf("deduct: %v", out.Code)
	}
	if typ := keyType(t, s, OrderKey(p, a.ID)); typ != "hash" {
		t.Fatalf("order is a %s with OrderHashes", typ)
	}
	n, err := hashMarkScript.Exec(ctx, s.c, []string{DueKey(p), OrderKey(p, a.ID)}, []string{i64(a.ID)}).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("old mark_success.lua = %d, %v", n, err)
	}
	mustState(t, s, a, StateSuccess)
	if _, total, _ := s.NextDeadlines(ctx, p, 1); total != 1 {
		t.Fatalf("due %d, want 1", total)
	}
	lost := attempt(p, "lost", 1, 10)
	if v, err := s.ResolveUnknown(ctx, &lost, true); err != nil || v != NotPlaced {
		t.Fatalf("ResolveUnknown = %v, %v", v, err)
	}
	if typ := keyType(t, s, OrderKey(p, lost.ID)); typ != "hash" {
		t.Fatalf("failed order is a %s with OrderHashes", typ)
	}
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(OrderKey(p, lost.ID)).Build()).AsStrMap()
	if err != nil || m["state"] != StateFailed || m["user"] != "lost" {
		t.Fatalf("failed order's hash %v, %v", m, err)
	}
}

func TestParseOrderValue(t *testing.T) {
	o, ok := parseOrderValue("p1", 9, "s:alice:2:1999:1700000000000:7:1700000060000")
	if !ok || o.State != StateSuccess || o.UserID != "alice" || o.Qty != 2 || o.PriceCents != 1999 ||
		o.CreatedMs != 1700000000000 || o.Edge != 7 || o.PayByMs != 1700000060000 || o.PaidMs != 0 || o.ID != 9 || o.ProductID != "p1" {
		t.Fatalf("parse = %+v %v", o, ok)
	}
	if o, ok := parseOrderValue("p1", 9, "P:bob:1:5:1:0:0:1700000001000:1700000001000"); !ok || o.State != StatePaid || o.PaidMs != 1700000001000 || o.ClosedMs != o.PaidMs {
		t.Fatalf("parse settled = %+v %v", o, ok)
	}
	for _, bad := range []string{"", "s", "x:alice:1:1:1:1:0", "s:", "s:a{b:1:1:1:1:0", "s:alice:1:1:1:1:0:1:1:extra"} {
		if o, ok := parseOrderValue("p1", 9, bad); ok {
			t.Errorf("parse(%q) = %+v, want not ok", bad, o)
		}
	}
}
