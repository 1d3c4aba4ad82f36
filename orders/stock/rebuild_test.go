package stock

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/orders/order"
)

func TestLostKind(t *testing.T) {
	for key, want := range map[string]string{
		"sk:{p1}:stock":      "stock",
		"sk:{p1}:u:alice":    "buyer",
		"sk:{p1}:u:":         "buyer",
		"sk:{p1}:meta":       "",
		"sk:{p1}:o:12":       "",
		"sk:{p1}:t:ab":       "",
		"sk:{p1}:outbox":     "",
		"sk:{u:x}:meta":      "",
		"sk:catalog":         "",
		"sk:{p1}:stockpile":  "",
		"sk:{broken:stock":   "",
		"other:{p1}:stock":   "",
		"sk:{p:u}:u:u:stock": "buyer",
	} {
		if got := lostKind(key); got != want {
			t.Errorf("lostKind(%q) = %q, want %q", key, got, want)
		}
	}
}

// A real Redis restarted empty: Rebuild writes buyers, then the stock key
// and meta; purchases see both.
func TestRebuildAfterRestart(t *testing.T) {
	ctx := context.Background()
	s, srv := openReal(t, Options{})
	warm(t, s, "rb", 10, 3)
	mustDeduct(t, s, attempt("rb", "alice", 2, 3))
	mustDeduct(t, s, attempt("rb", "bob", 1, 3))
	end := time.Now().Add(time.Hour).UnixMilli()

	srv.Restart()
	s, err := Open(ctx, srv.Addr(), testOptions(Options{Timeout: testBudget}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if _, ok, err := s.Meta(ctx, "rb"); ok || err != nil {
		t.Fatalf("meta after the loss: %v %v", ok, err)
	}
	sale := SaleStock{ProductID: "rb", Stock: 10, Limit: 3, Price: 1999, EndMs: end}
	if live, err := s.Reschedule(ctx, sale); live || err != nil {
		t.Fatalf("Reschedule of a lost sale = %v, %v", live, err)
	}
	if out := mustDeduct(t, s, attempt("rb", "carol", 1, 3)); out.Code != NotReady {
		t.Fatalf("Reschedule opened the sale: %v", out.Code)
	}
	if orders, err := s.SurvivingOrders(ctx, "rb"); orders != nil || err != nil {
		t.Fatalf("SurvivingOrders on a real Redis = %v, %v", orders, err)
	}

	fence := fenceNow(t, s, "rb")
	if out := mustDeduct(t, s, attempt("rb", "carol", 1, 3)); out.Code != Recovering {
		t.Fatalf("a fenced sale with no stock key answers %v", out.Code)
	}
	sale.Stock, sale.Initial = 7, 10
	sale.Released = 1
	res, reopened, err := s.Rebuild(ctx, Rebuild{SaleStock: sale, Fence: fence, Buyers: map[string]int64{"alice": 2, "bob": 1, "zed": 0}})
	if err != nil || !reopened || res.Before != -1 || res.After != 7 {
		t.Fatalf("Rebuild = %+v, %v, %v", res, reopened, err)
	}
	if r := remaining(t, s, "rb"); r != 7 {
		t.Fatalf("remaining %d", r)
	}
	info, _, _ := s.SaleInfo(ctx, "rb")
	if info.Initial != 10 || info.Restocked != 0 || info.Released != 1 || info.Limit != 3 || info.EndMs != end {
		t.Fatalf("meta %+v", info)
	}
	for u, want := range map[string]int64{"alice": 2, "bob": 1, "zed": 0} {
		if n, _ := s.Bought(ctx, "rb", u); n != want {
			t.Errorf("%s bought %d, want %d", u, n, want)
		}
	}
	// The buyer key's TTL is the deduction's: the sale's end + grace.
	if _, ttl := buyerStored(t, s, "rb", "alice"); ttl < (7*24*time.Hour).Milliseconds() || ttl > (7*24*time.Hour+time.Hour).Milliseconds() {
		t.Errorf("alice's PTTL %d", ttl)
	}
	if out := mustDeduct(t, s, attempt("rb", "alice", 2, 3)); out.Code != LimitReached {
		t.Errorf("alice (2 of 3) buying 2 more: %v", out.Code)
	}
	if out := mustDeduct(t, s, attempt("rb", "alice", 1, 3)); out.Code != OK || out.Remaining != 6 {
		t.Errorf("alice buying her last unit: %+v", out)
	}

	// The sale is live: a second rebuild (another edge, late, with the
	// fence that was lifted) writes nothing, neither buyers nor stock.
	_, reopened, err = s.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "rb", Stock: 2, Initial: 10, Limit: 3}, Fence: fence,
		Buyers: map[string]int64{"carol": 3, "alice": 1}})
	if err != nil || reopened {
		t.Fatalf("Rebuild of a live sale = %v, %v", reopened, err)
	}
	if n, _ := s.Bought(ctx, "rb", "carol"); n != 0 {
		t.Errorf("carol's count written into a live sale: %d", n)
	}
	if n, _ := s.Bought(ctx, "rb", "alice"); n != 3 {
		t.Errorf("alice's count changed in a live sale: %d", n)
	}
	if r := remaining(t, s, "rb"); r != 6 {
		t.Errorf("remaining %d", r)
	}
	if live, err := s.Reschedule(ctx, SaleStock{ProductID: "rb", Limit: 4, Price: 5, EndMs: end}); !live || err != nil {
		t.Fatalf("Reschedule of a live sale = %v, %v", live, err)
	}
	if info, _, _ := s.SaleInfo(ctx, "rb"); info.Limit != 4 || info.Price != 5 || info.Initial != 10 {
		t.Fatalf("meta after reschedule %+v", info)
	}
}

// Only the stock key is gone (evicted, or the embedded server after a
// crash): surviving order hashes take the ledger's state, and surviving
// buyer counts take the ledger's, lower or higher.
func TestRebuildWithSurvivors(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]*Store{"real": func() *Store { s, _ := openReal(t, Options{}); return s }(), "embedded": openEmbedded(t, Options{})} {
		t.Run(name, func(t *testing.T) {
			warm(t, s, "sv", 10, 5)
			a := attempt("sv", "u", 2, 5)
			b := attempt("sv", "v", 1, 5)
			mustDeduct(t, s, a)
			mustDeduct(t, s, b)
			c := s.c
			if err := c.Do(ctx, c.B().Del().Key(StockKey("sv")).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if meta, ok, err := s.Meta(ctx, "sv"); !ok || err != nil || meta.Initial != 10 || meta.Limit != 5 {
				t.Fatalf("meta %+v %v %v", meta, ok, err)
			}
			outbox, err := s.OutboxOrders(ctx, "sv")
			if err != nil || len(outbox) != 2 || !outboxHas(outbox[0], a.ID, "u", 2) || !outboxHas(outbox[1], b.ID, "v", 1) {
				t.Fatalf("outbox %+v %v", outbox, err)
			}
			if name == "embedded" {
				got, err := s.SurvivingOrders(ctx, "sv")
				if err != nil || len(got) != 2 || got[a.ID] != StatePending {
					t.Fatalf("surviving orders %v %v", got, err)
				}
			}
			// a was released after all (the ledger says so); u holds 1 by
			// the ledger but 2 survived: lowered to 1.
			fence := fenceNow(t, s, "sv")
			// Fenced: a cancel waits for the rebuild.
			if _, err := s.Release(ctx, "sv", a.ID); !errors.Is(err, ErrRecovering) {
				t.Errorf("release while fenced = %v", err)
			}
			_, reopened, err := s.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "sv", Stock: 9, Initial: 10, Released: 2, Limit: 5}, Fence: fence,
				Buyers: map[string]int64{"u": 1, "v": 1, "w": 4}, Orders: []OrderInfo{{Order: order.Order{ID: a.ID, ProductID: "sv", UserID: a.UserID, Qty: a.Qty, CreatedMs: a.CreatedMs}, State: StateReleased}}})
			if err != nil || !reopened {
				t.Fatalf("Rebuild = %v, %v", reopened, err)
			}
			if o, _, _ := s.OrderState(ctx, "sv", a.ID); o.State != StateReleased {
				t.Errorf("order a is %q", o.State)
			}
			if _, ok, _ := s.OrderState(ctx, "sv", 999); ok {
				t.Error("a missing order hash was created")
			}
			// Released already: a cancel cannot return its units twice.
			if ok, err := s.Release(ctx, "sv", a.ID); ok || err != nil {
				t.Errorf("release after rebuild = %v, %v", ok, err)
			}
			for u, want := range map[string]int64{"u": 1, "v": 1, "w": 4} {
				if n, _ := s.Bought(ctx, "sv", u); n != want {
					t.Errorf("%s bought %d, want %d", u, n, want)
				}
			}
			if r := remaining(t, s, "sv"); r != 9 {
				t.Errorf("remaining %d", r)
			}
		})
	}
}

func readSnapshot(t *testing.T, dir string) snapshot {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, snapshotFile))
	if err != nil {
		t.Fatal(err)
	}
	var snap snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	return snap
}

func copySnapshot(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(from, snapshotFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, snapshotFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// kill -9 of the embedded default: the next Open finds the last periodic
// save. Its stock and buyer keys are dropped (they are stale), the rest is
// kept for the ledger rebuild.
func TestEmbeddedCrashDropsStockAndBuyers(t *testing.T) {
	ctx := context.Background()
	dir, crashed := t.TempDir(), t.TempDir()
	s := openEmbedded(t, Options{DataDir: dir, SaveEvery: 20 * time.Millisecond})
	if snap := readSnapshot(t, dir); snap.Clean {
		t.Fatal("the file says clean while the store is open")
	}
	warm(t, s, "kc", 10, 3)
	a := attempt("kc", "alice", 2, 3)
	mustDeduct(t, s, a)
	c := s.c
	c.Do(ctx, c.B().Hset().Key("sk:catalog").FieldValue().FieldValue("kc", `{"x":1}`).Build())

	// Wait for a periodic save that has alice's purchase, and keep it:
	// that is the file a crash now would leave.
	deadline := time.Now().Add(5 * time.Second)
	for {
		snap := readSnapshot(t, dir)
		has := false
		for _, k := range snap.Keys {
			has = has || k.Key == BuyerShardKey("kc", BuyerShard("alice"))
		}
		if has && !snap.Clean {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no periodic save")
		}
		time.Sleep(10 * time.Millisecond)
	}
	copySnapshot(t, dir, crashed)
	// Sold after the last save: forgotten by the crash.
	mustDeduct(t, s, attempt("kc", "alice", 1, 3))
	mustDeduct(t, s, attempt("kc", "bob", 3, 3))

	s2 := openEmbedded(t, Options{DataDir: crashed, SaveEvery: -1})
	if s2.LostOnOpen() != 1 {
		t.Fatalf("LostOnOpen %d", s2.LostOnOpen())
	}
	if _, ok, _ := s2.Remaining(ctx, "kc"); ok {
		t.Fatal("the stale stock key was loaded")
	}
	if out := mustDeduct(t, s2, attempt("kc", "carol", 1, 3)); out.Code != NotReady {
		t.Fatalf("a crashed sale is open before its rebuild: %v", out.Code)
	}
	if n, _ := s2.Bought(ctx, "kc", "alice"); n != 0 {
		t.Errorf("stale buyer count loaded: %d", n)
	}
	if meta, ok, _ := s2.Meta(ctx, "kc"); !ok || meta.Initial != 10 || meta.Limit != 3 {
		t.Errorf("meta %+v %v", meta, ok)
	}
	if v, _ := s2.c.Do(ctx, c.B().Hget().Key("sk:catalog").Field("kc").Build()).ToString(); v != `{"x":1}` {
		t.Errorf("catalog %q", v)
	}
	if o, ok, _ := s2.OrderState(ctx, "kc", a.ID); !ok || o.State != StatePending {
		t.Errorf("order hash %+v %v", o, ok)
	}
	if ob, _ := s2.OutboxOrders(ctx, "kc"); len(ob) != 1 || ob[0].ID != a.ID {
		t.Errorf("outbox %+v", ob)
	}
	replay := attempt("kc", "dave", 1, 3)
	replay.TokenNonceHex = a.TokenNonceHex
	_, reopened, err := s2.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "kc", Stock: 8, Initial: 10, Limit: 3},
		Fence: fenceNow(t, s2, "kc"), Buyers: map[string]int64{"alice": 2}})
	if err != nil || !reopened {
		t.Fatal(reopened, err)
	}
	if out := mustDeduct(t, s2, replay); out.Code != BadToken {
		t.Errorf("used token forgotten: %v", out.Code)
	}
	// The file is "not clean" from Open on, whatever it said before.
	if snap := readSnapshot(t, crashed); snap.Clean {
		t.Error("file still clean after Open")
	}

	// A clean Close keeps the stock: the next Open trusts it.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if snap := readSnapshot(t, crashed); !snap.Clean {
		t.Fatal("Close did not write a clean snapshot")
	}
	s3 := openEmbedded(t, Options{DataDir: crashed, SaveEvery: -1})
	if s3.LostOnOpen() != 0 || remaining(t, s3, "kc") != 8 {
		t.Fatalf("clean restart: lost %d", s3.LostOnOpen())
	}
	if n, _ := s3.Bought(ctx, "kc", "alice"); n != 2 {
		t.Errorf("alice %d after a clean restart", n)
	}
	if snap := readSnapshot(t, crashed); snap.Clean {
		t.Error("file still clean after the second Open")
	}
}

func outboxHas(o order.Order, id int64, user string, qty int) bool {
	return o.ID == id && o.UserID == user && o.Qty == qty
}

// fenceNow fences the sale as an edge that found it lost would.
func fenceNow(t *testing.T, s *Store, p string) string {
	t.Helper()
	f, err := s.Fence(context.Background(), p, FenceID(time.Now().UnixMilli(), 1, "lost"))
	if err != nil || f == "" {
		t.Fatalf("Fence(%s) = %q, %v", p, f, err)
	}
	return f
}

// A restart from a snapshot, or a promoted replica, leaves the meta naming
// a run id that is not the server's: the next deduction fences the sale and
// writes nothing, every later one answers Recovering, and the rebuild only
// ever lowers the stock.
func TestFenceOnAnotherServer(t *testing.T) {
	ctx := context.Background()
	s, _ := openReal(t, Options{})
	warm(t, s, "fx", 10, 2)
	mustDeduct(t, s, attempt("fx", "alice", 1, 2))
	// What a restart from an older snapshot looks like to the script: the
	// meta names the server it was verified on, not this one.
	c := s.c
	if err := c.Do(ctx, c.B().Hset().Key(MetaKey("fx")).FieldValue().FieldValue("runid", "0123456789abcdef").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	a := attempt("fx", "bob", 1, 2)
	if out := mustDeduct(t, s, a); out.Code != Recovering || out.Remaining >= 0 {
		t.Fatalf("deduction on an unverified server = %+v", out)
	}
	if _, ok, _ := s.OrderState(ctx, "fx", a.ID); ok {
		t.Fatal("a fenced deduction wrote its order")
	}
	if n, _ := s.Bought(ctx, "fx", "bob"); n != 0 {
		t.Fatalf("a fenced deduction counted bob: %d", n)
	}
	info, ok, err := s.SaleInfo(ctx, "fx")
	if err != nil || !ok || info.Fence == "" || info.Remaining != 9 {
		t.Fatalf("SaleInfo of a fenced sale = %+v %v %v", info, ok, err)
	}
	// A fence set by an edge finding the key missing does not replace it.
	if f, _ := s.Fence(ctx, "fx", FenceID(1, 2, "lost")); f != info.Fence {
		t.Fatalf("second fence %q replaced %q", f, info.Fence)
	}
	if _, err := s.Restock(ctx, "fx", 5); !errors.Is(err, ErrNotWarmed) {
		t.Errorf("restock while fenced = %v", err)
	}
	// The ledger says more is left than Redis holds: the stock stays.
	res, reopened, err := s.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "fx", Stock: 10, Initial: 10, Limit: 2}, Fence: info.Fence,
		TokensFromMs: time.Now().UnixMilli() + 61_000})
	if err != nil || !reopened || res.Before != 9 || res.After != 9 {
		t.Fatalf("Rebuild = %+v %v %v", res, reopened, err)
	}
	// Reopened on this server: its run id is recorded, purchases go on,
	// but not with a token minted before the rebuild.
	old := attempt("fx", "carol", 1, 2)
	if out := mustDeduct(t, s, old); out.Code != BadToken {
		t.Fatalf("a token from before the rebuild = %v", out.Code)
	}
	fresh := attempt("fx", "carol", 1, 2)
	fresh.TokenExpiresMs = time.Now().Add(time.Hour).UnixMilli()
	if out := mustDeduct(t, s, fresh); out.Code != OK || out.Remaining != 8 {
		t.Fatalf("after the rebuild = %+v", out)
	}
	// Fenced again (another loss): the ledger now says less is left.
	c.Do(ctx, c.B().Hset().Key(MetaKey("fx")).FieldValue().FieldValue("runid", "0123456789abcdef").Build())
	if out := mustDeduct(t, s, attempt("fx", "dave", 1, 2)); out.Code != Recovering {
		t.Fatalf("second loss: %v", out.Code)
	}
	info, _, _ = s.SaleInfo(ctx, "fx")
	res, reopened, err = s.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "fx", Stock: 5, Initial: 10, Limit: 2}, Fence: info.Fence,
		Buyers: map[string]int64{"erin": 2}})
	if err != nil || !reopened || res.Before != 8 || res.After != 5 || remaining(t, s, "fx") != 5 {
		t.Fatalf("Rebuild lowering = %+v %v %v", res, reopened, err)
	}
	if n, _ := s.Bought(ctx, "fx", "erin"); n != 2 {
		t.Fatalf("erin's count %d", n)
	}
	if out := mustDeduct(t, s, attempt("fx", "erin", 1, 2)); out.Code != LimitReached && out.Code != BadToken {
		t.Fatalf("erin over her limit after the rebuild: %v", out.Code)
	}
}

// Redis comes back from a snapshot taken before some deadlines fired and
// some payments arrived: its order states and due set are stale. The
// settle calls fence the sale (nothing changes); the rebuild gives every
// order the ledger's state, makes the lost hash again, puts the unpaid
// orders' deadlines back (an overdue one too) and drops the settled ones,
// so that nothing the ledger knows is paid or released twice.
func TestRebuildRestoresDeadlinesAfterAStaleSnapshot(t *testing.T) {
	ctx := context.Background()
	srv := redistest.NewPersistent(t)
	s, err := Open(ctx, srv.Addr(), testOptions(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	warm(t, s, "sn", 10, 5)
	paid := stored(t, s, "sn", "paid", 1, time.Hour)         // paid after the snapshot
	exp := stored(t, s, "sn", "exp", 1, 50*time.Millisecond) // expired after it
	open := stored(t, s, "sn", "open", 1, time.Hour)         // still unpaid
	over := stored(t, s, "sn", "over", 1, 50*time.Millisecond)
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pay(ctx, "sn", paid.ID, "", 0); err != nil {
		t.Fatal(err)
	}
	late := stored(t, s, "sn", "late", 1, time.Hour) // made after the snapshot: its hash is lost
	var expiredNow []Settlement
	await.Until(t, 5*time.Second, "the first deadline swept", func() bool {
		got, err := s.ExpireDue(ctx, "sn", 1)
		expiredNow = append(expiredNow, got...)
		return err == nil && len(expiredNow) == 1
	})
	if expiredNow[0].Info.ID != exp.ID && expiredNow[0].Info.ID != over.ID {
		t.Fatalf("expired %+v", expiredNow[0])
	}
	// Which of the two 50 ms orders the sweep took first is the ledger's
	// "expired"; the other one is overdue and unpaid.
	if expiredNow[0].Info.ID == over.ID {
		exp, over = over, exp
	}

	srv.Stop()
	srv.Start()
	s.Close()
	if s, err = Open(ctx, srv.Addr(), testOptions(Options{})); err != nil {
		t.Fatal(err)
	}
	// The stale server still says paid is unpaid, exp due: a settle call
	// must not believe it.
	if _, err := s.Pay(ctx, "sn", paid.ID, "", 0); !errors.Is(err, ErrRecovering) {
		t.Fatalf("Pay on the stale server = %v", err)
	}
	if o, _, _ := s.OrderState(ctx, "sn", paid.ID); o.State != StateSuccess {
		t.Fatalf("stale paid order %s (the snapshot is not stale?)", o.State)
	}
	info := saleInfo(t, s, "sn")
	now := time.Now().UnixMilli()
	ledger := func(a Attempt, state string, paidMs, closedMs int64) OrderInfo {
		return OrderInfo{Order: a.Order, State: state, PaidMs: paidMs, ClosedMs: closedMs}
	}
	r := Rebuild{
		SaleStock: SaleStock{ProductID: "sn", Stock: 10 - 4, Initial: 10, Released: 1, Paid: 1, Expired: 1, Limit: 5, Price: 1999, EndMs: info.EndMs},
		Fence:     info.Fence,
		Buyers:    map[string]int64{"paid": 1, "open": 1, "over": 1, "late": 1},
		Orders: []OrderInfo{
			ledger(paid, StatePaid, now-1, now-1), ledger(exp, StateExpired, 0, now-1),
			ledger(open, StateSuccess, 0, 0), ledger(over, StateSuccess, 0, 0), ledger(late, StateSuccess, 0, 0),
		},
	}
	res, reopened, err := s.Rebuild(ctx, r)
	if err != nil || !reopened || res.After != 6 {
		t.Fatalf("Rebuild = %+v %v %v", res, reopened, err)
	}
	want := map[int64]string{paid.ID: StatePaid, exp.ID: StateExpired, open.ID: StateSuccess, over.ID: StateSuccess, late.ID: StateSuccess}
	for id, st := range want {
		if o, ok, _ := s.OrderState(ctx, "sn", id); !ok || o.State != st || o.PayByMs == 0 {
			t.Errorf("order %d: %+v %v, want %s", id, o, ok, st)
		}
	}
	if ttl := pttl(t, s, orderHome(t, s, "sn", late.ID)); ttl <= 0 {
		t.Errorf("remade hash PTTL %d", ttl)
	}
	ds, total, _ := s.NextDeadlines(ctx, "sn", 10)
	if total != 3 {
		t.Fatalf("due after the rebuild %+v", ds)
	}
	// The first sweep releases the overdue one, and only it.
	got, err := s.ExpireDue(ctx, "sn", 10)
	if err != nil || len(got) != 1 || got[0].Info.ID != over.ID {
		t.Fatalf("ExpireDue after the rebuild = %+v, %v", got, err)
	}
	if st, err := s.Pay(ctx, "sn", paid.ID, "", 0); err != nil || st.Changed || st.Info.State != StatePaid {
		t.Fatalf("Pay of the paid order = %+v, %v", st, err)
	}
	if st, err := s.Cancel(ctx, "sn", exp.ID); err != nil || st.Changed {
		t.Fatalf("Cancel of the expired order = %+v, %v", st, err)
	}
	if info := saleInfo(t, s, "sn"); info.Remaining != 7 || info.Paid != 1 || info.Expired != 2 || info.Released != 2 {
		t.Fatalf("after the sweep %+v", info)
	}
}

// The ledger may count overdue unpaid orders as held beyond what is left:
// the rebuild writes the stock below 0, the sale answers sold out, and the
// first sweep brings it back.
func TestRebuildAcceptsStockBelowZero(t *testing.T) {
	ctx := context.Background()
	s, _ := openReal(t, Options{})
	warm(t, s, "neg", 2, 5)
	a := stored(t, s, "neg", "u", 2, time.Millisecond)
	fence := fenceNow(t, s, "neg")
	info := saleInfo(t, s, "neg")
	o, _, _ := s.OrderState(ctx, "neg", a.ID)
	_, reopened, err := s.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "neg", Stock: -1, Initial: 2, Restocked: 0, Limit: 5, EndMs: info.EndMs},
		Fence: fence, Buyers: map[string]int64{"u": 2}, Orders: []OrderInfo{o}})
	if err != nil || !reopened {
		t.Fatalf("Rebuild = %v, %v", reopened, err)
	}
	if out := mustDeduct(t, s, attempt("neg", "w", 1, 5)); out.Code != SoldOut || out.Remaining != -1 {
		t.Fatalf("deduct at -1: %+v", out)
	}
	if got, err := s.ExpireDue(ctx, "neg", 10); err != nil || len(got) != 1 {
		t.Fatalf("ExpireDue = %+v, %v", got, err)
	}
	if r := remaining(t, s, "neg"); r != 1 {
		t.Fatalf("remaining %d", r)
	}
}

// Redis went back in time to when many orders without a deadline (and one
// with) were unpaid; the ledger has settled them all since. Neither the due
// set nor the outbox names them: only the rebuild's settled pages do. Every
// surviving hash takes the ledger's state, across pages and script chunks; a
// hash that is gone is not made again; no cancel returns a unit after.
func TestRebuildSettledPagesCorrectStaleHashes(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			var s *Store
			if kind == "cluster" {
				s, _ = openCluster(t, Options{})
			} else {
				s, _ = openReal(t, Options{})
			}
			testRebuildSettledPages(t, s)
		})
	}
}

func testRebuildSettledPages(t *testing.T, s *Store) {
	ctx := context.Background()
	const p, n = "sp", 2*rebuildChunk + 100
	warm(t, s, p, n+100, 5)
	var settled []OrderInfo
	now := time.Now().UnixMilli()
	paid := 0
	for i := range n {
		a := stored(t, s, p, "u"+strconv.Itoa(i), 1, 0)
		info := OrderInfo{Order: a.Order, State: StateReleased, ClosedMs: now}
		if i%2 == 1 {
			info.State, info.PaidMs, info.ClosedMs = StatePaid, now, now
			paid++
		}
		settled = append(settled, info)
	}
	dl := stored(t, s, p, "dl", 1, time.Hour)
	settled = append(settled, OrderInfo{Order: dl.Order, State: StateExpired, ClosedMs: now})
	gone := attempt(p, "gone", 1, 5) // settled, its hash gone with its TTL
	settled = append(settled, OrderInfo{Order: gone.Order, State: StatePaid, PaidMs: now, ClosedMs: now})
	if _, total, _ := s.NextDeadlines(ctx, p, 1); total != 1 {
		t.Fatalf("due before the rebuild: %d", total)
	}

	fence := fenceNow(t, s, p)
	info := saleInfo(t, s, p)
	const page = 250
	var afters []int64
	pager := func(_ context.Context, after int64) ([]OrderInfo, error) {
		afters = append(afters, after)
		var out []OrderInfo
		for _, o := range settled {
			if o.ID > after && len(out) < page {
				out = append(out, o)
			}
		}
		return out, nil
	}
	buyers := map[string]int64{}
	for _, o := range settled {
		if o.State == StatePaid && o.UserID != "gone" {
			buyers[o.UserID] = 1
		}
	}
	r := Rebuild{
		SaleStock: SaleStock{ProductID: p, Stock: int64(n + 100 - paid), Initial: n + 100, Released: int64(n - paid + 1),
			Paid: int64(paid), Expired: 1, Limit: 5, Price: 1999, EndMs: info.EndMs},
		Fence: fence, Buyers: buyers, Settled: pager,
	}

	// A page the ledger fails to give, or one that is not settled, stops
	// the rebuild: the sale stays fenced.
	bad := r
	bad.Settled = func(context.Context, int64) ([]OrderInfo, error) { return nil, errors.New("ledger away") }
	if _, reopened, err := s.Rebuild(ctx, bad); err == nil || reopened {
		t.Fatalf("Rebuild with a failing ledger = %v, %v", reopened, err)
	}
	bad.Settled = func(context.Context, int64) ([]OrderInfo, error) {
		return []OrderInfo{{Order: dl.Order, State: StateSuccess}}, nil
	}
	if _, _, err := s.Rebuild(ctx, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Rebuild with an unsettled page = %v", err)
	}
	if f := saleInfo(t, s, p).Fence; f != fence {
		t.Fatalf("fence after the failed rebuilds %q, want %q", f, fence)
	}

	res, reopened, err := s.Rebuild(ctx, r)
	if err != nil || !reopened || res.After != r.Stock {
		t.Fatalf("Rebuild = %+v %v %v", res, reopened, err)
	}
	want := []int64{0}
	for k := page; k < len(settled); k += page {
		want = append(want, settled[k-1].ID)
	}
	if want = append(want, settled[len(settled)-1].ID); !slices.Equal(afters, want) {
		t.Errorf("pages asked after %v, want %v", afters, want)
	}
	for _, o := range settled[:len(settled)-1] {
		if got, ok, _ := s.OrderState(ctx, p, o.ID); !ok || got.State != o.State {
			t.Fatalf("order %d (%s): %+v %v, want %s", o.ID, o.UserID, got, ok, o.State)
		}
	}
	if got, ok, err := s.OrderState(ctx, p, gone.ID); ok || err != nil {
		t.Fatalf("a gone hash was made again: %+v %v", got, err)
	}
	if _, total, _ := s.NextDeadlines(ctx, p, 1); total != 0 {
		t.Fatalf("due after the rebuild: %d, want 0 (the expired order left it)", total)
	}
	for _, o := range settled {
		if set, err := s.Cancel(ctx, p, o.ID); set.Changed || err != nil && !errors.Is(err, ErrUnknownOrder) {
			t.Fatalf("Cancel of settled order %d (%s) = %+v, %v", o.ID, o.UserID, set, err)
		}
	}
	if got, err := s.ExpireDue(ctx, p, 10); err != nil || len(got) != 0 {
		t.Fatalf("ExpireDue = %+v, %v", got, err)
	}
	if after := saleInfo(t, s, p); after.Remaining != r.Stock || after.Released != r.Released {
		t.Fatalf("after the cancels %+v, want remaining %d released %d", after, r.Stock, r.Released)
	}
}
