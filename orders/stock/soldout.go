package stock

import (
	"context"
	"fmt"
)

// PublishSoldOut tells every edge (this one included) that a product is
// sold out, or available again after a restock or release. The flag it
// drives is an optimisation: the script stays the authority. On Redis
// Cluster it goes to the product's own channel (SoldOutChannelOf), else to
// SoldOutChannel.
func (s *Store) PublishSoldOut(ctx context.Context, productID string, soldOut bool) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	msg := "0" + productID
	if soldOut {
		msg = "1" + productID
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	if err := s.c.Do(ctx, s.publishCmd(soldOutKind, productID, msg)).Error(); err != nil {
		return fmt.Errorf("stock: publish sold-out %s: %w", productID, err)
	}
	return nil
}

// SubscribeSoldOut calls fn for every sold-out broadcast of the products
// fol follows until the subscription is stopped or the Store is closed.
// The process holds one Redis subscription per channel however many
// callers subscribe; it is re-established after a connection loss or a
// failover. Broadcasts sent while a channel was not subscribed are lost:
// fol.Missed is called each time one is (re)established, and the caller
// should then refresh its flags (Remaining). See Follow and Subscription
// for where and how the callbacks run.
//
// SubscribeSoldOut waits, at most until ctx is done, for the channels to be
// confirmed, so that a broadcast published after it returns is seen; if ctx
// ends first it keeps trying in the background.
func (s *Store) SubscribeSoldOut(ctx context.Context, fol Follow, fn func(productID string, soldOut bool)) *Subscription {
	return s.subscribe(ctx, &s.soldOutSubs, soldOutKind, fol, func(msg string) {
		if len(msg) < 2 {
			return
		}
		fn(msg[1:], msg[0] == '1')
	})
}
