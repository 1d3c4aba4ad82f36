package stock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestQueueTimeout: an attempt may wait in its product's queue longer than
// one call's budget (the edge saturated, or a call in flight that failed)
// and still be sent, up to Options.QueueTimeout; with QueueTimeout equal to
// Timeout the same attempts are dropped unsent. Redis is hung (SIGSTOP)
// while the first call is in flight and the others queue; it resumes once
// that call has timed out, so every queued attempt has waited more than
// one budget before it can be sent (MaxBatch 1: one per call).
func TestQueueTimeout(t *testing.T) {
	const budget = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		queue time.Duration
		sent  bool
	}{
		{"queue_timeout=timeout", budget, false},
		{"queue_timeout=10s", 10 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := openReal(t, Options{Timeout: budget, QueueTimeout: tc.queue, MaxBatch: 1})
			const product, n = "qt", 12
			warm(t, s, product, 100, 1)
			mustDeduct(t, s, attempt(product, "warmup", 1, 1)) // loads the script
			calls0, _ := s.Stats()

			srv.Pause()
			var first error
			firstDone := make(chan struct{})
			go func() {
				defer close(firstDone)
				_, first = s.Deduct(context.Background(), attempt(product, "u0", 1, 1))
			}()
			waitFor(t, func() bool { c, _ := s.Stats(); return c == calls0+1 }) // in flight, held
			var wg sync.WaitGroup
			outs := make([]Outcome, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() { outs[i], errs[i] = s.Deduct(context.Background(), attempt(product, "u"+strconv.Itoa(i+1), 1, 1)) })
			}
			p := s.product(product)
			waitFor(t, func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.pending) == n
			})
			queued := time.Now()
			<-firstDone
			srv.Resume()
			if !errors.Is(first, ErrCallFailed) {
				t.Fatalf("the held call: %v, want a timeout", first)
			}
			wg.Wait()
			waited := time.Since(queued)
			sent, dropped := 0, 0
			for i := range n {
				switch {
				case errs[i] == nil && outs[i].Code == OK:
					sent++
				case errors.Is(errs[i], ErrNotSent):
					dropped++
				default:
					t.Errorf("queued attempt %d: %v %v", i, outs[i], errs[i])
				}
			}
			t.Logf("%d queued attempts: %d answered OK, %d dropped unsent (queue %v, budget %v, last answered %v after queueing)", n, sent, dropped, tc.queue, budget, waited.Round(time.Millisecond))
			switch {
			case tc.sent && sent != n:
				t.Errorf("%d of %d queued attempts answered OK, want all: they waited past Timeout but within QueueTimeout", sent, n)
			case !tc.sent && dropped == 0:
				t.Errorf("no queued attempt dropped, want them unsent: they waited past QueueTimeout (%v)", tc.queue)
			}
		})
	}
}
