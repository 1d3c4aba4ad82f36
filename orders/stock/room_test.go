package stock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/await"
)

// TestQueueTimeout: an attempt may wait in its product's queue longer than
// one call's budget and still be sent, up to Options.QueueTimeout; with a
// QueueTimeout shorter than its wait it is dropped unsent (ErrNotSent).
//
// Redis is hung (SIGSTOP) and MaxBatch is 1. The first calls in flight
// (inFlightPerProduct of them) are held and time out after one budget;
// the attempts queued behind them go next, one per call. With QueueTimeout
// 10s the next inFlightPerProduct of them are sent, still into the stall,
// and time out after a second budget; only then does Redis resume, so the
// rest have waited two budgets in the queue, and must be sent and answered.
// With QueueTimeout 50ms they are all dropped when the first calls fail.
func TestQueueTimeout(t *testing.T) {
	const budget = 200 * time.Millisecond
	const k = inFlightPerProduct
	for _, tc := range []struct {
		name  string
		queue time.Duration
	}{
		{"queue_timeout=50ms", 50 * time.Millisecond},
		{"queue_timeout=10s", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			long := tc.queue > 2*budget
			s, srv := openReal(t, Options{Timeout: budget, QueueTimeout: tc.queue, MaxBatch: 1})
			const product, n = "qt", 12
			warm(t, s, product, 100, 1)
			mustDeduct(t, s, attempt(product, "warmup", 1, 1)) // loads the script
			calls0, _ := s.Stats()

			srv.Pause()
			var held sync.WaitGroup
			heldErrs := make([]error, k)
			for i := range k {
				held.Go(func() { _, heldErrs[i] = s.Deduct(context.Background(), attempt(product, "h"+strconv.Itoa(i), 1, 1)) })
				await.Until(t, 10*time.Second, "the condition", func() bool { c, _ := s.Stats(); return c == calls0+uint64(i)+1 })
			}
			var wg sync.WaitGroup
			var failed atomic.Int32
			outs := make([]Outcome, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					outs[i], errs[i] = s.Deduct(context.Background(), attempt(product, "u"+strconv.Itoa(i+1), 1, 1))
					if errs[i] != nil && !errors.Is(errs[i], ErrNotSent) {
						failed.Add(1)
					}
				})
			}
			p := s.product(product)
			await.Until(t, 10*time.Second, "the condition", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.pending) == n
			})
			queued := time.Now()
			held.Wait()
			for i, err := range heldErrs {
				if !errors.Is(err, ErrCallFailed) {
					t.Fatalf("held call %d: %v, want a timeout", i, err)
				}
			}
			if long {
				// The second wave, sent into the stall, times out too.
				await.Until(t, 10*time.Second, "the condition", func() bool { return failed.Load() == k })
			}
			srv.Resume()
			wg.Wait()
			waited := time.Since(queued)
			sent, dropped, unknown := 0, 0, 0
			for i := range n {
				switch {
				case errs[i] == nil && outs[i].Code == OK:
					sent++
				case errors.Is(errs[i], ErrNotSent):
					dropped++
				case errors.Is(errs[i], ErrUnknown):
					unknown++
				default:
					t.Errorf("queued attempt %d: %v %v", i, outs[i], errs[i])
				}
			}
			t.Logf("%d queued attempts: %d answered OK, %d timed out in the stall, %d dropped unsent (queue %v, budget %v, all answered %v after queueing)",
				n, sent, unknown, dropped, tc.queue, budget, waited.Round(time.Millisecond))
			switch {
			case long && (sent != n-k || unknown != k):
				t.Errorf("%d OK, %d timed out, %d dropped; want %d OK (queued two budgets, within QueueTimeout) and %d timed out", sent, unknown, dropped, n-k, k)
			case !long && dropped != n:
				t.Errorf("%d of %d queued attempts dropped unsent, want all: they waited past QueueTimeout (%v)", dropped, n, tc.queue)
			}
		})
	}
}
