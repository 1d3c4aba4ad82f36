package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
)

// Product is one product's line of the report (see the package doc for
// the definitions).
type Product struct {
	ProductID string `json:"productId"`
	Warmed    bool   `json:"warmed"` // false: no stock key in Redis, nothing compared
	// Missing: not warmed although the ledger has rows for the product —
	// Redis lost the sale and nothing rebuilt it. An error.
	Missing bool `json:"missing,omitempty"`
	// Fence is set when the sale is fenced (stock.SaleInfo.Fence): Redis
	// lost it or went back in time and no edge has rebuilt it yet, so its
	// Redis figures are not to be trusted. An error.
	Fence string `json:"fence,omitempty"`

	// From Redis' meta: I, R, Rm (released: cancelled and expired), Pm
	// (paid), Em (expired, part of Rm) and Rem.
	Initial      int64 `json:"initial"`
	Restocked    int64 `json:"restocked"`
	ReleasedMeta int64 `json:"releasedMeta"`
	PaidMeta     int64 `json:"paidMeta"`
	ExpiredMeta  int64 `json:"expiredMeta"`
	Remaining    int64 `json:"remaining"`
	Limit        int   `json:"limit"`
	Deducted     int64 `json:"deducted"`
	Net          int64 `json:"net"`

	// From the ledger: orders and units by status.
	UnpaidOrders    int64  `json:"unpaidOrders"` // status 0
	UnpaidUnits     int64  `json:"unpaidUnits"`
	PaidOrders      int64  `json:"paidOrders"` // status 1
	PaidUnits       int64  `json:"paidUnits"`
	CancelledOrders int64  `json:"cancelledOrders"` // status 2 by a cancel
	CancelledUnits  int64  `json:"cancelledUnits"`
	ExpiredOrders   int64  `json:"expiredOrders"` // status 2 by the pay deadline
	ExpiredUnits    int64  `json:"expiredUnits"`
	DuplicateRows   int64  `json:"duplicateRows"`
	MaxUser         string `json:"maxUser,omitempty"`
	MaxUserUnits    int64  `json:"maxUserUnits"`

	OutboxEntries int64 `json:"outboxEntries"` // XLEN sk:{p}:outbox
	PendingUnits  int64 `json:"pendingUnits"`  // P

	Oversold   int64 `json:"oversold"`
	Lost       int64 `json:"lost"`
	Duplicated int64 `json:"duplicated"`
}

// HeldUnits are the ledger's units that keep stock (S: unpaid and paid),
// ReleasedUnits those that went back (X: cancelled and expired).
func (p *Product) HeldUnits() int64     { return p.UnpaidUnits + p.PaidUnits }
func (p *Product) ReleasedUnits() int64 { return p.CancelledUnits + p.ExpiredUnits }
func (p *Product) heldOrders() int64    { return p.UnpaidOrders + p.PaidOrders }
func (p *Product) releasedOrders() int64 {
	return p.CancelledOrders + p.ExpiredOrders
}

// Report is the outcome of Run.
type Report struct {
	Products   []Product `json:"products"`
	Oversold   int64     `json:"oversold"`
	Lost       int64     `json:"lost"`
	Duplicated int64     `json:"duplicated"`
	// Missing lists the products the ledger has rows for and Redis has no
	// stock key for (Product.Missing).
	Missing []string `json:"missing,omitempty"`
	// Fenced lists the products still fenced (Product.Fence).
	Fenced []string `json:"fenced,omitempty"`
	// Drained is false when WithDrain's wait failed: lost is then an
	// upper bound (events may still be in Kafka).
	Drained  bool          `json:"drained"`
	DrainErr error         `json:"-"`
	Took     time.Duration `json:"tookNs"`
}

// Clean reports whether all totals are zero, no product the ledger knows is
// missing from Redis, and the pipeline drained.
func (r *Report) Clean() bool {
	return r.Oversold == 0 && r.Lost == 0 && r.Duplicated == 0 && len(r.Missing) == 0 && len(r.Fenced) == 0 && r.Drained
}

// Err is nil for a clean report.
func (r *Report) Err() error {
	switch {
	case !r.Drained:
		return fmt.Errorf("reconcile: pipeline not drained (%v): oversold=%d lost=%d duplicated=%d", r.DrainErr, r.Oversold, r.Lost, r.Duplicated)
	case len(r.Missing) > 0:
		return fmt.Errorf("reconcile: %d product(s) with stored orders have no stock key in Redis (lost, not rebuilt): %s; oversold=%d lost=%d duplicated=%d",
			len(r.Missing), strings.Join(r.Missing, ", "), r.Oversold, r.Lost, r.Duplicated)
	case len(r.Fenced) > 0:
		return fmt.Errorf("reconcile: %d product(s) fenced, not rebuilt from the ledger yet (Redis lost them or went back in time): %s; oversold=%d lost=%d duplicated=%d",
			len(r.Fenced), strings.Join(r.Fenced, ", "), r.Oversold, r.Lost, r.Duplicated)
	case !r.Clean():
		return fmt.Errorf("reconcile: oversold=%d lost=%d duplicated=%d", r.Oversold, r.Lost, r.Duplicated)
	}
	return nil
}

// Option tunes Run.
type Option func(*options)

type options struct {
	drain        func(context.Context) error
	drainTimeout time.Duration
	retry        time.Duration
	poll         time.Duration
}

// WithDrain makes Run wait (at most timeout, 0 = ctx's deadline) for wait
// to return nil before counting: pass the consumer's Drained (or a closure
// over consumer.WaitDrained) so that events still in Kafka are stored, not
// counted lost.
func WithDrain(wait func(ctx context.Context) error, timeout time.Duration) Option {
	return func(o *options) { o.drain, o.drainTimeout = wait, timeout }
}

// WithRetry makes Run count again every poll (default 200ms) while the
// totals are not zero, for at most retry: a pipeline still working (an
// outbox sweep, a consumer batch) finishes instead of failing the check.
func WithRetry(retry, poll time.Duration) Option {
	return func(o *options) { o.retry, o.poll = retry, poll }
}

// PendingFunc returns the units of one product's events that are on their
// way to the ledger but not stored (P in the package doc).
type PendingFunc func(ctx context.Context, productID string) (int64, error)

// Run reconciles the products (nil: every product the ledger knows).
// pending nil means OutboxPending(st, store). The error is non-nil when a
// total is not zero, the pipeline did not drain, or a source failed; the
// report is filled as far as it got.
func Run(ctx context.Context, st *stock.Store, store orderstore.Store, products []string, pending PendingFunc, opts ...Option) (Report, error) {
	start := time.Now()
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.poll <= 0 {
		o.poll = 200 * time.Millisecond
	}
	if pending == nil {
		pending = OutboxPending(st, store)
	}
	rep := Report{Drained: true}
	if o.drain != nil {
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if o.drainTimeout > 0 {
			dctx, cancel = context.WithTimeout(ctx, o.drainTimeout)
		}
		if err := o.drain(dctx); err != nil {
			rep.Drained, rep.DrainErr = false, err
		}
		cancel()
	}
	if products == nil {
		var err error
		if products, err = store.Products(ctx); err != nil {
			return rep, fmt.Errorf("reconcile: %w", err)
		}
	}
	deadline := time.Now().Add(o.retry)
	for {
		drained, derr := rep.Drained, rep.DrainErr
		rep = Report{Drained: drained, DrainErr: derr}
		for _, p := range products {
			pr, err := check(ctx, st, store, p, pending)
			if err != nil {
				rep.Took = time.Since(start)
				return rep, fmt.Errorf("reconcile %s: %w", p, err)
			}
			rep.Products = append(rep.Products, pr)
			if pr.Missing {
				rep.Missing = append(rep.Missing, p)
			}
			if pr.Fence != "" {
				rep.Fenced = append(rep.Fenced, p)
			}
			rep.Oversold += pr.Oversold
			rep.Lost += pr.Lost
			rep.Duplicated += pr.Duplicated
		}
		if rep.Clean() || !time.Now().Add(o.poll).Before(deadline) {
			break
		}
		t := time.NewTimer(o.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			rep.Took = time.Since(start)
			return rep, errors.Join(ctx.Err(), rep.Err())
		case <-t.C:
		}
	}
	rep.Took = time.Since(start)
	return rep, rep.Err()
}

func check(ctx context.Context, st *stock.Store, store orderstore.Store, p string, pending PendingFunc) (Product, error) {
	pr := Product{ProductID: p}
	tot, err := store.Totals(ctx, p)
	if err != nil {
		return pr, err
	}
	pr.UnpaidOrders, pr.UnpaidUnits, pr.PaidOrders, pr.PaidUnits = tot.UnpaidOrders, tot.UnpaidUnits, tot.PaidOrders, tot.PaidUnits
	pr.CancelledOrders, pr.CancelledUnits, pr.ExpiredOrders, pr.ExpiredUnits = tot.CancelledOrders, tot.CancelledUnits, tot.ExpiredOrders, tot.ExpiredUnits
	pr.DuplicateRows, pr.MaxUser, pr.MaxUserUnits = tot.Duplicates, tot.MaxUser, tot.MaxUserUnits

	info, ok, err := st.SaleInfo(ctx, p)
	if err != nil {
		return pr, err
	}
	if pr.OutboxEntries, err = st.OutboxLen(ctx, p); err != nil {
		return pr, err
	}
	if pr.PendingUnits, err = pending(ctx, p); err != nil {
		return pr, err
	}
	pr.Duplicated = pr.DuplicateRows
	pr.Fence = info.Fence
	if !ok {
		pr.Missing = pr.heldOrders()+pr.releasedOrders() > 0
		return pr, nil
	}
	pr.Warmed = true
	pr.Initial, pr.Restocked, pr.ReleasedMeta, pr.Remaining = info.Initial, info.Restocked, info.Released, info.Remaining
	pr.PaidMeta, pr.ExpiredMeta = info.Paid, info.Expired
	pr.Limit = info.Limit
	pr.Deducted = pr.Initial + pr.Restocked + pr.ReleasedMeta - pr.Remaining
	pr.Net = pr.Deducted - pr.ReleasedMeta
	x := pr.ReleasedUnits()
	f := max(0, pr.ReleasedMeta-x)
	held := pr.HeldUnits() + pr.PendingUnits - f

	pr.Oversold = max(0, -pr.Remaining) + max(0, held-(pr.Initial+pr.Restocked))
	if pr.Limit > 0 {
		pr.Oversold += max(0, pr.MaxUserUnits-int64(pr.Limit))
	}
	// Settlements Redis made that the ledger does not show: releases of
	// either reason (counted per reason, so an expiry stored as a cancel
	// shows too) and payments.
	cancelledMeta := pr.ReleasedMeta - pr.ExpiredMeta
	settled := max(0, pr.ExpiredMeta-pr.ExpiredUnits) + max(0, cancelledMeta-pr.CancelledUnits) + max(0, pr.PaidMeta-pr.PaidUnits)
	pr.Lost = max(0, pr.Net-held) + max(f, settled)
	pr.Duplicated += max(0, held-pr.Net) + max(0, x-pr.ReleasedMeta)
	return pr, nil
}

// outboxScanCap bounds the outbox entries OutboxPending looks up one by
// one in the store; beyond it every further entry counts as pending.
const outboxScanCap = 10_000

// OutboxPending is the default PendingFunc: the units of the product's
// outbox entries (stock.Store.OutboxOrders) whose order has no row in the
// store yet. (The edge deletes an entry once Kafka acknowledged its event;
// one the consumer already stored, still waiting for its delete, is not
// pending.)
func OutboxPending(st *stock.Store, store orderstore.Store) PendingFunc {
	return func(ctx context.Context, p string) (int64, error) {
		outbox, err := st.OutboxOrders(ctx, p)
		if err != nil {
			return 0, err
		}
		var units int64
		for i, o := range outbox {
			if i < outboxScanCap {
				if _, ok, err := store.Get(ctx, p, o.ID); err != nil {
					return 0, err
				} else if ok {
					continue
				}
			}
			units += int64(o.Qty)
		}
		return units, nil
	}
}

// Print writes one line per product, an ERROR line per product the ledger
// knows that has no stock key, then the totals line last:
// RECONCILE products=N oversold=X lost=Y duplicated=Z
func (r Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "product\tinitial\trestocked\treleased\tpaid\texpired\tremaining\tdeducted\t"+
		"unpaid\tpaid.units\tcancelled.units\texpired.units\toutbox\tpending\tmax/user\tlimit\toversold\tlost\tduplicated\t")
	for _, p := range r.Products {
		if !p.Warmed {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\tnot warmed\t-\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t-\t-\t-\t%d\t\n", p.ProductID,
				p.UnpaidUnits, p.PaidUnits, p.CancelledUnits, p.ExpiredUnits, p.OutboxEntries, p.PendingUnits, p.MaxUserUnits, p.Duplicated)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.ProductID,
			p.Initial, p.Restocked, p.ReleasedMeta, p.PaidMeta, p.ExpiredMeta, p.Remaining, p.Deducted,
			p.UnpaidUnits, p.PaidUnits, p.CancelledUnits, p.ExpiredUnits, p.OutboxEntries, p.PendingUnits, p.MaxUserUnits, p.Limit,
			p.Oversold, p.Lost, p.Duplicated)
	}
	tw.Flush()
	for _, p := range r.Products {
		if p.Missing {
			fmt.Fprintf(w, "ERROR: product %s: the ledger holds %d order(s) (%d released) but Redis has no stock key %s: the sale was lost and not rebuilt\n",
				p.ProductID, p.heldOrders()+p.releasedOrders(), p.releasedOrders(), stock.StockKey(p.ProductID))
		}
	}
	for _, p := range r.Products {
		if p.Fence != "" {
			fmt.Fprintf(w, "ERROR: product %s: fenced (%s): Redis lost the sale or went back in time and no edge has rebuilt it from the ledger yet\n",
				p.ProductID, p.Fence)
		}
	}
	if !r.Drained {
		fmt.Fprintf(w, "WARNING: pipeline not drained (%v): lost may count events still in Kafka\n", r.DrainErr)
	}
	fmt.Fprintf(w, "RECONCILE products=%d oversold=%d lost=%d duplicated=%d\n", len(r.Products), r.Oversold, r.Lost, r.Duplicated)
}
