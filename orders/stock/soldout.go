package stock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// PublishSoldOut tells every edge (this one included) that a product is
// sold out, or available again after a restock or release. The flag it
// drives is an optimisation: the script stays the authority.
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
	if err := s.c.Do(ctx, s.c.B().Publish().Channel(SoldOutChannel).Message(msg).Build()).Error(); err != nil {
		return fmt.Errorf("stock: publish sold-out %s: %w", productID, err)
	}
	return nil
}

// SubscribeSoldOut calls fn for every sold-out broadcast until stop is
// called or the Store is closed. The process holds one Redis subscription
// however many callers subscribe; it is re-established after a connection
// loss. Broadcasts sent while disconnected are lost, so fn is also called
// with product "" each time the subscription is (re)established: the caller
// should then refresh its flags (Remaining). fn runs on the subscription's
// goroutine, must be quick and must not call stop.
//
// SubscribeSoldOut waits, at most until ctx is done, for the subscription
// to be confirmed, so that a broadcast published after it returns is seen;
// if ctx ends first it keeps trying in the background.
func (s *Store) SubscribeSoldOut(ctx context.Context, fn func(productID string, soldOut bool)) (stop func()) {
	s.subMu.Lock()
	if s.closed.Load() {
		s.subMu.Unlock()
		return func() {}
	}
	id := s.subSeq
	s.subSeq++
	s.subs[id] = fn
	var ready chan struct{}
	if s.subStop == nil {
		ready = make(chan struct{})
		rctx, cancel := context.WithCancel(context.Background())
		s.subStop, s.subDone = cancel, make(chan struct{})
		go s.receive(rctx, ready, s.subDone)
	}
	s.subMu.Unlock()
	if ready != nil {
		select {
		case <-ready:
		case <-ctx.Done():
		}
	}
	return func() {
		s.subMu.Lock()
		delete(s.subs, id)
		var cancel context.CancelFunc
		var done chan struct{}
		if len(s.subs) == 0 && s.subStop != nil {
			cancel, done = s.subStop, s.subDone
			s.subStop, s.subDone = nil, nil
		}
		s.subMu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	}
}

func (s *Store) stopSubscription() {
	s.subMu.Lock()
	cancel, done := s.subStop, s.subDone
	s.subStop, s.subDone = nil, nil
	clear(s.subs)
	s.subMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (s *Store) dispatch(product string, soldOut bool) {
	s.subMu.Lock()
	fns := make([]func(string, bool), 0, len(s.subs))
	for _, fn := range s.subs {
		fns = append(fns, fn)
	}
	s.subMu.Unlock()
	for _, fn := range fns {
		fn(product, soldOut)
	}
}

func (s *Store) receive(ctx context.Context, ready chan struct{}, done chan struct{}) {
	defer close(done)
	hook := func(sub rueidis.PubSubSubscription) {
		if sub.Kind != "subscribe" {
			return
		}
		if ready != nil {
			close(ready)
			ready = nil
		}
		s.dispatch("", false)
	}
	hctx := rueidis.WithOnSubscriptionHook(ctx, hook)
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		_ = s.c.Receive(hctx, s.c.B().Subscribe().Channel(SoldOutChannel).Build(), func(m rueidis.PubSubMessage) {
			if len(m.Message) < 2 {
				return
			}
			s.dispatch(m.Message[1:], m.Message[0] == '1')
		})
		if time.Since(start) > 5*time.Second {
			backoff = 10 * time.Millisecond // it was up for a while: retry fast
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
			backoff = min(backoff*2, time.Second)
		}
	}
}
