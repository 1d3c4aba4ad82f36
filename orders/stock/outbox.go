package stock

import (
	"context"
	"fmt"

	"flashgate/orders/order"
)

// RelayGroup is the consumer group of the outbox relay (package orders) on
// every product's outbox stream. AckOutbox acknowledges entries for it.
const RelayGroup = "relay"

// AckOutbox removes outbox entries whose order events Kafka acknowledged:
// XDEL from sk:{p}:outbox, then XACK for RelayGroup, pipelined in one round
// trip (same key, so same slot on a cluster).
//
// XDEL goes first: once the entry is gone no relay can take it into its
// pending list any more, and the XACK then drops it from a pending list it
// already reached. (Redis 7 would also drop a deleted id from the pending
// list on the relay's next XAUTOCLAIM; miniredis never does, so the XACK is
// what keeps the embedded server's pending list from growing.)
//
// Deleting an id that is already gone is not an error. On error the entries
// may or may not be gone: the relay re-sends what is left, and the
// consumer is idempotent, so the caller only logs it.
func (s *Store) AckOutbox(ctx context.Context, productID string, ids ...string) error {
	if !order.ValidProductID(productID) {
		return fmt.Errorf("%w: product %q", ErrInvalid, productID)
	}
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	key := OutboxKey(productID)
	res := s.c.DoMulti(ctx,
		s.c.B().Xdel().Key(key).Id(ids...).Build(),
		s.c.B().Xack().Key(key).Group(RelayGroup).Id(ids...).Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return fmt.Errorf("stock: ack outbox %s: %w", key, err)
		}
	}
	return nil
}
