package stock

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/orders/order"
)

// The package's own test kit: how its tests open a store and warm a sale.
// Tests elsewhere use internal/stocktest, which these cannot import (it
// imports this package).

// orderSeq makes order ids (and so token nonces) unique across a test run.
var orderSeq atomic.Int64

// testBudget replaces the 200ms production budget in tests that do not
// test the budget itself: CI runs packages in parallel on two cores, and a
// scheduling hiccup must not turn into a flaky "outcome unknown".
const testBudget = 10 * time.Second

// testOptions fills what a test leaves out: testBudget, a queue wait of one
// budget, and edge.yaml's order TTL (from conf, as the edge passes it).
func testOptions(opts Options) Options {
	opts.Timeout = cmp.Or(opts.Timeout, testBudget)
	opts.QueueTimeout = cmp.Or(opts.QueueTimeout, opts.Timeout)
	opts.OrderTTL = cmp.Or(opts.OrderTTL, conf.Defaults().Sale.OrderTTL)
	return opts
}

func openReal(t testing.TB, opts Options) (*Store, *redistest.Server) {
	t.Helper()
	srv := redistest.New(t)
	s, err := Open(context.Background(), srv.Addr(), testOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, srv
}

func openEmbedded(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), "embedded", testOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openOn opens a second store on s's server.
func openOn(t testing.TB, s *Store, opts Options) *Store {
	t.Helper()
	o, err := Open(context.Background(), s.addr, testOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func openCluster(t testing.TB, opts Options) (*Store, *redistest.Cluster) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3+3 Redis Cluster: skipped with -short")
	}
	c := redistest.NewCluster(t)
	s, err := Open(context.Background(), strings.Join(c.Addrs(), ","), testOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

func attempt(product, user string, qty, limit int) Attempt {
	id := orderSeq.Add(1)
	now := time.Now().UnixMilli()
	return Attempt{
		Order: order.Order{
			ProductID: product, UserID: user, Qty: qty, ID: id, PriceCents: 1999, CreatedMs: now, Edge: 7,
		},
		Limit: limit, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: now + 60_000,
	}
}

func warm(t testing.TB, s *Store, product string, stock int64, limit int) {
	t.Helper()
	created, err := s.Warm(context.Background(), SaleStock{
		ProductID: product, Stock: stock, Limit: limit, Price: 1999,
		StartMs: time.Now().UnixMilli(), EndMs: time.Now().Add(time.Hour).UnixMilli(),
	})
	if err != nil || !created {
		t.Fatalf("Warm(%s) = %v, %v", product, created, err)
	}
}

func mustDeduct(t testing.TB, s *Store, a Attempt) Outcome {
	t.Helper()
	out, err := s.Deduct(context.Background(), a)
	if err != nil {
		t.Fatalf("Deduct(%+v): %v", a, err)
	}
	return out
}

func remaining(t testing.TB, s *Store, product string) int64 {
	t.Helper()
	n, ok, err := s.Remaining(context.Background(), product)
	if err != nil || !ok {
		t.Fatalf("Remaining(%s) = %d, %v, %v", product, n, ok, err)
	}
	return n
}

func pttl(t testing.TB, s *Store, key string) int64 {
	t.Helper()
	c := s.c
	n, err := c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func scanKeys(t testing.TB, s *Store, pattern string) []string {
	t.Helper()
	c := s.c
	var keys []string
	var cursor uint64
	for {
		e, err := c.Do(context.Background(), c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return keys
		}
	}
}

// orderHome is the key that holds order id of p: its order bucket hash in
// ledger "b" (when the field is there), else its own key.
func orderHome(t testing.TB, s *Store, p string, id int64) string {
	t.Helper()
	c := s.c
	n, err := c.Do(context.Background(), c.B().Hexists().Key(OrderBucketKey(p, id)).Field(i64(id)).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if n == 1 {
		return OrderBucketKey(p, id)
	}
	return OrderKey(p, id)
}

// outboxOrders is the number of orders in p's outbox, whatever its
// ledger: one per entry, or many per batch entry.
func outboxOrders(t testing.TB, s *Store, p string) int64 {
	t.Helper()
	os, err := s.OutboxOrders(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(os))
}

// batchedSale reports whether p's meta says its ledger is "b".
func batchedSale(t testing.TB, s *Store, p string) bool {
	t.Helper()
	v, err := s.c.Do(context.Background(), s.c.B().Hget().Key(MetaKey(p)).Field("ledger").Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return v == ledgerBatches
}

// The two ledgers (keys.go): "orders" a sale warmed with OrderKeys (one key
// and one outbox entry per order, the older versions'), "batches" one
// warmed without (order bucket hashes, one outbox entry per script call).
var ledgers = []struct {
	name      string
	orderKeys bool
}{{"orders", true}, {"batches", false}}

// checkRaced checks what a race of edges on sale p sold: bought is what
// each user was told she bought, uses how often each token was accepted.
// Nobody is over the limit, Redis holds each count, no token twice; it
// returns the units sold.
func checkRaced(t testing.TB, s *Store, p string, limit int, bought, uses map[string]int) (sold int) {
	t.Helper()
	for u, n := range bought {
		if n > limit {
			t.Errorf("%s bought %d, limit %d", u, n, limit)
		}
		if got, err := s.Bought(context.Background(), p, u); err != nil || got != int64(n) {
			t.Errorf("Bought(%s) = %d, %v; want %d", u, got, err, n)
		}
		sold += n
	}
	for nonce, n := range uses {
		if n > 1 {
			t.Errorf("token %s used %d times", nonce, n)
		}
	}
	return sold
}

// onBothServers runs the test on a real redis-server and on the embedded
// one, each a fresh store.
func onBothServers(t *testing.T, test func(t *testing.T, s *Store)) {
	for name, open := range map[string]func(t *testing.T) *Store{
		"redis":    func(t *testing.T) *Store { s, _ := openReal(t, Options{}); return s },
		"embedded": func(t *testing.T) *Store { return openEmbedded(t, Options{}) },
	} {
		t.Run(name, func(t *testing.T) { test(t, open(t)) })
	}
}

// checkPlaced checks the orders a race placed on sale p: each in the
// outbox once and nothing else there, and each readable by this version as
// placed (pending). It returns their ids.
func checkPlaced(t testing.TB, s *Store, p string, placed []Attempt) []int64 {
	t.Helper()
	ctx := context.Background()
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
	got, err := s.Orders(ctx, p, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range placed {
		if o := got[a.ID]; o.Order != a.Order || o.State != StatePending {
			t.Errorf("order %d read by this version: %+v, want pending %+v", a.ID, o, a.Order)
		}
	}
	return ids
}
