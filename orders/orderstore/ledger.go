package orderstore

import (
	"context"
	"fmt"
	"maps"
)

// Ledger answers warm-up (sale.Ledger) from the store when a sale's Redis
// state is gone: what is sold, what was released, and what each buyer holds.
//
// Events not in the store yet would make it answer low, and a sale reopened
// with units that are already sold oversells. Drain (e.g. a consumer's
// Drained) is waited for before every read: it returns once the consumer
// group has stored everything published so far, so an event Kafka
// acknowledged before the call is counted. Events that may still be on
// their way to Kafka are the caller's to wait for (sale's recovery waits
// until every edge is quiet on the sale's fence).
//
// Events whose outbox entry survived (the embedded Redis keeps its outbox
// streams across a crash) are the caller's to count: Rebuild reports which
// of the order ids it is given are stored, consistently with the totals.
type Ledger struct {
	Store Store
	// Drain, if set, is waited for before every read.
	Drain func(ctx context.Context) error
}

// LedgerState is one product's ledger as Rebuild read it.
type LedgerState struct {
	Sold     int64            // units held: status-0 and -1 rows (unpaid and paid)
	Released int64            // units of status-2 rows (cancelled and expired)
	Orders   int64            // status-0 and -1 rows
	Paid     int64            // units of status-1 rows
	Expired  int64            // units of status-2 rows released by the deadline
	Buyers   map[string]int64 // held units per user
	// Statuses holds the stored ones of the order ids given to Rebuild,
	// as of the same read as the counts above.
	Statuses map[int64]OrderStatus
	// Deadlines is every unpaid row with a pay deadline (Store.Deadlines),
	// of the same read.
	Deadlines []Row
}

// rebuildTries bounds the reads Rebuild repeats while the ledger moves
// under it (an outbox relay storing events during the read).
const rebuildTries = 5

// Rebuild drains, then reads the product's ledger. orderIDs are orders the caller may count itself
// (outbox entries, surviving order hashes): State.Statuses says which of
// them are stored, and is consistent with the counts — when one of them is
// stored during the read, or any total moves, the read is repeated, so
// that an order is never counted both as stored and as pending, nor by
// neither.
func (l Ledger) Rebuild(ctx context.Context, productID string, orderIDs []int64) (LedgerState, error) {
	for range rebuildTries {
		if err := l.drain(ctx, productID); err != nil {
			return LedgerState{}, err
		}
		st, stable, err := l.read(ctx, productID, orderIDs)
		if err != nil || stable {
			return st, err
		}
	}
	return LedgerState{}, fmt.Errorf("orderstore: ledger of %s kept changing during %d reads", productID, rebuildTries)
}

// read takes the totals and the asked statuses before and after the
// buyers; stable reports that nothing moved in between.
func (l Ledger) read(ctx context.Context, productID string, orderIDs []int64) (st LedgerState, stable bool, err error) {
	t0, err := l.Store.Totals(ctx, productID)
	if err != nil {
		return st, false, err
	}
	s0, err := l.Store.Statuses(ctx, productID, orderIDs)
	if err != nil {
		return st, false, err
	}
	buyers, err := l.Store.Buyers(ctx, productID)
	if err != nil {
		return st, false, err
	}
	due, err := l.Store.Deadlines(ctx, productID)
	if err != nil {
		return st, false, err
	}
	s1, err := l.Store.Statuses(ctx, productID, orderIDs)
	if err != nil {
		return st, false, err
	}
	t1, err := l.Store.Totals(ctx, productID)
	if err != nil {
		return st, false, err
	}
	var sum int64
	for _, n := range buyers {
		sum += n
	}
	if t0 != t1 || !maps.Equal(s0, s1) || sum != t1.HeldUnits() || int64(len(due)) > t1.UnpaidOrders {
		return st, false, nil
	}
	return LedgerState{Sold: t1.HeldUnits(), Released: t1.ReleasedUnits(), Orders: t1.HeldOrders(),
		Paid: t1.PaidUnits, Expired: t1.ExpiredUnits, Buyers: buyers, Statuses: s1, Deadlines: due}, true, nil
}

func (l Ledger) drain(ctx context.Context, productID string) error {
	if l.Drain != nil {
		if err := l.Drain(ctx); err != nil {
			return fmt.Errorf("orderstore: ledger of %s: pipeline not drained: %w", productID, err)
		}
	}
	// What the drain stored is on one replica of its shard; a read may
	// reach another (a cluster with several replicas per shard).
	if r, ok := l.Store.(ReplicaSyncer); ok {
		if err := r.SyncReplicas(ctx); err != nil {
			return fmt.Errorf("orderstore: ledger of %s: %w", productID, err)
		}
	}
	return nil
}

// Sold is the units held (stored with status 0 or 1) for the product,
// after Drain.
func (l Ledger) Sold(ctx context.Context, productID string) (int64, error) {
	if err := l.drain(ctx, productID); err != nil {
		return 0, err
	}
	t, err := l.Store.Totals(ctx, productID)
	if err != nil {
		return 0, err
	}
	return t.HeldUnits(), nil
}

// Released is the units stored with status 2 for the product.
func (l Ledger) Released(ctx context.Context, productID string) (int64, error) {
	if r, ok := l.Store.(ReplicaSyncer); ok {
		if err := r.SyncReplicas(ctx); err != nil {
			return 0, fmt.Errorf("orderstore: ledger of %s: %w", productID, err)
		}
	}
	t, err := l.Store.Totals(ctx, productID)
	if err != nil {
		return 0, err
	}
	return t.ReleasedUnits(), nil
}
