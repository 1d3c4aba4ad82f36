package stock

import (
	"context"
	_ "embed"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The previous version's deduction call (ledger "b" and buyer hashes, before
// the lean call): its deduct.lua verbatim and its build, for the rolling
// upgrade's race (TestLeanCallRacesPreviousCall) and the side-by-side
// benchmark (BenchmarkLedgerRedisCPU).
var (
	//go:embed testdata/deduct_b.lua
	prevDeductLua string
	//go:embed testdata/mark_success_b.lua
	prevMarkLua string

	prevDeductScript = rueidis.NewLuaScript(prevDeductLua)
	prevMarkScript   = rueidis.NewLuaScript(orderFnLua + prevMarkLua)
)

// prevMarkCall is the previous version's mark_success.lua call for ids:
// the due set, their order buckets and their order keys; each id and its
// bucket's position (markSuccessCall's, without the order keys' prefix).
func prevMarkCall(product string, ids []int64) (keys, args []string) {
	keys, args = markSuccessCall(product, ids)
	args = append(args[:1:1], args[2:]...)
	for _, id := range ids {
		keys = append(keys, OrderKey(product, id))
	}
	return keys, args
}

// prevCall is the previous version's KEYS and ARGV for attempts as of
// nowMs: per attempt the three per-key names and 12 strings.
func prevCall(s *Store, product string, nowMs int64, as ...Attempt) (keys, args []string) {
	p := keysOf(product)
	var buckets, obuckets []int64
	var tail [][2]string // per attempt its buyer shard, token hash and order bucket positions
	keys = append([]string{p.stockKey, p.outboxKey, p.metaKey}, p.shardKeys...)
	args = []string{product, s.graceMs, s.orderTTLMs, s.fenceArg()}
	for _, a := range as {
		keys = append(keys, BuyerKey(product, a.UserID), OrderKey(product, a.ID), TokenKey(product, a.TokenNonceHex))
		args = append(args, a.UserID, i64(int64(a.Qty)), i64(int64(a.Limit)), i64(a.ID), i64(a.PriceCents), i64(a.CreatedMs),
			i64(a.TokenExpiresMs-a.CreatedMs), i64(int64(a.Edge)), i64(a.PayByMs))
		m := a.TokenExpiresMs / tokenBucketMs
		j := slices.Index(buckets, m)
		if j < 0 {
			j = len(buckets)
			buckets = append(buckets, m)
		}
		o := OrderBucket(a.ID)
		k := slices.Index(obuckets, o)
		if k < 0 {
			k = len(obuckets)
			obuckets = append(obuckets, o)
		}
		tail = append(tail, [2]string{i64(int64(j + 1)), i64(int64(k + 1))})
	}
	for _, m := range buckets {
		keys = append(keys, TokenBucketKey(product, m*tokenBucketMs))
	}
	for _, m := range obuckets {
		keys = append(keys, p.prefix+orderBucketSuffix+i64(m))
	}
	args = append(args, s.layoutArg)
	for i, a := range as {
		args = append(args, shardArgs[BuyerShard(a.UserID)], tail[i][0], tail[i][1])
	}
	for _, m := range obuckets {
		args = append(args, i64(orderBucketExpireAtMs(m, nowMs, s.opts.OrderTTL.Milliseconds())))
	}
	return keys, append(args, i64(int64(len(obuckets))))
}

// prevEdgeDeduct places as as an edge of the previous version does, in one
// call, and returns each attempt's answer: its outbox id, or "" and its code.
func prevEdgeDeduct(t testing.TB, s *Store, as ...Attempt) (ids []string, codes []Code) {
	t.Helper()
	keys, args := prevCall(s, as[0].ProductID, time.Now().UnixMilli(), as...)
	res, err := prevDeductScript.Exec(context.Background(), s.c, keys, args).ToArray()
	if err != nil || len(res) != len(as)+1 {
		t.Fatalf("previous deduct.lua: %v %v", res, err)
	}
	for _, r := range res[1:] {
		if id, err := r.ToString(); err == nil {
			ids, codes = append(ids, id), append(codes, OK)
			continue
		}
		c, _ := r.AsInt64()
		ids, codes = append(ids, ""), append(codes, Code(c))
	}
	return ids, codes
}

// leanAnswers reads a lean call's reply (deduct.lua) for n attempts: each
// attempt's outcome.
func leanAnswers(res []rueidis.RedisMessage, n int) ([]Outcome, error) {
	b := &batch{}
	for range n {
		b.send = append(b.send, &call{})
	}
	if err := parseAnswers(b, res); err != nil {
		return nil, err
	}
	outs := make([]Outcome, n)
	for i, c := range b.send {
		outs[i] = c.out
	}
	return outs, nil
}

// The lean call's rolling upgrade: an edge of the previous version (its
// deduct.lua verbatim, its call shape) and one of this version sell one
// sale at once, attempts interleaved and racing, every token tried on both,
// in every layout a sale can have (per-key or hashed buyers, either
// ledger): nobody gets past the limit, no token is used twice, the stock
// adds up, every order is in the outbox once and readable, whoever placed
// it. The data layout did not change, only the call: both write the same.
func TestLeanCallRacesPreviousCall(t *testing.T) {
	for _, l := range []struct {
		name                 string
		buyerKeys, orderKeys bool
	}{{"hashes-b", false, false}, {"hashes-orders", false, true}, {"keys-b", true, false}, {"keys-orders", true, true}} {
		t.Run(l.name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := openReal(t, Options{BuyerKeys: l.buyerKeys, OrderKeys: l.orderKeys})
			const limit, users, stockN = 3, 20, 1000
			p := "lean" + strings.ReplaceAll(l.name, "-", "")
			warm(t, s, p, stockN, limit)
			var mu sync.Mutex
			bought, uses := map[string]int{}, map[string]int{}
			var placed []Attempt
			var byPrev int
			record := func(a Attempt, ok, prev bool) {
				mu.Lock()
				defer mu.Unlock()
				if ok {
					bought[a.UserID] += a.Qty
					uses[a.TokenNonceHex]++
					placed = append(placed, a)
					if prev {
						byPrev++
					}
				}
			}
			prevOne := func(a Attempt) {
				_, codes := prevEdgeDeduct(t, s, a)
				record(a, codes[0] == OK, true)
			}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 60 {
						u := "u" + strconv.Itoa((g*7+i)%users)
						a := attempt(p, u, 1+i%2, limit)
						b := sameToken(a, u, a.Qty)
						if (g+i)%2 == 0 {
							prevOne(a)
						}
						out, err := s.Deduct(ctx, b)
						if err != nil {
							t.Error(err)
						}
						record(b, out.Code == OK, false)
						if (g+i)%2 == 1 {
							prevOne(a)
						}
					}
				})
			}
			wg.Wait()
			sold := checkRaced(t, s, p, limit, bought, uses)
			if byPrev == 0 || byPrev == len(placed) || len(bought) != users {
				t.Fatalf("%d successes (%d by the previous version) for %d buyers of %d: the test sold too little to prove anything",
					len(placed), byPrev, len(bought), users)
			}
			if rem := remaining(t, s, p); rem != int64(stockN-sold) {
				t.Errorf("remaining %d, sold %d of %d", rem, sold, stockN)
			}
			checkPlaced(t, s, p, placed)
		})
	}
}
