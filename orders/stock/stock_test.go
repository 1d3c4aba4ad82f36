package stock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

type sold struct {
	product, user string
	qty           int
	order         int64
}

// runNoOversell hammers 3 products through the coalescing Deduct and checks
// every promise that can be observed in Redis afterwards.
func runNoOversell(t *testing.T, s *Store, tag string, minQty, maxQty, limit, goroutines, perG int) {
	const stockEach = 100
	products := []string{tag + "-a", tag + "-b", tag + "-c"}
	for _, p := range products {
		warm(t, s, p, stockEach, limit)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		oks     []sold
		codes   = map[Code]int{}
		callErr error
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			var mine []sold
			mycodes := map[Code]int{}
			for range perG {
				p := products[rng.IntN(len(products))]
				// Few users per product: the limit is really exercised,
				// including by one user's attempts in the same batch.
				u := "u" + strconv.Itoa(rng.IntN(120))
				q := minQty + rng.IntN(maxQty-minQty+1)
				a := attempt(p, u, q, limit)
				out, err := s.Deduct(context.Background(), a)
				if err != nil {
					mu.Lock()
					callErr = err
					mu.Unlock()
					return
				}
				mycodes[out.Code]++
				if out.Code == OK {
					mine = append(mine, sold{p, u, q, a.ID})
				}
			}
			mu.Lock()
			oks = append(oks, mine...)
			for c, n := range mycodes {
				codes[c] += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if callErr != nil {
		t.Fatal(callErr)
	}
	t.Logf("codes %v", codes)
	if codes[BadToken] != 0 || codes[NotReady] != 0 {
		t.Errorf("unexpected codes: %v", codes)
	}

	ctx := context.Background()
	soldQty := map[string]int64{}
	soldN := map[string]int64{}
	bought := map[string]int64{}
	for _, o := range oks {
		soldQty[o.product] += int64(o.qty)
		soldN[o.product]++
		bought[o.product+"/"+o.user] += int64(o.qty)
	}
	for _, p := range products {
		rem := remaining(t, s, p)
		if soldQty[p]+rem != stockEach {
			t.Errorf("%s: sold %d + remaining %d != %d", p, soldQty[p], rem, stockEach)
		}
		if rem < 0 || rem >= int64(minQty) {
			t.Errorf("%s: remaining %d, want sold out (< %d)", p, rem, minQty)
		}
		n, err := s.OutboxLen(ctx, p)
		if err != nil || n != soldN[p] {
			t.Errorf("%s: outbox has %d entries (%v), want %d (one per OK)", p, n, err, soldN[p])
		}
		// Every buyer and order key carries a TTL: none may live forever.
		var keys []string
		for _, pat := range []string{"u:*", "t:*", "b:*", "tk:*"} {
			keys = append(keys, scanKeys(t, s, prefix(p)+pat)...)
		}
		for _, k := range keys {
			if ttl := pttl(t, s, k); ttl <= 0 {
				t.Errorf("%s: PTTL %d", k, ttl)
			}
		}
	}
	for k, n := range bought {
		if n > int64(limit) {
			t.Errorf("%s bought %d > limit %d", k, n, limit)
		}
	}
	for _, p := range products {
		for u := range 120 {
			user := "u" + strconv.Itoa(u)
			got, err := s.Bought(ctx, p, user)
			if err != nil || got != bought[p+"/"+user] {
				t.Errorf("Bought(%s,%s) = %d, %v; want %d", p, user, got, err, bought[p+"/"+user])
			}
		}
	}
	for _, o := range oks[:min(len(oks), 50)] {
		info, ok, err := s.OrderState(ctx, o.product, o.order)
		if err != nil || !ok || info.State != StatePending || info.UserID != o.user || info.Qty != o.qty ||
			info.PriceCents != 1999 || info.Edge != 7 || info.CreatedMs <= 0 {
			t.Errorf("order %d: %+v %v %v", o.order, info, ok, err)
		}
		if ttl := pttl(t, s, OrderKey(o.product, o.order)); ttl <= 0 {
			t.Errorf("order %d PTTL %d", o.order, ttl)
		}
	}
}

func TestNoOversell(t *testing.T) {
	s, _ := openReal(t, Options{})
	for _, tc := range []struct {
		name                string
		minQty, maxQty, lim int
	}{
		{"qty1-limit1", 1, 1, 1},
		{"qty2to3-limit5", 2, 3, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runNoOversell(t, s, tc.name, tc.minQty, tc.maxQty, tc.lim, 64, 40)
		})
	}
	calls, attempts := s.Stats()
	t.Logf("%d attempts in %d script calls (%.1f per call)", attempts, calls, float64(attempts)/float64(calls))
}

func TestOutboxEntryFields(t *testing.T) {
	s, _ := openReal(t, Options{})
	warm(t, s, "ob", 5, 5)
	a := attempt("ob", "alice", 2, 5)
	a.PayByMs = a.CreatedMs + 900_000
	if out := mustDeduct(t, s, a); out.Code != OK || out.Remaining != 3 {
		t.Fatalf("outcome %+v", out)
	}
	c := s.c
	entries, err := c.Do(context.Background(), c.B().Xrange().Key(OutboxKey("ob")).Start("-").End("+").Build()).AsXRange()
	if err != nil || len(entries) != 1 {
		t.Fatalf("XRANGE: %v %v", entries, err)
	}
	want := map[string]string{
		fieldOrder: strconv.FormatInt(a.ID, 10), fieldProduct: "ob", fieldUser: "alice", fieldQty: "2",
		fieldPrice: "1999", fieldCreated: strconv.FormatInt(a.CreatedMs, 10), fieldNode: "7",
		fieldPayBy: strconv.FormatInt(a.PayByMs, 10),
	}
	if fmt.Sprint(entries[0].FieldValues) != fmt.Sprint(want) {
		t.Errorf("outbox entry %v, want %v", entries[0].FieldValues, want)
	}
	// The token's hash lives until the end of the bucket it expires in.
	end := (a.TokenExpiresMs/tokenBucketMs + 1) * tokenBucketMs
	if ok, ttl := tokenMark(t, s, a); !ok || ttl <= 50_000 || ttl > end-a.CreatedMs {
		t.Errorf("token mark %v PTTL %d, want from the token's expiry (about 60s) to the end of its bucket", ok, ttl)
	}
	// The buyer hash outlives the sale's end (1h) by BuyerGrace (7d).
	if _, ttl := buyerStored(t, s, "ob", "alice"); ttl < (7*24*time.Hour + 50*time.Minute).Milliseconds() {
		t.Errorf("buyer PTTL %d, want > 7d + sale end", ttl)
	}
}

func TestDeductCodes(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "codes", 3, 2)

	a := attempt("codes", "bob", 1, 2)
	if out := mustDeduct(t, s, a); out.Code != OK || out.Remaining != 2 {
		t.Fatalf("first: %+v", out)
	}
	replay := attempt("codes", "carol", 1, 2)
	replay.TokenNonceHex = a.TokenNonceHex
	before := remaining(t, s, "codes")

	tests := []struct {
		name string
		a    Attempt
		want Code
	}{
		{"token replay", replay, BadToken},
		{"bought+qty over limit", attempt("codes", "bob", 2, 2), LimitReached},
		{"qty over remaining", attempt("codes", "dave", 3, 5), SoldOut},
		{"not warmed", attempt("nowarm", "bob", 1, 2), NotReady},
		// The sale checks the quantity against the limit first; the script
		// still does, whatever the caller.
		{"qty over limit", attempt("codes", "erin", 2, 1), LimitReached},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := mustDeduct(t, s, tc.a)
			if out.Code != tc.want {
				t.Fatalf("code %v, want %v", out.Code, tc.want)
			}
			if tc.want == NotReady && out.Remaining != -1 {
				t.Errorf("remaining %d, want -1", out.Remaining)
			}
		})
	}
	if got := remaining(t, s, "codes"); got != before {
		t.Errorf("rejected attempts moved stock: %d -> %d", before, got)
	}
	if n, _ := s.OutboxLen(ctx, "codes"); n != 1 {
		t.Errorf("outbox len %d, want 1", n)
	}
	// A sale that was never warmed gets no keys at all.
	if keys := scanKeys(t, s, "sk:{nowarm}:*"); len(keys) != 0 {
		t.Errorf("keys written for an unwarmed sale: %v", keys)
	}
	// The failed attempts did not burn their tokens: the same token works.
	retry := attempt("codes", "dave", 1, 5)
	retry.TokenNonceHex = tests[2].a.TokenNonceHex
	if out := mustDeduct(t, s, retry); out.Code != OK {
		t.Errorf("retry with an unused token: %v", out.Code)
	}
}

func TestPrecheck(t *testing.T) {
	s, _ := openReal(t, Options{})
	ok := attempt("pc", "u", 1, 1)
	mod := func(f func(*Attempt)) Attempt { a := ok; f(&a); return a }
	tests := []struct {
		name string
		a    Attempt
		err  error
	}{
		{"empty product", mod(func(a *Attempt) { a.ProductID = "" }), ErrInvalid},
		{"brace in product", mod(func(a *Attempt) { a.ProductID = "a}b" }), ErrInvalid},
		{"empty user", mod(func(a *Attempt) { a.UserID = "" }), ErrInvalid},
		{"zero qty", mod(func(a *Attempt) { a.Qty = 0 }), ErrInvalid},
		{"zero limit", mod(func(a *Attempt) { a.Limit = 0 }), ErrInvalid},
		{"non-hex nonce", mod(func(a *Attempt) { a.TokenNonceHex = "xyz" }), ErrInvalid},
		{"no order id", mod(func(a *Attempt) { a.ID = 0 }), ErrInvalid},
		// The token's used mark would have no lifetime: the script could not
		// set it. The sale refuses expired tokens (BAD_TOKEN) before.
		{"expired token", mod(func(a *Attempt) { a.TokenExpiresMs = a.CreatedMs }), ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := s.Deduct(context.Background(), tc.a)
			if !errors.Is(err, tc.err) {
				t.Errorf("got %+v, %v; want %v", out, err, tc.err)
			}
		})
	}
	if calls, _ := s.Stats(); calls != 0 {
		t.Errorf("prechecked attempts reached Redis: %d calls", calls)
	}
}

// TestBatchSemantics runs hand-made batches through exec: attempts of one
// batch are evaluated in order, each seeing the ones before it.
func TestBatchSemantics(t *testing.T) {
	s, _ := openReal(t, Options{})
	tests := []struct {
		name  string
		stock int64
		limit int
		tries []struct {
			user string
			qty  int
		}
		want []Code
		rem  int64
	}{
		{"same user twice, limit 1", 10, 1, []struct {
			user string
			qty  int
		}{{"x", 1}, {"x", 1}, {"y", 1}}, []Code{OK, LimitReached, OK}, 8},
		{"qty counts against limit", 10, 3, []struct {
			user string
			qty  int
		}{{"x", 2}, {"x", 2}, {"x", 1}}, []Code{OK, LimitReached, OK}, 7},
		{"big qty fails, small fits after", 3, 5, []struct {
			user string
			qty  int
		}{{"x", 2}, {"y", 2}, {"z", 1}, {"w", 1}}, []Code{OK, SoldOut, OK, SoldOut}, 0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := "batch" + strconv.Itoa(i)
			warm(t, s, p, tc.stock, tc.limit)
			b := batchPool.Get().(*batch)
			var calls []*call
			for _, tr := range tc.tries {
				a := attempt(p, tr.user, tr.qty, tc.limit)
				c := newCall(context.Background(), &a, time.Second)
				calls = append(calls, c)
				b.calls = append(b.calls, c)
			}
			before, _ := s.Stats()
			s.exec(s.product(p), b)
			if after, _ := s.Stats(); after != before+1 {
				t.Errorf("%d script calls for one batch", after-before)
			}
			for j, c := range calls {
				if c.err != nil || c.out.Code != tc.want[j] || c.out.Remaining != tc.rem {
					t.Errorf("attempt %d: %+v %v; want %v remaining %d", j, c.out, c.err, tc.want[j], tc.rem)
				}
			}
			if got := remaining(t, s, p); got != tc.rem {
				t.Errorf("remaining %d, want %d", got, tc.rem)
			}
		})
	}
}

func TestWarmNeverRaisesStock(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "w", 10, 5)
	for range 3 {
		if out := mustDeduct(t, s, attempt("w", "u"+strconv.FormatInt(orderSeq.Load(), 10), 1, 5)); out.Code != OK {
			t.Fatal(out)
		}
	}
	created, err := s.Warm(ctx, SaleStock{ProductID: "w", Stock: 50, Limit: 2, Price: 500, EndMs: 123})
	if err != nil || created {
		t.Fatalf("second Warm = %v, %v; want false", created, err)
	}
	info, ok, err := s.SaleInfo(ctx, "w")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if info.Remaining != 7 || info.Initial != 10 {
		t.Errorf("after re-warm: remaining %d initial %d, want 7 and 10", info.Remaining, info.Initial)
	}
	if info.Limit != 2 || info.Price != 500 || info.EndMs != 123 {
		t.Errorf("schedule not updated: %+v", info)
	}
	// Warm to a lower number does not lower it either: only scripts move stock.
	if created, _ := s.Warm(ctx, SaleStock{ProductID: "w", Stock: 1, Limit: 2}); created || remaining(t, s, "w") != 7 {
		t.Error("warm changed a live sale's stock")
	}
	if _, err := s.Warm(ctx, SaleStock{ProductID: "w", Stock: -1, Limit: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative stock: %v", err)
	}
}

func TestRestock(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	if _, err := s.Restock(ctx, "rs", 5); !errors.Is(err, ErrNotWarmed) {
		t.Fatalf("restock of an unwarmed sale: %v", err)
	}
	if _, ok, _ := s.Remaining(ctx, "rs"); ok {
		t.Fatal("restock created a stock key")
	}
	warm(t, s, "rs", 2, 5)
	mustDeduct(t, s, attempt("rs", "u", 2, 5))
	if out := mustDeduct(t, s, attempt("rs", "v", 1, 5)); out.Code != SoldOut {
		t.Fatalf("want sold out, got %v", out)
	}
	if n, err := s.Restock(ctx, "rs", 5); err != nil || n != 5 {
		t.Fatalf("Restock = %d, %v", n, err)
	}
	if out := mustDeduct(t, s, attempt("rs", "v", 1, 5)); out.Code != OK || out.Remaining != 4 {
		t.Fatalf("after restock: %+v", out)
	}
	info, _, _ := s.SaleInfo(ctx, "rs")
	if info.Restocked != 5 || info.Initial != 2 {
		t.Errorf("meta %+v", info)
	}
	for _, add := range []int64{0, -3} {
		if _, err := s.Restock(ctx, "rs", add); !errors.Is(err, ErrInvalid) {
			t.Errorf("Restock(%d): %v", add, err)
		}
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "rel", 10, 5)
	a := attempt("rel", "erin", 2, 5)
	b := attempt("rel", "erin", 3, 5)
	mustDeduct(t, s, a)
	mustDeduct(t, s, b)
	if n, _ := s.MarkSuccess(ctx, "rel", b.ID); n != 1 {
		t.Fatalf("MarkSuccess changed %d", n)
	}
	if got := remaining(t, s, "rel"); got != 5 {
		t.Fatalf("remaining %d", got)
	}
	steps := []struct {
		name      string
		order     int64
		released  bool
		remaining int64
		bought    int64
	}{
		{"pending order", a.ID, true, 7, 3},
		{"again", a.ID, false, 7, 3},
		{"success order", b.ID, true, 10, 0},
		{"again", b.ID, false, 10, 0},
		{"unknown order", 1 << 60, false, 10, 0},
	}
	for _, st := range steps {
		got, err := s.Release(ctx, "rel", st.order)
		if err != nil || got != st.released {
			t.Fatalf("%s: Release = %v, %v", st.name, got, err)
		}
		if r := remaining(t, s, "rel"); r != st.remaining {
			t.Errorf("%s: remaining %d, want %d", st.name, r, st.remaining)
		}
		if n, _ := s.Bought(ctx, "rel", "erin"); n != st.bought {
			t.Errorf("%s: bought %d, want %d", st.name, n, st.bought)
		}
	}
	for _, id := range []int64{a.ID, b.ID} {
		info, _, _ := s.OrderState(ctx, "rel", id)
		if info.State != StateReleased {
			t.Errorf("order %d state %s", id, info.State)
		}
	}
	if n, _ := s.MarkSuccess(ctx, "rel", a.ID); n != 0 {
		t.Error("MarkSuccess resurrected a released order")
	}
	meta, _, _ := s.SaleInfo(ctx, "rel")
	if meta.Released != 5 {
		t.Errorf("meta released %d, want 5", meta.Released)
	}
	// The released allowance can be bought again, up to the limit.
	if out := mustDeduct(t, s, attempt("rel", "erin", 5, 5)); out.Code != OK {
		t.Errorf("buy after release: %v", out)
	}
}

func TestReleaseAfterMemoryLossDoesNotCreateStock(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "rl", 10, 5)
	a := attempt("rl", "u", 2, 5)
	mustDeduct(t, s, a)
	// Only the stock key is lost (e.g. evicted, or a partial rebuild).
	c := s.c
	c.Do(ctx, c.B().Del().Key(StockKey("rl")).Build())
	if _, err := s.Release(ctx, "rl", a.ID); !errors.Is(err, ErrNotWarmed) {
		t.Fatalf("Release: %v", err)
	}
	if _, ok, _ := s.Remaining(ctx, "rl"); ok {
		t.Fatal("release recreated the stock key")
	}
	if info, _, _ := s.OrderState(ctx, "rl", a.ID); info.State != StatePending {
		t.Errorf("state %s, want still pending", info.State)
	}
}

func TestMarkSuccess(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "ms", 10, 5)
	a, b := attempt("ms", "u", 1, 5), attempt("ms", "v", 1, 5)
	mustDeduct(t, s, a)
	mustDeduct(t, s, b)
	for _, want := range []int{2, 0} {
		if n, err := s.MarkSuccess(ctx, "ms", a.ID, b.ID, 1<<61); err != nil || n != want {
			t.Fatalf("MarkSuccess = %d, %v; want %d", n, err, want)
		}
	}
	info, ok, _ := s.OrderState(ctx, "ms", a.ID)
	if !ok || info.State != StateSuccess {
		t.Errorf("%+v", info)
	}
	if _, ok, _ := s.OrderState(ctx, "ms", 1<<61); ok {
		t.Error("unknown order reported")
	}
}

// TestRedisGone: a dead or hung Redis must produce an error within the
// budget, never a hang; a restarted, empty Redis closes the sale.
func TestRedisGone(t *testing.T) {
	const budget = 100 * time.Millisecond
	s, srv := openReal(t, Options{Timeout: budget})
	warm(t, s, "gone", 1000, 1000)
	mustDeduct(t, s, attempt("gone", "u", 1, 1000))

	check := func(name string) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := s.Deduct(context.Background(), attempt("gone", "u"+strconv.Itoa(i), 1, 1000))
				// The slack absorbs scheduling on a loaded 2-core CI box; a
				// hang would be rueidis' own timeouts, 10 s and more.
				if el := time.Since(start); el > budget+time.Second {
					t.Errorf("%s: answered after %v (budget %v)", name, el, budget)
				}
				if !errors.Is(err, ErrUnknown) && !errors.Is(err, ErrNotSent) {
					t.Errorf("%s: err %v, want unknown outcome or not sent", name, err)
				}
			}()
		}
		wg.Wait()
	}

	srv.Pause()
	check("paused")
	srv.Resume()
	// Not mustDeduct: the 100ms budget is tight on a loaded machine.
	if out := deductUntil(t, s, attempt("gone", "u", 1, 1000)); out.Code != OK {
		t.Fatalf("after resume: %v", out)
	}

	srv.Stop()
	check("killed")

	srv.Start() // empty: Redis lost its memory
	// The first calls may still hit the dead connection; poll until the
	// client has reconnected.
	if out := deductUntil(t, s, attempt("gone", "u", 1, 1000)); out.Code != NotReady {
		t.Fatalf("after memory loss: %v, want NOT_READY (stock must not be resurrected)", out.Code)
	}
	warm(t, s, "gone", 5, 1000)
	if out := deductUntil(t, s, attempt("gone", "u", 1, 1000)); out.Code != OK || out.Remaining > 4 {
		t.Fatalf("after re-warm: %+v", out)
	}
}

func TestSoldOutBroadcast(t *testing.T) {
	a, srv := openReal(t, Options{})
	b, err := Open(context.Background(), srv.Addr(), testOptions(Options{Timeout: testBudget}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testBroadcast(t, a, b, srv.Restart)
}

// deductUntil retries an attempt until it gets an answer (polling the
// condition "Redis answers again"), giving up after 10s. Each try uses a
// fresh token and order id: a timed-out try may have been deducted.
func deductUntil(t *testing.T, s *Store, a Attempt) Outcome {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := s.Deduct(context.Background(), a)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer: %v", err)
		}
		a = attempt(a.ProductID, a.UserID, a.Qty, a.Limit)
	}
}

type flag struct {
	product string
	soldOut bool
}

// testBroadcast: b publishes, a's subscribers (two of them, one Redis
// subscription on the keyless channel) see it; after restart (if given)
// the subscription comes back and reports Missed.
func testBroadcast(t *testing.T, a, b *Store, restart func()) {
	if a.Sharded() || b.Sharded() {
		t.Fatal("sharded pub/sub on a standalone server") // one keyless channel there
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch1, ch2 := make(chan flag, 16), make(chan flag, 16)
	// Missed is reported as product "".
	follow := func(ch chan flag) Follow {
		return Follow{Missed: func(context.Context) { ch <- flag{"", false} }}
	}
	stop1 := a.SubscribeSoldOut(ctx, follow(ch1), func(p string, so bool) { ch1 <- flag{p, so} }).Stop
	stop2 := a.SubscribeSoldOut(ctx, follow(ch2), func(p string, so bool) { ch2 <- flag{p, so} }).Stop
	defer stop2()
	expect := func(ch chan flag, want flag) {
		t.Helper()
		for {
			select {
			case got := <-ch:
				if got.product == "" && want.product != "" {
					continue // resync hints may come at any (re)subscription
				}
				if got != want {
					t.Fatalf("got %+v, want %+v", got, want)
				}
				return
			case <-ctx.Done():
				t.Fatalf("no broadcast %+v", want)
			}
		}
	}
	expect(ch1, flag{"", false}) // subscribed
	if err := b.PublishSoldOut(ctx, "p1", true); err != nil {
		t.Fatal(err)
	}
	expect(ch1, flag{"p1", true})
	expect(ch2, flag{"p1", true})
	if err := b.PublishSoldOut(ctx, "p1", false); err != nil {
		t.Fatal(err)
	}
	expect(ch1, flag{"p1", false})
	expect(ch2, flag{"p1", false})
	stop1()
	if err := b.PublishSoldOut(ctx, "p2", true); err != nil {
		t.Fatal(err)
	}
	expect(ch2, flag{"p2", true})
	select {
	case f := <-ch1:
		if f.product != "" {
			t.Fatalf("stopped subscriber got %+v", f)
		}
	default:
	}
	if restart == nil {
		return
	}
	restart()
	expect(ch2, flag{"", false}) // resubscribed after the reconnect
	// b's own connection reconnects on its next call; retry until it does.
	for ctx.Err() == nil && b.PublishSoldOut(ctx, "p3", true) != nil {
	}
	expect(ch2, flag{"p3", true})
}

func TestOpenUnreachable(t *testing.T) {
	srv := redistest.New(t)
	addr := srv.Addr()
	srv.Stop()
	start := time.Now()
	s, err := Open(context.Background(), addr, testOptions(Options{Timeout: 100 * time.Millisecond}))
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded without a server")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Open took %v to fail", el)
	}
}

func TestClosedStore(t *testing.T) {
	s, _ := openReal(t, Options{})
	warm(t, s, "cl", 10, 1)
	s.Close()
	if _, err := s.Deduct(context.Background(), attempt("cl", "u", 1, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Deduct after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
