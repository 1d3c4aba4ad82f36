package stock

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
