package proxy

import (
	"sync/atomic"
	"time"

	"flashgate/upstream"
)

// reqClock is Handle's clock: one monotonic read per reading, where
// time.Now reads the wall clock and the monotonic clock both (two vDSO
// calls, ~25 ns each on a KVM clock). A request needs the monotonic time
// for its latency and the wall time as its NowNano (the filters' rate
// limits and session expiry, the sale's phase, token expiry and order
// time); the wall time is the monotonic reading plus the
// offset between the two clocks, taken from a time.Now at most
// reqClockAnchor ago. A step or slew of the wall clock is seen within that
// period; in between the wall time is off by at most the slew over it
// (NTP slews at most 500 ppm: 50 µs per 100 ms).
type reqClock struct {
	// anchor is the monotonic time (upstream.MonoNow) of the offset's
	// reading; offset is wall nanoseconds minus that monotonic time.
	anchor atomic.Int64
	offset atomic.Int64
}

const reqClockAnchor = 100 * time.Millisecond

// wall returns the wall time in Unix nanoseconds at the monotonic time m
// (a reading of mono).
func (c *reqClock) wall(m time.Duration) int64 {
	a := c.anchor.Load()
	if int64(m)-a > int64(reqClockAnchor) || a == 0 {
		c.reanchor(a)
	}
	return int64(m) + c.offset.Load()
}

// reanchor takes the offset anew; of requests that find it stale at once
// one reads the clocks.
func (c *reqClock) reanchor(old int64) {
	now := time.Now()
	m := int64(now.Sub(upstream.MonoBase)) // both readings of one time.Now
	if m == old || !c.anchor.CompareAndSwap(old, m) {
		return
	}
	c.offset.Store(now.UnixNano() - m)
}
