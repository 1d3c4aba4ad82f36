package stock

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// Redis went back in time to before orders were cancelled or expired (the
// ledger settled them since): its buyer counts still hold their units. The
// rebuild sets every count to what the ledger and the outbox say — lowered
// as well as raised, a count of 0 removed — for the users Rebuild.Buyers
// names and every user of a settled order (across script chunks), with the
// deduction's TTL. A shopper whose only order expired buys again; one who
// holds a paid order, or a purchase still in the outbox, is at her count.
//
// In both buyer layouts: per-key counts, and the buyer hashes, which the
// rebuild clears and writes again.
func TestRebuildSetsBuyersExactly(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		for _, l := range buyerLayouts {
			t.Run(kind+"/"+l.name, func(t *testing.T) {
				var s *Store
				if kind == "cluster" {
					s, _ = openCluster(t, Options{BuyerKeys: l.perKeys})
				} else {
					s, _ = openReal(t, Options{BuyerKeys: l.perKeys})
				}
				testRebuildSetsBuyers(t, s, l.perKeys)
			})
		}
	}
}

func testRebuildSetsBuyers(t *testing.T, s *Store, perKeys bool) {
	ctx := context.Background()
	const p, limit = "by", 3
	warm(t, s, p, 2000, limit)
	now := time.Now().UnixMilli()
	var settled []OrderInfo
	settle := func(a Attempt, state string) {
		info := OrderInfo{Order: a.Order, State: state, ClosedMs: now}
		if state == StatePaid {
			info.PaidMs = now
		}
		settled = append(settled, info)
	}
	// The old server's view: every one of these still holds its units.
	settle(stored(t, s, p, "expired", 1, time.Hour), StateExpired)
	settle(stored(t, s, p, "cancelled", 2, 0), StateReleased)
	settle(stored(t, s, p, "paid", 1, time.Hour), StatePaid)
	// mix: one order cancelled since, one still in the outbox (deducted,
	// not stored): she holds 1.
	settle(stored(t, s, p, "mix", 2, 0), StateReleased)
	if out := mustDeduct(t, s, attempt(p, "mix", 1, limit)); out.Code != OK {
		t.Fatalf("deduct mix: %v", out.Code)
	}
	// zero: stored unpaid, its release still in the outbox: named with 0.
	stored(t, s, p, "zero", 1, time.Hour)
	// kept: the ledger agrees with Redis.
	stored(t, s, p, "kept", 1, time.Hour)
	// lost: her count is gone from Redis, the ledger has it.
	stored(t, s, p, "lost", 2, 0)
	forgetBuyer(t, s, p, "lost")
	// More settled shoppers than one script call writes.
	for i := range rebuildChunk + 10 {
		settle(stored(t, s, p, "s"+strconv.Itoa(i), 1, 0), StateReleased)
	}
	_, keptTTL := buyerStored(t, s, p, "kept")

	fence := fenceNow(t, s, p)
	info := saleInfo(t, s, p)
	buyers := map[string]int64{"paid": 1, "mix": 1, "zero": 0, "kept": 1, "lost": 2}
	var held, released int64
	for _, n := range buyers {
		held += n
	}
	for _, o := range settled {
		if o.State != StatePaid {
			released += int64(o.Qty)
		}
	}
	pager := func(_ context.Context, after int64) ([]OrderInfo, error) {
		var out []OrderInfo
		for _, o := range settled {
			if o.ID > after && len(out) < 200 {
				out = append(out, o)
			}
		}
		return out, nil
	}
	_, reopened, err := s.Rebuild(ctx, Rebuild{
		SaleStock: SaleStock{ProductID: p, Stock: 2000 - held, Initial: 2000, Released: released,
			Paid: 1, Expired: 1, Limit: limit, Price: 1999, EndMs: info.EndMs},
		Fence: fence, Buyers: buyers, Settled: pager,
	})
	if err != nil || !reopened {
		t.Fatalf("Rebuild = %v, %v", reopened, err)
	}

	want := map[string]int64{"expired": 0, "cancelled": 0, "paid": 1, "mix": 1, "zero": 0, "kept": 1, "lost": 2,
		"s0": 0, "s" + strconv.Itoa(rebuildChunk+9): 0}
	for u, n := range want {
		if got, err := s.Bought(ctx, p, u); err != nil || got != n {
			t.Errorf("%s bought %d (%v), want %d", u, got, err, n)
		}
		if exists, _ := buyerStored(t, s, p, u); exists != (n > 0) {
			t.Errorf("%s's count stored = %v with a count of %d", u, exists, n)
		}
	}
	for i := range rebuildChunk + 10 {
		if got, _ := s.Bought(ctx, p, "s"+strconv.Itoa(i)); got != 0 {
			t.Fatalf("s%d bought %d after the rebuild, want 0", i, got)
		}
	}
	// A count written by the rebuild lives as the deduction's does: until
	// the sale's end + the buyer grace. One that was right is left alone.
	grace := s.opts.BuyerGrace
	for _, u := range []string{"mix", "lost"} {
		_, ttl := buyerStored(t, s, p, u)
		// d is on this process's clock, the PTTL on Redis': a second of slack
		// above for the two clocks' rounding.
		if d := info.EndMs + grace.Milliseconds() - time.Now().UnixMilli(); ttl > d+time.Second.Milliseconds() || ttl < d-time.Minute.Milliseconds() {
			t.Errorf("%s's PTTL %d, want about %d", u, ttl, d)
		}
	}
	// (Per-key only: the hashes are written again whole.)
	if _, ttl := buyerStored(t, s, p, "kept"); perKeys && (ttl > keptTTL || ttl < keptTTL-time.Minute.Milliseconds()) {
		t.Errorf("kept's PTTL %d, was %d", ttl, keptTTL)
	}
	if k, h := layoutKeys(t, s, p); perKeys && h != 0 || !perKeys && k != 0 {
		t.Errorf("%d per-key keys and %d hashes after the rebuild", k, h)
	}

	// The limit follows: whoever holds nothing buys her whole limit again.
	for u, code := range map[string]Code{"expired": OK, "cancelled": OK, "zero": OK, "s0": OK} {
		if out := mustDeduct(t, s, attempt(p, u, limit, limit)); out.Code != code {
			t.Errorf("%s buying %d: %v, want %v", u, limit, out.Code, code)
		}
	}
	for u, held := range map[string]int{"paid": 1, "mix": 1, "kept": 1, "lost": 2} {
		if out := mustDeduct(t, s, attempt(p, u, limit-held+1, limit)); out.Code != LimitReached {
			t.Errorf("%s (holding %d) buying %d: %v", u, held, limit-held+1, out.Code)
		}
		if out := mustDeduct(t, s, attempt(p, u, limit-held, limit)); out.Code != OK {
			t.Errorf("%s (holding %d) buying %d: %v", u, held, limit-held, out.Code)
		}
	}
}

// A buyer count the rebuild is given below 0, or for an invalid user, is
// refused before anything is written.
func TestRebuildRefusesBadBuyers(t *testing.T) {
	ctx := context.Background()
	s, _ := openReal(t, Options{})
	warm(t, s, "bb", 10, 3)
	mustDeduct(t, s, attempt("bb", "u", 2, 3))
	fence := fenceNow(t, s, "bb")
	for _, b := range []map[string]int64{{"u": -1}, {"bad user!": 1}} {
		_, reopened, err := s.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "bb", Stock: 10, Initial: 10, Limit: 3}, Fence: fence, Buyers: b})
		if err == nil || reopened {
			t.Fatalf("Rebuild with buyers %v = %v, %v", b, reopened, err)
		}
	}
	if n, _ := s.Bought(ctx, "bb", "u"); n != 2 {
		t.Errorf("u's count changed by a refused rebuild: %d", n)
	}
	if f := saleInfo(t, s, "bb").Fence; f != fence {
		t.Errorf("fence %q after the refused rebuilds, want %q", f, fence)
	}
}
