package consumer

import (
	"testing"
	"time"
)

// TestFillTime: a batch collects for its batch time less what its first
// message may have waited in the broker, and never for less than a tenth
// of its batch time — a quiet sale's order (batch time 50 ms, fetches
// waiting 50 ms) waits at most 55 ms in all; fetches that return at once
// leave the batch time whole.
func TestFillTime(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct{ window, wait, want time.Duration }{
		{50 * ms, 0, 50 * ms},
		{50 * ms, 50 * ms, 5 * ms},
		{50 * ms, 200 * ms, 5 * ms},
		{100 * ms, 50 * ms, 50 * ms},
		{400 * ms, 50 * ms, 350 * ms},
	} {
		if got := fillTime(c.window, c.wait); got != c.want {
			t.Errorf("fillTime(%v, %v) = %v, want %v", c.window, c.wait, got, c.want)
		}
	}
}
