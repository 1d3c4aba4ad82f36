package main

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"flashgate/proxy"
)

// testHooks applies the test-only flags -test-clock-offset and
// -test-redis-dial: faults the nemesis (bench run -s nemesis) injects
// into one edge that no outside tool can (faketime does not reach a Go
// binary, which reads the clock through the vDSO; a cluster client dials
// the node addresses the cluster announces, not a proxy in front of the
// seed list). Each is logged as a warning when set.
//
// The offset moves the edge's one clock (proxy.Options.Now: sale windows,
// purchase tokens, order creation times and pay deadlines, order ids,
// waiting and route rooms, the event streams). It does not move the
// timers and budgets measured on Go's monotonic clock, nor the times the
// outbox relays write to Redis (orders/stock/outbox.go), the deadline
// sweep (Redis' TIME) or the order pipeline's retries (orders/broker).
func testHooks(opts *proxy.Options, offset time.Duration, dial string, log *slog.Logger) error {
	if offset != 0 {
		if offset < -time.Hour || offset > time.Hour {
			return fmt.Errorf("-test-clock-offset %v: at most an hour either way", offset)
		}
		off := offset.Nanoseconds()
		opts.Now = func() int64 { return time.Now().UnixNano() + off }
		log.Warn("TEST ONLY: the edge's clock is offset (-test-clock-offset)", "offset", offset.String())
	}
	if dial == "" {
		return nil
	}
	m := map[string]string{}
	for _, pair := range strings.Split(dial, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !hostPort(from) || !hostPort(to) {
			return fmt.Errorf("-test-redis-dial: %q is not FROM=TO with two host:port", pair)
		}
		if _, dup := m[from]; dup {
			return fmt.Errorf("-test-redis-dial: %s mapped twice", from)
		}
		m[from] = to
	}
	opts.TestRedisDial = m
	log.Warn("TEST ONLY: Redis dials are redirected (-test-redis-dial)", "addresses", len(m))
	return nil
}

func hostPort(s string) bool {
	h, p, err := net.SplitHostPort(s)
	return err == nil && h != "" && p != ""
}
