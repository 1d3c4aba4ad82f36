package stock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
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
		if n := outboxOrders(t, s, p); n != soldN[p] {
			t.Errorf("%s: outbox has %d orders, want %d (one per OK)", p, n, soldN[p])
		}
		// Every buyer and order key carries a TTL: none may live forever.
		var keys []string
		for _, pat := range []string{"u:*", "t:*", "b:*", "tk:*", "o:*", "ob:*"} {
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
		if ttl := pttl(t, s, orderHome(t, s, o.product, o.order)); ttl <= 0 {
			t.Errorf("order %d PTTL %d", o.order, ttl)
		}
	}
}

func TestNoOversell(t *testing.T) {
	// Both ledgers; and ledger b with per-key buyers and tokens (no option
	// warms such a sale, BuyerKeys implies OrderKeys, but the script
	// serves whatever the meta says).
	for _, l := range []struct {
		name    string
		opts    Options
		perKeys bool
	}{{"orders", Options{OrderKeys: true}, false}, {"batches", Options{}, false}, {"batches-buyerkeys", Options{}, true}} {
		t.Run(l.name, func(t *testing.T) {
			s, _ := openReal(t, l.opts)
			s.buyersArg = buyersArg(l.perKeys)
			for _, tc := range []struct {
				name                string
				minQty, maxQty, lim int
			}{
				{"qty1-limit1", 1, 1, 1},
				{"qty2to3-limit5", 2, 3, 5},
			} {
				t.Run(tc.name, func(t *testing.T) {
					runNoOversell(t, s, tc.name, tc.minQty, tc.maxQty, tc.lim, 64, 40)
					p := tc.name + "-a"
					if batchedSale(t, s, p) == l.opts.OrderKeys || hashedSale(t, s, p) == l.perKeys {
						t.Errorf("%s: ledger b %v, buyer hashes %v", p, batchedSale(t, s, p), hashedSale(t, s, p))
					}
				})
			}
			calls, attempts := s.Stats()
			t.Logf("%d attempts in %d script calls (%.1f per call)", attempts, calls, float64(attempts)/float64(calls))
		})
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
