package stocktest

import (
	"context"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/orders/stock"
)

// CallBudget is the default Timeout and QueueTimeout of a store Open
// makes: far above an edge's budget, because most tests are about what a
// script decides, and on a loaded 2-core machine a call can take longer
// than an edge would wait (it would then answer DEGRADED).
const CallBudget = 10 * time.Second

// Option changes the stock.Options a store is opened with.
type Option func(*stock.Options)

// Timeout sets both call budgets (Timeout and QueueTimeout) to d.
func Timeout(d time.Duration) Option {
	return func(o *stock.Options) { o.Timeout, o.QueueTimeout = d, d }
}

// OrderTTL sets how long an order hash lives.
func OrderTTL(d time.Duration) Option {
	return func(o *stock.Options) { o.OrderTTL = d }
}

// Snapshots makes the embedded server save into dir every saveEvery (-1:
// never; it still loads what dir holds).
func Snapshots(dir string, saveEvery time.Duration) Option {
	return func(o *stock.Options) { o.DataDir, o.SaveEvery = dir, saveEvery }
}

// OrderKeys warms new sales in the per-order ledger (stock.Options.OrderKeys)
// when on; off, in ledger "b".
func OrderKeys(on bool) Option {
	return func(o *stock.Options) { o.OrderKeys = on }
}

// WithOptions opens with opts as given, replacing every default.
func WithOptions(opts stock.Options) Option {
	return func(o *stock.Options) { *o = opts }
}

// Options is what Open passes to stock.Open: CallBudget for both budgets
// and the configuration's default order lifetime, then opts in order.
func Options(opts ...Option) stock.Options {
	o := stock.Options{Timeout: CallBudget, QueueTimeout: CallBudget, OrderTTL: conf.Defaults().Sale.OrderTTL}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Open connects a store to addr (a redistest.Server's Addr, a cluster's
// comma-separated addresses, or "embedded") and closes it when the test
// ends; a store that does not open fails the test.
func Open(t testing.TB, addr string, opts ...Option) *stock.Store {
	t.Helper()
	st, err := stock.Open(context.Background(), addr, Options(opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Price is the unit price, in cents, of the sales Warm writes.
const Price = 100

// Warm writes an open sale of product: stock units, at most limit per
// buyer, opened a minute ago (so that a clock a little behind still finds
// it open) and ending in an hour. It fails the test unless the sale was
// created.
func Warm(t testing.TB, s *stock.Store, product string, units int64, limit int) {
	t.Helper()
	now := time.Now()
	created, err := s.Warm(context.Background(), stock.SaleStock{
		ProductID: product, Stock: units, Limit: limit, Price: Price,
		StartMs: now.Add(-time.Minute).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli(),
	})
	if err != nil || !created {
		t.Fatalf("Warm(%s) = %v, %v", product, created, err)
	}
}
