package orderstore

import (
	"context"
	"errors"
	"fmt"

	"flashgate/orders/order"
)

// Row statuses.
const (
	StatusStored   uint8 = 1 // the order is stored: the shopper's purchase succeeded
	StatusReleased uint8 = 2 // the order's units went back to stock
)

// Row is one order as stored: the order (ClickHouse keeps its CreatedMs
// in seconds, create_time DateTime), its status and its version.
type Row struct {
	order.Order
	Status    uint8
	UpdatedMs int64 // the version: the newest row of an order wins
}

// Totals are one product's counts after FINAL (one row per order).
type Totals struct {
	Orders, Units                 int64 // status 1
	ReleasedOrders, ReleasedUnits int64 // status 2
	// Duplicates is the number of rows beyond one per order id; the
	// table's key makes it 0 unless the table is broken. Reconcile
	// reports it.
	Duplicates int64
	// MaxUser is the user with the most units in status-1 rows and
	// MaxUserUnits those units ("" and 0 without orders); reconcile
	// compares them with the sale's per-user limit.
	MaxUser      string
	MaxUserUnits int64
}

// Store is the order ledger. Implementations are safe for concurrent use.
type Store interface {
	// Insert stores rows. It is idempotent: inserting a row again, or an
	// older version of an order, changes nothing anyone reads. On error
	// some rows may be stored; the caller retries the whole batch.
	Insert(ctx context.Context, rows []Row) error
	// Get reads the newest row of one order.
	Get(ctx context.Context, productID string, orderID int64) (Row, bool, error)
	// Totals counts one product's orders by status.
	Totals(ctx context.Context, productID string) (Totals, error)
	// Products lists the products with at least one row, sorted.
	Products(ctx context.Context) ([]string, error)
	// Buyers is, per user, the units of the product's status-1 rows (after
	// FINAL; users whose orders were all released are absent). Warm-up
	// restores the buyers' counts from it after Redis lost them.
	Buyers(ctx context.Context, productID string) (map[string]int64, error)
	// Statuses is the status of each of the given orders of the product
	// that is stored; orders without a row are absent from the map.
	Statuses(ctx context.Context, productID string, orderIDs []int64) (map[int64]uint8, error)
	// Catalog is the durable sale catalogue beside the ledger (catalog.go).
	Catalog
	Close() error
}

// ErrInvalidRow wraps every row a store refuses; retrying cannot help, the
// consumer dead-letters the event.
var ErrInvalidRow = errors.New("orderstore: invalid row")

// maxPriceCents is the first price Decimal(10,2) cannot hold.
const maxPriceCents = 10_000_000_000

// Validate checks the order (order.Order.Validate) and that the row fits
// the schema.
func (r *Row) Validate() error {
	if err := r.Order.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRow, err)
	}
	switch {
	case r.PriceCents >= maxPriceCents:
		return fmt.Errorf("%w: order %d: price %d cents does not fit Decimal(10,2)", ErrInvalidRow, r.ID, r.PriceCents)
	case r.Status != StatusStored && r.Status != StatusReleased:
		return fmt.Errorf("%w: order %d: status %d", ErrInvalidRow, r.ID, r.Status)
	case r.CreatedMs/1000 > 1<<32-1 || r.UpdatedMs < 0:
		return fmt.Errorf("%w: order %d: times %d/%d", ErrInvalidRow, r.ID, r.CreatedMs, r.UpdatedMs)
	}
	return nil
}

// FromEvent is the row an event stores. An order's version is its
// creation time; a release's is its release time, and always above the
// order's, so that the release wins even when the order is delivered
// again after it (an outbox re-send).
func FromEvent(e *order.Event) Row {
	r := Row{Order: e.Order, Status: StatusStored, UpdatedMs: e.CreatedMs}
	if e.Type == order.TypeRelease {
		r.Status = StatusReleased
		r.UpdatedMs = max(e.ReleasedMs, e.CreatedMs+1)
	}
	return r
}

// Newer reports whether a replaces b under ReplacingMergeTree's rule: the
// higher version wins, and of equal versions the later inserted one.
func Newer(a, b *Row) bool { return a.UpdatedMs >= b.UpdatedMs }
