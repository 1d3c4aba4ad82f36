package stock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

// TestRedisGone: a dead or hung Redis must produce an error within the
// budget, never a hang; a restarted, empty Redis closes the sale.
func TestRedisGone(t *testing.T) {
	const budget = 100 * time.Millisecond
	s, srv := openReal(t, Options{Timeout: budget})
	warm(t, s, "gone", 1000, 1000)
	mustDeduct(t, s, attempt("gone", "u", 1, 1000))

	check := func(name string) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := s.Deduct(context.Background(), attempt("gone", "u"+strconv.Itoa(i), 1, 1000))
				// The slack absorbs scheduling on a loaded 2-core CI box; a
				// hang would be rueidis' own timeouts, 10 s and more.
				if el := time.Since(start); el > budget+time.Second {
					t.Errorf("%s: answered after %v (budget %v)", name, el, budget)
				}
				if !errors.Is(err, ErrUnknown) && !errors.Is(err, ErrNotSent) {
					t.Errorf("%s: err %v, want unknown outcome or not sent", name, err)
				}
			}()
		}
		wg.Wait()
	}

	srv.Pause()
	check("paused")
	srv.Resume()
	// Not mustDeduct: the 100ms budget is tight on a loaded machine.
	if out := deductUntil(t, s, attempt("gone", "u", 1, 1000)); out.Code != OK {
		t.Fatalf("after resume: %v", out)
	}

	srv.Stop()
	check("killed")

	srv.Start() // empty: Redis lost its memory
	// The first calls may still hit the dead connection; poll until the
	// client has reconnected.
	if out := deductUntil(t, s, attempt("gone", "u", 1, 1000)); out.Code != NotReady {
		t.Fatalf("after memory loss: %v, want NOT_READY (stock must not be resurrected)", out.Code)
	}
	warm(t, s, "gone", 5, 1000)
	if out := deductUntil(t, s, attempt("gone", "u", 1, 1000)); out.Code != OK || out.Remaining > 4 {
		t.Fatalf("after re-warm: %+v", out)
	}
}

// deductUntil retries an attempt until it gets an answer (polling the
// condition "Redis answers again"), giving up after 10s. Each try uses a
// fresh token and order id: a timed-out try may have been deducted.
func deductUntil(t *testing.T, s *Store, a Attempt) Outcome {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := s.Deduct(context.Background(), a)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer: %v", err)
		}
		a = attempt(a.ProductID, a.UserID, a.Qty, a.Limit)
	}
}

func TestOpenUnreachable(t *testing.T) {
	srv := redistest.New(t)
	addr := srv.Addr()
	srv.Stop()
	start := time.Now()
	s, err := Open(context.Background(), addr, testOptions(Options{Timeout: 100 * time.Millisecond}))
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded without a server")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Open took %v to fail", el)
	}
}

func TestClosedStore(t *testing.T) {
	s, _ := openReal(t, Options{})
	warm(t, s, "cl", 10, 1)
	s.Close()
	if _, err := s.Deduct(context.Background(), attempt("cl", "u", 1, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Deduct after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
