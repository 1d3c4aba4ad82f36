package stock

import (
	"context"
	"testing"
	"time"
)

func TestBudgetCtx(t *testing.T) {
	t.Run("expires", func(t *testing.T) {
		b := newBudget(time.Now().Add(time.Millisecond))
		<-b.Done()
		if b.Err() != context.DeadlineExceeded {
			t.Fatalf("Err = %v", b.Err())
		}
		b.end()
		// A fired budget is never handed out again.
		for range 10 {
			n := newBudget(time.Now().Add(time.Hour))
			if n == b {
				t.Fatal("fired budget reused")
			}
			select {
			case <-n.Done():
				t.Fatal("fresh budget already done")
			default:
			}
			n.end()
		}
	})
	t.Run("stopped is reusable", func(t *testing.T) {
		b := newBudget(time.Now().Add(time.Hour))
		if dl, ok := b.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
			t.Fatalf("deadline %v %v", dl, ok)
		}
		b.end()
		if b.Err() != nil {
			t.Fatal(b.Err())
		}
		n := newBudget(time.Now().Add(20 * time.Millisecond))
		<-n.Done() // re-armed timer fires for the new deadline
		if n.Err() == nil {
			t.Fatal("no error after deadline")
		}
		n.end()
	})
}

// TestBudgetAllocs: a budget taken from the pool and returned allocates nothing.
func TestBudgetAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	newBudget(time.Now().Add(time.Hour)).end()
	if n := testing.AllocsPerRun(100, func() { newBudget(time.Now().Add(time.Hour)).end() }); n != 0 {
		t.Errorf("%v allocs per budget", n)
	}
}
