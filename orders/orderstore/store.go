package orderstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"flashgate/orders/order"
)

// Row statuses: the seed's meaning of the order table's status column.
//
// Rows written before orders had a pay deadline carry status 1: an order
// was final once stored, which is what paid means now (kept for good).
const (
	StatusUnpaid    uint8 = 0 // stored, the unit held until it is paid, cancelled or its deadline passes
	StatusPaid      uint8 = 1 // paid: kept for good
	StatusCancelled uint8 = 2 // released (Expired says whether by the deadline): the units went back to stock
)

// Row is one order as stored: the order (ClickHouse keeps its CreatedMs
// in seconds, create_time DateTime; PayByMs in milliseconds, pay_by_ms),
// its status and its version.
type Row struct {
	order.Order
	Status uint8
	// PaidMs is when the payment was accepted (status 1; 0 for rows that
	// predate payments). ClickHouse keeps it to the second (pay_time).
	PaidMs int64
	// Expired marks a status-2 row released by the pay deadline rather
	// than by a cancel.
	Expired   bool
	UpdatedMs int64 // the version: the newest row of an order wins
}

// Totals are one product's counts after FINAL (one row per order).
type Totals struct {
	UnpaidOrders, UnpaidUnits       int64 // status 0
	PaidOrders, PaidUnits           int64 // status 1
	CancelledOrders, CancelledUnits int64 // status 2 released by a cancel
	ExpiredOrders, ExpiredUnits     int64 // status 2 released by the deadline
	// Duplicates is the number of rows beyond one per order id; the
	// table's key makes it 0 unless the table is broken. Reconcile
	// reports it.
	Duplicates int64
	// MaxUser is the user with the most units held (status 0 and 1 rows)
	// and MaxUserUnits those units ("" and 0 without orders); reconcile
	// compares them with the sale's per-user limit.
	MaxUser      string
	MaxUserUnits int64
}

// HeldOrders and HeldUnits are the orders and units that keep stock:
// unpaid and paid.
func (t *Totals) HeldOrders() int64 { return t.UnpaidOrders + t.PaidOrders }
func (t *Totals) HeldUnits() int64  { return t.UnpaidUnits + t.PaidUnits }

// ReleasedOrders and ReleasedUnits are the orders and units that went
// back to stock: cancelled and expired.
func (t *Totals) ReleasedOrders() int64 { return t.CancelledOrders + t.ExpiredOrders }
func (t *Totals) ReleasedUnits() int64  { return t.CancelledUnits + t.ExpiredUnits }

// OrderStatus is what the ledger says of one stored order.
type OrderStatus struct {
	Status  uint8
	Expired bool  // status 2 by the deadline
	PayByMs int64 // the pay deadline, 0 = none
	PaidMs  int64 // status 1: when it was paid (to the second in ClickHouse)
}

func (r *Row) orderStatus() OrderStatus {
	return OrderStatus{Status: r.Status, Expired: r.Expired, PayByMs: r.PayByMs, PaidMs: r.PaidMs}
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
	// Buyers is, per user, the units of the product's status-0 and -1 rows
	// (after FINAL; users whose orders were all released are absent).
	// Warm-up restores the buyers' counts from it after Redis lost them.
	Buyers(ctx context.Context, productID string) (map[string]int64, error)
	// Statuses is the status of each of the given orders of the product
	// that is stored; orders without a row are absent from the map.
	Statuses(ctx context.Context, productID string, orderIDs []int64) (map[int64]OrderStatus, error)
	// Deadlines is every unpaid (status 0) row of the product with a pay
	// deadline, sorted by deadline then order id: warm-up re-creates their
	// deadlines in Redis (overdue ones too: the sweep releases them).
	Deadlines(ctx context.Context, productID string) ([]Row, error)
	// Settled is one page of the product's settled rows (status 1 paid and
	// 2 cancelled or expired), by order id: those above afterID, at most
	// limit (> 0). A rebuild pages through them (afterID = the last id of
	// the page before, 0 first; a short page is the last) to give every
	// order hash a Redis restored from an old snapshot may still hold as
	// unpaid the ledger's final state.
	Settled(ctx context.Context, productID string, afterID int64, limit int) ([]Row, error)
	// Rows is one page of every row of the product, whatever its status,
	// by order id, paged as Settled is: the sale report reads the whole
	// sale's story from it.
	Rows(ctx context.Context, productID string, afterID int64, limit int) ([]Row, error)
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
	case r.Status > StatusCancelled:
		return fmt.Errorf("%w: order %d: status %d", ErrInvalidRow, r.ID, r.Status)
	case r.Expired && r.Status != StatusCancelled:
		return fmt.Errorf("%w: order %d: expired with status %d", ErrInvalidRow, r.ID, r.Status)
	case r.PaidMs != 0 && r.Status != StatusPaid:
		return fmt.Errorf("%w: order %d: pay time with status %d", ErrInvalidRow, r.ID, r.Status)
	case r.CreatedMs/1000 > 1<<32-1 || r.UpdatedMs < 0 || r.PaidMs < 0 || r.PaidMs/1000 > 1<<32-1:
		return fmt.Errorf("%w: order %d: times %d/%d/%d", ErrInvalidRow, r.ID, r.CreatedMs, r.UpdatedMs, r.PaidMs)
	}
	return nil
}

// FromEvent is the row an event stores, versioned by
// order.Event.StoreVersion: an order's version is its creation time, a
// settlement's (paid, release) its time and always above the order's, so
// that the settlement wins even when the order is delivered again after it
// (an outbox re-send). Redis never lets one order be both paid and
// released, so the two settlements never compete.
func FromEvent(e *order.Event) Row {
	r := Row{Order: e.Order, Status: StatusUnpaid, UpdatedMs: e.StoreVersion()}
	switch e.Type {
	case order.TypePaid:
		r.Status, r.PaidMs = StatusPaid, e.PaidMs
	case order.TypeRelease:
		r.Status, r.Expired = StatusCancelled, e.Expired()
	}
	return r
}

// sortDeadlines orders rows by deadline, then order id (Deadlines' order).
func sortDeadlines(rows []Row) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].PayByMs != rows[j].PayByMs {
			return rows[i].PayByMs < rows[j].PayByMs
		}
		return rows[i].ID < rows[j].ID
	})
}

// Newer reports whether a replaces b under ReplacingMergeTree's rule: the
// higher version wins, and of equal versions the later inserted one.
func Newer(a, b *Row) bool { return a.UpdatedMs >= b.UpdatedMs }
