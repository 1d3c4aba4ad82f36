package stock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/internal/await"
)

// The two layouts of buyer counts and used tokens (keys.go): "keys" is a
// sale warmed with BuyerKeys (one key each, the older versions' layout),
// "hashes" one warmed without (the per-product hashes).
var buyerLayouts = []struct {
	name    string
	perKeys bool
}{{"keys", true}, {"hashes", false}}

// hashedSale reports whether p's meta says its buyers and tokens are hashes.
func hashedSale(t testing.TB, s *Store, p string) bool {
	t.Helper()
	v, err := s.c.Do(context.Background(), s.c.B().Hget().Key(MetaKey(p)).Field("layout").Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return v == layoutHashes
}

// buyerStored is whether u's count is stored in p's layout, and the PTTL of
// the key that holds it.
func buyerStored(t testing.TB, s *Store, p, u string) (bool, int64) {
	t.Helper()
	c, ctx := s.c, context.Background()
	if hashedSale(t, s, p) {
		key := BuyerShardKey(p, BuyerShard(u))
		n, err := c.Do(ctx, c.B().Hexists().Key(key).Field(u).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1, pttl(t, s, key)
	}
	n, err := c.Do(ctx, c.B().Exists().Key(BuyerKey(p, u)).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1, pttl(t, s, BuyerKey(p, u))
}

// forgetBuyer deletes u's count in p's layout, as a Redis that lost it.
func forgetBuyer(t testing.TB, s *Store, p, u string) {
	t.Helper()
	c, ctx := s.c, context.Background()
	cmd := c.B().Del().Key(BuyerKey(p, u)).Build()
	if hashedSale(t, s, p) {
		cmd = c.B().Hdel().Key(BuyerShardKey(p, BuyerShard(u))).Field(u).Build()
	}
	if err := c.Do(ctx, cmd).Error(); err != nil {
		t.Fatal(err)
	}
}

// tokenMark is whether a's token is marked used in p's layout, and the
// PTTL of the key that holds the mark.
func tokenMark(t testing.TB, s *Store, a Attempt) (bool, int64) {
	t.Helper()
	c, ctx, p := s.c, context.Background(), a.ProductID
	if hashedSale(t, s, p) {
		key := TokenBucketKey(p, a.TokenExpiresMs)
		n, err := c.Do(ctx, c.B().Hexists().Key(key).Field(a.TokenNonceHex).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1, pttl(t, s, key)
	}
	n, err := c.Do(ctx, c.B().Exists().Key(TokenKey(p, a.TokenNonceHex)).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1, pttl(t, s, TokenKey(p, a.TokenNonceHex))
}

// layoutKeys is the product's keys of either layout: per-key buyers and
// tokens, buyer and token hashes.
func layoutKeys(t testing.TB, s *Store, p string) (keys, hashes int) {
	t.Helper()
	keys = len(scanKeys(t, s, prefix(p)+"u:*")) + len(scanKeys(t, s, prefix(p)+"t:*"))
	hashes = len(scanKeys(t, s, prefix(p)+"b:*")) + len(scanKeys(t, s, prefix(p)+"tk:*"))
	return keys, hashes
}

// runBatch sends attempts as ONE deduction script call.
func runBatch(t testing.TB, s *Store, as ...Attempt) []Code {
	t.Helper()
	b := batchPool.Get().(*batch)
	var calls []*call
	for i := range as {
		c := newCall(context.Background(), &as[i], time.Minute)
		calls = append(calls, c)
		b.calls = append(b.calls, c)
	}
	s.exec(s.product(as[0].ProductID), b)
	codes := make([]Code, len(calls))
	for i, c := range calls {
		if c.err != nil {
			t.Fatalf("batch attempt %d: %v", i, c.err)
		}
		codes[i] = c.out.Code
	}
	return codes
}

// sameToken is a second use of a's token (by user, for qty).
func sameToken(a Attempt, user string, qty int) Attempt {
	b := attempt(a.ProductID, user, qty, a.Limit)
	b.TokenNonceHex, b.TokenExpiresMs = a.TokenNonceHex, a.TokenExpiresMs
	return b
}

// The same attempts get the same answers in both layouts: stock, the token
// generation, a token's single use (in one batch and across batches), the
// limit with quantities, a user twice in one batch; and a refused attempt
// leaves its token unused. Each layout's sale writes only its own keys.
func TestBuyerLayoutsGiveTheSameAnswers(t *testing.T) {
	type step struct {
		batch []Attempt
		want  []Code
	}
	scenarios := []struct {
		name         string
		stock        int64
		limit        int
		steps        func(p string) []step
		tokensFromMs func(now int64) int64
	}{
		{name: "sold out", stock: 3, limit: 5, steps: func(p string) []step {
			return []step{
				{[]Attempt{attempt(p, "x", 2, 5), attempt(p, "y", 2, 5), attempt(p, "z", 1, 5), attempt(p, "w", 1, 5)},
					[]Code{OK, SoldOut, OK, SoldOut}},
				{[]Attempt{attempt(p, "v", 1, 5)}, []Code{SoldOut}},
			}
		}},
		{name: "replayed token", stock: 100, limit: 5, steps: func(p string) []step {
			a, b := attempt(p, "x", 1, 5), attempt(p, "y", 1, 5)
			return []step{
				{[]Attempt{a, sameToken(a, "x", 1), b, sameToken(a, "z", 1)}, []Code{OK, BadToken, OK, BadToken}},
				{[]Attempt{sameToken(b, "y", 1), sameToken(a, "x", 1), attempt(p, "x", 1, 5)}, []Code{BadToken, BadToken, OK}},
			}
		}},
		{name: "limit with quantity", stock: 100, limit: 3, steps: func(p string) []step {
			return []step{
				{[]Attempt{attempt(p, "x", 2, 3), attempt(p, "x", 2, 3), attempt(p, "x", 1, 3), attempt(p, "y", 3, 3)},
					[]Code{OK, LimitReached, OK, OK}},
				{[]Attempt{attempt(p, "x", 1, 3), attempt(p, "y", 1, 3), attempt(p, "z", 4, 3)},
					[]Code{LimitReached, LimitReached, LimitReached}},
			}
		}},
		{name: "user twice in one batch", stock: 100, limit: 1, steps: func(p string) []step {
			return []step{{[]Attempt{attempt(p, "x", 1, 1), attempt(p, "x", 1, 1), attempt(p, "y", 1, 1), attempt(p, "y", 1, 1)},
				[]Code{OK, LimitReached, OK, LimitReached}}}
		}},
		{name: "refused keeps its token", stock: 100, limit: 1, steps: func(p string) []step {
			a, b := attempt(p, "x", 1, 1), attempt(p, "x", 1, 1)
			return []step{
				{[]Attempt{a}, []Code{OK}},
				{[]Attempt{b, sameToken(b, "y", 1)}, []Code{LimitReached, OK}},
				{[]Attempt{sameToken(b, "z", 1)}, []Code{BadToken}},
			}
		}},
		{name: "token generation", stock: 100, limit: 5,
			tokensFromMs: func(now int64) int64 { return now + 30_000 },
			steps: func(p string) []step {
				old, young := attempt(p, "x", 1, 5), attempt(p, "y", 1, 5)
				old.TokenExpiresMs = old.CreatedMs + 20_000 // minted before the rebuild
				return []step{{[]Attempt{old, young, sameToken(young, "z", 1)}, []Code{BadToken, OK, BadToken}}}
			}},
		{name: "tokens of two buckets", stock: 100, limit: 5, steps: func(p string) []step {
			a, b := attempt(p, "x", 1, 5), attempt(p, "y", 1, 5)
			b.TokenExpiresMs = a.TokenExpiresMs + 61_000
			return []step{
				{[]Attempt{a, b, sameToken(b, "z", 1), sameToken(a, "z", 1)}, []Code{OK, OK, BadToken, BadToken}},
				{[]Attempt{sameToken(b, "w", 1)}, []Code{BadToken}},
			}
		}},
	}
	s, srv := openReal(t, Options{BuyerKeys: true, OrderKeys: true})
	h, err := Open(context.Background(), srv.Addr(), testOptions(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	stores := map[bool]*Store{true: s, false: h}
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, l := range buyerLayouts {
				s := stores[l.perKeys]
				p := fmt.Sprintf("same%d%s", i, l.name)
				warm(t, s, p, sc.stock, sc.limit)
				if hashedSale(t, s, p) == l.perKeys {
					t.Fatalf("%s: sale warmed with BuyerKeys=%v has layout hashes=%v", l.name, l.perKeys, !l.perKeys)
				}
				if sc.tokensFromMs != nil {
					from := sc.tokensFromMs(time.Now().UnixMilli())
					if err := s.c.Do(context.Background(), s.c.B().Hset().Key(MetaKey(p)).FieldValue().FieldValue("tokens", i64(from)).Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				var sold int64
				bought := map[string]int64{}
				for j, st := range sc.steps(p) {
					got := runBatch(t, s, st.batch...)
					if !slices.Equal(got, st.want) {
						t.Errorf("%s: batch %d answered %v, want %v", l.name, j, got, st.want)
					}
					for k, c := range got {
						if c == OK {
							sold += int64(st.batch[k].Qty)
							bought[st.batch[k].UserID] += int64(st.batch[k].Qty)
						}
					}
				}
				if rem := remaining(t, s, p); rem != sc.stock-sold {
					t.Errorf("%s: remaining %d, want %d", l.name, rem, sc.stock-sold)
				}
				for _, u := range []string{"x", "y", "z", "w", "v"} {
					if n, err := s.Bought(context.Background(), p, u); err != nil || n != bought[u] {
						t.Errorf("%s: Bought(%s) = %d, %v; want %d", l.name, u, n, err, bought[u])
					}
					if ok, ttl := buyerStored(t, s, p, u); ok != (bought[u] > 0) || ok && ttl <= time.Hour.Milliseconds() {
						t.Errorf("%s: %s's count stored %v, PTTL %d", l.name, u, ok, ttl)
					}
				}
				keys, hashes := layoutKeys(t, s, p)
				if sold > 0 && (l.perKeys && (keys == 0 || hashes != 0) || !l.perKeys && (keys != 0 || hashes == 0)) {
					t.Errorf("%s: %d per-key keys and %d hashes", l.name, keys, hashes)
				}
			}
		})
	}
}

// A used token's mark outlives the token, in a hash that goes when its
// bucket's tokens have all expired; a buyer hash lives until the sale's end
// plus the grace, as a per-key count does.
func TestBuyerHashesTTL(t *testing.T) {
	s, _ := openReal(t, Options{})
	const p = "httl"
	warm(t, s, p, 100, 5)
	a := attempt(p, "alice", 1, 5)
	if out := mustDeduct(t, s, a); out.Code != OK {
		t.Fatalf("deduct: %v", out.Code)
	}
	ok, ttl := tokenMark(t, s, a)
	bucketEnd := (a.TokenExpiresMs/tokenBucketMs + 1) * tokenBucketMs
	if !ok || ttl < a.TokenExpiresMs-time.Now().UnixMilli()-1000 || ttl > bucketEnd-a.CreatedMs+1000 {
		t.Errorf("token mark %v PTTL %d, want from the token's expiry (%d) to its bucket's end (%d)", ok, ttl,
			a.TokenExpiresMs-a.CreatedMs, bucketEnd-a.CreatedMs)
	}
	info := saleInfo(t, s, p)
	ok, ttl = buyerStored(t, s, p, "alice")
	if d := info.EndMs + s.opts.BuyerGrace.Milliseconds() - time.Now().UnixMilli(); !ok || ttl > d+1000 || ttl < d-time.Minute.Milliseconds() {
		t.Errorf("buyer hash %v PTTL %d, want about %d", ok, ttl, d)
	}
	if hashes := len(scanKeys(t, s, prefix(p)+"b:*")); hashes != 1 {
		t.Errorf("%d buyer hashes for one buyer", hashes)
	}
}

// A cancel and a pay deadline give the units back to the buyer's count in
// both layouts; a count back at 0 is gone.
func TestBuyerLayoutsRelease(t *testing.T) {
	ctx := context.Background()
	for _, l := range buyerLayouts {
		t.Run(l.name, func(t *testing.T) {
			s, _ := openReal(t, Options{BuyerKeys: l.perKeys})
			const p, limit = "rel", 3
			warm(t, s, p, 100, limit)
			big := stored(t, s, p, "alice", 2, time.Hour)
			short := stored(t, s, p, "alice", 1, 300*time.Millisecond)
			if out := mustDeduct(t, s, attempt(p, "alice", 1, limit)); out.Code != LimitReached {
				t.Fatalf("alice at her limit: %v", out.Code)
			}
			if st, err := s.Cancel(ctx, p, big.ID); err != nil || !st.Changed {
				t.Fatalf("Cancel = %+v, %v", st, err)
			}
			if n, err := s.Bought(ctx, p, "alice"); err != nil || n != 1 {
				t.Fatalf("Bought after the cancel = %d, %v", n, err)
			}
			await.Until(t, 10*time.Second, "the short deadline expires", func() bool {
				got, err := s.ExpireDue(ctx, p, 10)
				if err != nil {
					t.Fatal(err)
				}
				return len(got) == 1 && got[0].Info.ID == short.ID
			})
			if n, err := s.Bought(ctx, p, "alice"); err != nil || n != 0 {
				t.Fatalf("Bought after the expiry = %d, %v", n, err)
			}
			if ok, _ := buyerStored(t, s, p, "alice"); ok {
				t.Errorf("a count of 0 is still stored")
			}
			if out := mustDeduct(t, s, attempt(p, "alice", limit, limit)); out.Code != OK {
				t.Errorf("alice buying her limit again: %v", out.Code)
			}
		})
	}
}

// The layout is the sale's for life: a sale warmed with BuyerKeys stays
// per-key when an edge without it warms and sells it again (and through a
// fence and rebuild), one warmed without stays hashes when an edge with it
// does; a new sale takes the warming edge's.
func TestBuyerLayoutIsTheSales(t *testing.T) {
	ctx := context.Background()
	keys, srv := openReal(t, Options{BuyerKeys: true, OrderKeys: true})
	hashes, err := Open(ctx, srv.Addr(), testOptions(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hashes.Close() })
	warm(t, keys, "lk", 100, 3)
	warm(t, hashes, "lh", 100, 3)
	for _, c := range []struct {
		p           string
		hashed      bool
		first, then *Store
	}{{"lk", false, keys, hashes}, {"lh", true, hashes, keys}} {
		mustDeduct(t, c.first, attempt(c.p, "alice", 1, 3))
		if created, err := c.then.Warm(ctx, SaleStock{ProductID: c.p, Stock: 100, Limit: 3, Price: 1999,
			EndMs: time.Now().Add(time.Hour).UnixMilli()}); err != nil || created {
			t.Fatalf("Warm(%s) again = %v, %v", c.p, created, err)
		}
		mustDeduct(t, c.then, attempt(c.p, "alice", 1, 3))
		if out := mustDeduct(t, c.then, attempt(c.p, "alice", 2, 3)); out.Code != LimitReached {
			t.Errorf("%s: alice holds 2, buying 2 more: %v", c.p, out.Code)
		}
		// Fenced and rebuilt by the other edge: still its layout.
		fence := fenceNow(t, c.then, c.p)
		info, _, _ := c.then.Meta(ctx, c.p)
		if _, ok, err := c.then.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: c.p, Stock: 98, Initial: 100, Limit: 3,
			Price: 1999, EndMs: info.EndMs}, Fence: fence, Buyers: map[string]int64{"alice": 2}}); err != nil || !ok {
			t.Fatalf("Rebuild(%s) = %v, %v", c.p, ok, err)
		}
		if got := hashedSale(t, keys, c.p); got != c.hashed {
			t.Errorf("%s: hashes %v after the other edge's warm and rebuild, want %v", c.p, got, c.hashed)
		}
		if out := mustDeduct(t, c.first, attempt(c.p, "alice", 2, 3)); out.Code != LimitReached {
			t.Errorf("%s: alice holds 2 after the rebuild, buying 2 more: %v", c.p, out.Code)
		}
		k, h := layoutKeys(t, keys, c.p)
		if c.hashed && k != 0 || !c.hashed && h != 0 {
			t.Errorf("%s: %d per-key keys, %d hashes", c.p, k, h)
		}
	}
	// A sale Redis lost (only the fence left in its meta) takes the
	// rebuilding edge's layout.
	warm(t, keys, "lost", 10, 3)
	mustDeduct(t, keys, attempt("lost", "alice", 1, 3))
	if err := keys.c.Do(ctx, keys.c.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	fence := fenceNow(t, hashes, "lost")
	if _, ok, err := hashes.Rebuild(ctx, Rebuild{SaleStock: SaleStock{ProductID: "lost", Stock: 9, Initial: 10, Limit: 3,
		Price: 1999, EndMs: time.Now().Add(time.Hour).UnixMilli()}, Fence: fence, Buyers: map[string]int64{"alice": 1}}); err != nil || !ok {
		t.Fatalf("Rebuild(lost) = %v, %v", ok, err)
	}
	if !hashedSale(t, keys, "lost") {
		t.Errorf("a lost sale rebuilt by an edge without BuyerKeys is per-key")
	}
	if n, err := keys.Bought(ctx, "lost", "alice"); err != nil || n != 1 {
		t.Errorf("Bought after the rebuild = %d, %v", n, err)
	}
}

// The rolling upgrade: an older edge (testdata/deduct_hash.lua, verbatim,
// which knows only sk:{p}:u: and sk:{p}:t:) and a new one with BuyerKeys
// sell one sale at once, attempts interleaved and racing: nobody gets past
// the limit, no token is used twice, and the stock adds up.
func TestBuyerKeysRollingUpgrade(t *testing.T) {
	ctx := context.Background()
	s, _ := openReal(t, Options{BuyerKeys: true, OrderKeys: true})
	const p, limit, users, stockN = "roll", 3, 20, 1000
	warm(t, s, p, stockN, limit)
	var mu sync.Mutex
	bought, uses := map[string]int{}, map[string]int{}
	var oks int
	record := func(a Attempt, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if ok {
			bought[a.UserID] += a.Qty
			uses[a.TokenNonceHex]++
			oks++
		}
	}
	old := func(a Attempt) bool {
		keys := []string{StockKey(p), OutboxKey(p), MetaKey(p), BuyerKey(p, a.UserID), OrderKey(p, a.ID), TokenKey(p, a.TokenNonceHex)}
		args := []string{p, s.graceMs, s.orderTTLMs, s.fenceArg(), a.UserID, strconv.Itoa(a.Qty), strconv.Itoa(a.Limit),
			i64(a.ID), i64(a.PriceCents), i64(a.CreatedMs), i64(a.TokenExpiresMs - a.CreatedMs), strconv.Itoa(a.Edge), i64(a.PayByMs)}
		res, err := hashDeductScript.Exec(ctx, s.c, keys, args).ToArray()
		if err != nil || len(res) != 2 {
			t.Errorf("old deduct.lua: %v %v", res, err)
			return false
		}
		_, err = res[1].ToString()
		return err == nil
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				u := "u" + strconv.Itoa((g*7+i)%users)
				a := attempt(p, u, 1+i%2, limit)
				// Every token is tried on both edges: one use at most.
				if (g+i)%2 == 0 {
					record(a, old(a))
					out, err := s.Deduct(ctx, sameToken(a, u, a.Qty))
					if err != nil {
						t.Error(err)
					}
					record(a, out.Code == OK)
				} else {
					out, err := s.Deduct(ctx, a)
					if err != nil {
						t.Error(err)
					}
					record(a, out.Code == OK)
					record(a, old(sameToken(a, u, a.Qty)))
				}
			}
		}()
	}
	wg.Wait()
	sold := checkRaced(t, s, p, limit, bought, uses)
	if oks == 0 || len(bought) != users {
		t.Errorf("%d successes for %d buyers of %d: the test sold too little to prove anything", oks, len(bought), users)
	}
	if rem := remaining(t, s, p); rem != int64(stockN-sold) {
		t.Errorf("remaining %d, sold %d of %d", rem, sold, stockN)
	}
	if n, err := s.OutboxLen(ctx, p); err != nil || n != int64(oks) {
		t.Errorf("outbox %d entries (%v), %d successes", n, err, oks)
	}
	if _, hashes := layoutKeys(t, s, p); hashes != 0 {
		t.Errorf("a BuyerKeys sale has %d hashes", hashes)
	}
}

// deduct.lua called in the older shape (no buyer hashes: the bench's
// redis-benchmark and the OpenResty peer call it so) serves a per-key sale
// and refuses, writing nothing, a sale whose buyers are hashes.
func TestDeductOlderCallShape(t *testing.T) {
	ctx := context.Background()
	s, _ := openReal(t, Options{BuyerKeys: true, OrderKeys: true})
	h := openOn(t, s, Options{})
	warm(t, s, "shk", 10, 3)
	warm(t, h, "shh", 10, 3)
	for _, c := range []struct {
		p  string
		ok bool
	}{{"shk", true}, {"shh", false}} {
		a := attempt(c.p, "alice", 1, 3)
		p := c.p
		keys := []string{StockKey(p), OutboxKey(p), MetaKey(p), BuyerKey(p, a.UserID), OrderKey(p, a.ID), TokenKey(p, a.TokenNonceHex)}
		args := []string{p, s.graceMs, s.orderTTLMs, s.fenceArg(), a.UserID, strconv.Itoa(a.Qty), strconv.Itoa(a.Limit),
			i64(a.ID), i64(a.PriceCents), i64(a.CreatedMs), i64(a.TokenExpiresMs - a.CreatedMs), strconv.Itoa(a.Edge), i64(a.PayByMs)}
		res, err := deductScript.Exec(ctx, s.c, keys, args).ToArray()
		if c.ok {
			if _, e := res[1].ToString(); err != nil || len(res) != 2 || e != nil {
				t.Errorf("%s: older shape on a per-key sale: %v %v", p, res, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: older shape on a hash sale answered %v", p, res)
		}
		if rem := remaining(t, s, p); rem != 10 {
			t.Errorf("%s: remaining %d after a refused call", p, rem)
		}
		if n, _ := s.OutboxLen(ctx, p); n != 0 {
			t.Errorf("%s: %d outbox entries after a refused call", p, n)
		}
	}
}
