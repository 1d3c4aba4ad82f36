package await

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	Until(t, 5*time.Second, "the third poll", func() bool { return n.Add(1) == 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("polled %d times, want 3 (it must stop as soon as the condition holds)", got)
	}
}

func TestPollGivesUpWithTheLastError(t *testing.T) {
	calls := 0
	start := time.Now()
	err := poll(30*time.Millisecond, func() error { calls++; return errors.New("still down") })
	if err == nil || err.Error() != "still down" {
		t.Fatalf("err %v, want the last error", err)
	}
	if time.Since(start) < 30*time.Millisecond || calls < 2 {
		t.Fatalf("gave up after %v and %d calls: before the bound", time.Since(start), calls)
	}
}
