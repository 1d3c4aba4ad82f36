package orderstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"flashgate/orders/order"
)

// Ledger answers warm-up (sale.Ledger) from the store when a sale's Redis
// state is gone: what is sold, what was released, and what each buyer holds.
//
// Events not in the store yet would make it answer low, and a sale reopened
// with units that are already sold oversells. Rebuild reads the topic's
// uncommitted tail (Tail: the events the group has not committed, up to the
// end offsets at the start of the call) and returns it beside the store's
// counts, with the statuses of its orders read consistently with them, so
// that the caller counts the tail's events the store does not hold as on
// their way, as it counts the outbox's. Without Tail, or when the tail
// cannot be read, Drain (e.g. a consumer's Drained) is waited for before
// every read instead: it returns once the consumer group has stored
// everything published so far. Either way an event Kafka acknowledged
// before the call is counted, once. Waiting for the drain ties the
// reopening of a sale to the group's health — a consumer killed in the
// window holds its partitions until its session lapses and the group
// rebalances (bench/README finding 3: sales closed 8–30 s) — the tail does
// not. Events that may still be on their way to Kafka are the caller's to
// wait for (sale's recovery waits until every edge is quiet on the sale's
// fence).
//
// Events whose outbox entry survived (the embedded Redis keeps its outbox
// streams across a crash) are the caller's to count: Rebuild reports which
// of the order ids it is given are stored, consistently with the totals.
type Ledger struct {
	Store Store
	// Tail, if set, is the product's events the consumer group has not
	// committed (consumer.Tail): read once at the start of Rebuild instead
	// of waiting for Drain. An error (the brokers unreachable) falls back
	// to Drain: the ledger never guesses.
	Tail func(ctx context.Context, productID string) ([]order.Event, error)
	// Drain, if set, is waited for before every read Tail does not stand
	// in for.
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
	// Tail is the product's events of the topic's uncommitted tail, read
	// before the counts (Ledger.Tail; nil when Rebuild drained instead).
	// Statuses holds the stored ones of its orders too: an event whose
	// order is not in Statuses was not stored as of the counts, and is the
	// caller's to count, as an outbox entry is. Events may repeat (a
	// producer's retry).
	Tail []order.Event
	// TailRead reports that Tail stands in for the drain (false: Rebuild
	// drained).
	TailRead bool
}

// rebuildTries bounds the reads Rebuild repeats while the ledger moves
// under it (an outbox relay storing events during the read).
const rebuildTries = 5

// Rebuild reads the topic's tail (or, without it, drains), then reads the
// product's ledger. orderIDs are orders the caller may count itself
// (outbox entries, surviving order hashes): State.Statuses says which of
// them, and of the tail's orders, are stored, and is consistent with the counts — when one of them is
// stored during the read, or any total moves, the read is repeated, so
// that an order is never counted both as stored and as pending, nor by
// neither.
//
// The tail is read once, before the counts: an event of it stored since is
// in Statuses (asked for every order of the tail), an event published
// after it is not the ledger's to know — the caller read the outbox before
// (an entry gone from it by then was acknowledged, so it is below the end
// offsets) and waited for the edges to be quiet. A read repeated because
// the ledger moved needs no new tail: the store only gains events of it.
// When it keeps moving (a live consumer storing the tail), Rebuild waits
// for the drain after all, as without a tail.
func (l Ledger) Rebuild(ctx context.Context, productID string, orderIDs []int64) (LedgerState, error) {
	if l.Tail != nil {
		tail, err := l.Tail(ctx, productID)
		if err != nil {
			st, derr := l.rebuildDrained(ctx, productID, orderIDs)
			if derr != nil {
				derr = fmt.Errorf("%w (and the topic's tail could not be read: %v)", derr, err)
			}
			return st, derr
		}
		ids := orderIDs
		if len(tail) > 0 {
			ids = withTail(orderIDs, tail)
		}
		// The consumer may be storing the tail while the ledger is read
		// (a live member behind, not a dead one): the read is repeated,
		// a little later each time, so that a batch it stores is seen
		// whole.
		for try := range rebuildTries {
			if try > 0 && !pause(ctx, time.Duration(try)*tailRetryPause) {
				return LedgerState{}, ctx.Err()
			}
			if err := l.syncReplicas(ctx, productID); err != nil {
				return LedgerState{}, err
			}
			st, stable, err := l.read(ctx, productID, ids)
			if err != nil || stable {
				st.Tail, st.TailRead = tail, true
				return st, err
			}
		}
		if l.Drain == nil {
			return LedgerState{}, fmt.Errorf("orderstore: ledger of %s kept changing during %d reads", productID, rebuildTries)
		}
		// Still storing: a live consumer is working through the tail, and
		// its drain will end; wait for it, as without a tail.
	}
	return l.rebuildDrained(ctx, productID, orderIDs)
}

// tailRetryPause is the pause before the second read of a ledger that
// moved under the tail's rebuild; each next one waits one more.
const tailRetryPause = 50 * time.Millisecond

func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// rebuildDrained is Rebuild without the tail: it drains before every read.
func (l Ledger) rebuildDrained(ctx context.Context, productID string, orderIDs []int64) (LedgerState, error) {
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

// Settled is one page of the product's settled rows (Store.Settled), read
// without another drain: a rebuild reads them after Rebuild, while the
// sale is fenced and nothing can be settled in Redis; the settlements the
// store gains meanwhile are the outbox's and the tail's, which the rebuild
// writes too.
func (l Ledger) Settled(ctx context.Context, productID string, afterID int64, limit int) ([]Row, error) {
	return l.Store.Settled(ctx, productID, afterID, limit)
}

// withTail is ids and the tail's order ids, once each, sorted.
func withTail(ids []int64, tail []order.Event) []int64 {
	all := make(map[int64]bool, len(ids)+len(tail))
	for _, id := range ids {
		all[id] = true
	}
	for i := range tail {
		all[tail[i].ID] = true
	}
	out := make([]int64, 0, len(all))
	for id := range all {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Statuses is the stored ones of the product's orders ids, read without a
// drain: a rebuild asks it after writing, for the tail's orders it made
// pending, which the consumer may have stored meanwhile (sale's
// markStoredTail).
func (l Ledger) Statuses(ctx context.Context, productID string, ids []int64) (map[int64]OrderStatus, error) {
	if err := l.syncReplicas(ctx, productID); err != nil {
		return nil, err
	}
	return l.Store.Statuses(ctx, productID, ids)
}

func (l Ledger) drain(ctx context.Context, productID string) error {
	if l.Drain != nil {
		if err := l.Drain(ctx); err != nil {
			return fmt.Errorf("orderstore: ledger of %s: pipeline not drained: %w", productID, err)
		}
	}
	return l.syncReplicas(ctx, productID)
}

func (l Ledger) syncReplicas(ctx context.Context, productID string) error {
	// What the consumer stored is on one replica of its shard; a read may
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
