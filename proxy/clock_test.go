package proxy

import (
	"testing"
	"time"

	"flashgate/upstream"
)

// TestReqClockWall: Handle's wall time (the monotonic reading plus the
// clocks' offset) agrees with time.Now, and a stale or wrong offset — a
// wall clock stepped since it was taken — is taken anew once its period
// has passed.
func TestReqClockWall(t *testing.T) {
	var c reqClock
	c.reanchor(0)
	near := func(what string) {
		t.Helper()
		before := time.Now().UnixNano()
		w := c.wall(upstream.MonoNow())
		after := time.Now().UnixNano()
		if w < before-int64(time.Millisecond) || w > after+int64(time.Millisecond) {
			t.Fatalf("%s: wall %d not within a millisecond of [%d, %d]", what, w, before, after)
		}
	}
	near("anchored")

	// The wall clock stepped an hour since the offset was taken.
	c.offset.Add(int64(time.Hour))
	a := c.anchor.Load()
	if w := c.wall(time.Duration(a)); w-int64(time.Duration(a)) != c.offset.Load() {
		t.Fatalf("within the period the offset was not kept: %d", w)
	}
	c.wall(time.Duration(a) + reqClockAnchor + 1) // a request past the period
	near("after the step")
}
