package sale

import (
	"context"
	"time"

	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// The order's life after the purchase: a payment, a cancel, or the pay
// deadline settles it (one state-guarded script in Redis, stock.Store's
// Pay and Cancel, and the deadline sweep). What the edge does after Redis
// decided lives here: publish the settlement, tell the order's streams, and
// when units went back on sale, clear what the edges know (backOnSale).

// EventSink takes the events of settled orders to Kafka: the broker's
// Publisher. Publish re-sends an event (a retry, whose outbox entry the
// first call wrote); PublishAndAck also removes the outbox entry once Kafka
// acknowledged the event.
type EventSink interface {
	Publish(ctx context.Context, evs ...order.Event) error
	PublishAndAck(ctx context.Context, e order.Event, outboxID string) error
}

// Cancel releases an order that will not be fulfilled: one state-guarded
// script returns its units to stock and to the buyer's allowance (pending
// or success -> released; anything final -> nothing), then the release
// event goes to Kafka so the order store marks it cancelled, and every edge
// hears that the product has stock again. A cancel delivered twice returns
// stock once; a paid order is never released (its state answers paid). A
// cancel of an order already cancelled publishes its release event again:
// if the first cancel's publish failed, its retry must not be a dead end.
func (s *Service) Cancel(ctx context.Context, productID string, orderID int64) (stock.Settlement, error) {
	set, err := s.d.Store.Cancel(ctx, productID, orderID)
	if err != nil || set.Info.State != stock.StateReleased {
		return set, err
	}
	return set, s.settled(ctx, productID, set)
}

// Pay records the payment of an order. Paid (now, or before: a retry)
// publishes the paid event and waits for Kafka's acknowledgement; a payment
// at or after the deadline expires the order in the same script call, and
// then the release is published and the edge cleared here, as the sweep
// would have. A repeat of a paid order publishes its event again, so a
// retry after a failed publish is not a dead end (the store keeps one row
// per order whatever arrives twice). replayID (the payment provider's
// event id, "" for none) makes a provider's retry answer Replayed.
func (s *Service) Pay(ctx context.Context, productID string, orderID int64, replayID string, replayTTL time.Duration) (stock.Settlement, error) {
	set, err := s.d.Store.Pay(ctx, productID, orderID, replayID, replayTTL)
	if err != nil {
		return set, err
	}
	if set.Replayed {
		// The provider's retry of a call whose answer it did not get (or
		// a 503): the answer stays REPLAYED, but the paid event goes out
		// again, so that a publish that failed the first time is not left
		// to the relay alone.
		if set.Info.State == stock.StatePaid && s.d.Settlements != nil {
			if err := s.d.Settlements.Publish(ctx, set.Event()); err != nil {
				s.d.Log.Warn("paid event of a replayed webhook not acknowledged; left to the outbox relay", "product", productID, "order", orderID, "err", err)
			}
		}
		return set, nil
	}
	switch {
	case set.Info.State == stock.StatePaid:
		return set, s.settled(ctx, productID, set)
	case set.Info.State == stock.StateExpired && set.Changed:
		// Too late: this call fired the deadline.
		if err := s.settled(ctx, productID, set); err != nil {
			s.d.Log.Warn("expiry event not acknowledged; left to the outbox relay", "product", productID, "order", orderID, "err", err)
		}
	}
	return set, nil
}

// Swept is the deadline sweep's hook (deadline.Config.OnReleased): its
// releases put units back on sale. The sweep publishes the events and the
// sold-out clear itself, so this edge only forgets what it knew.
func (s *Service) Swept(productID string, _ []stock.Settlement) {
	s.backOnSale(context.Background(), productID, false)
}

// settled finishes a settlement Redis made (or found made, for a retry): a
// release clears the edges (backOnSale, with the broadcast), the event goes
// to Kafka (acknowledging its outbox entry when this call wrote it) and the
// streams waiting on the order hear its outcome.
func (s *Service) settled(ctx context.Context, productID string, set stock.Settlement) error {
	kind := stock.KindPaid
	switch set.Info.State {
	case stock.StateReleased:
		kind = stock.KindCancelled
	case stock.StateExpired:
		kind = stock.KindExpired
	}
	if kind != stock.KindPaid && set.Changed {
		s.backOnSale(ctx, productID, true)
	}
	if err := s.d.Store.PublishChange(ctx, productID, kind, set.Info.ID); err != nil {
		s.d.Log.Warn("settlement not pushed; the order's streams end at their deadline", "order", set.Info.ID, "err", err)
	}
	if s.d.Settlements == nil {
		return nil // the outbox relay delivers the event
	}
	ev := set.Event()
	if set.Changed {
		return s.d.Settlements.PublishAndAck(ctx, ev, set.OutboxID)
	}
	return s.d.Settlements.Publish(ctx, ev)
}

// backOnSale is the one place that clears what this edge knows about a
// product once units went back on sale (a cancel, a payment too late, the
// deadline sweep, a restock, or another edge's broadcast of one of them):
// the "at the limit" answers of the bought cache (by the product's
// generation, bumped first so that a shopper who sees the flag cleared does
// not meet an old answer), then the sold-out flag. broadcast tells the
// other edges, which do the same on hearing it; changed reports that the
// flag was set.
func (s *Service) backOnSale(ctx context.Context, productID string, broadcast bool) (changed bool) {
	st := s.d.Sales.StateOf(productID)
	st.BumpGeneration()
	changed = st.SetSoldOut(false)
	if broadcast {
		if err := s.d.Store.PublishSoldOut(ctx, productID, false); err != nil {
			s.d.Log.Warn("sold-out clear broadcast failed; other edges catch up on refresh", "product", productID, "err", err)
		}
	}
	return changed
}
