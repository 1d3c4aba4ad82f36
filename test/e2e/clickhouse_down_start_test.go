package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

// TestEdgeStartWhileClickHouseDownFailsCleanly: an edge with the order
// consumer started while ClickHouse does not answer refuses to start with
// the order store named — it panicked instead (a nil *ClickHouse in the
// store interface, closed by the pipeline's clean-up), found by the nemesis
// (bench seed 108: an edge restarted during a ClickHouse kill).
func TestEdgeStartWhileClickHouseDownFailsCleanly(t *testing.T) {
	bin := buildProxy(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there: ClickHouse is down
	cfg := writeConfig(t, fmt.Sprintf("redis: {addr: %q}\nclickhouse: {addr: %q}\norders: {consumer: true}\n", redistest.Start(t), closed))
	code, _, stderr := runProxy(t, time.Minute, bin, "-c", cfg)
	if code != 1 || strings.Contains(stderr, "panic") || !strings.Contains(stderr, "order store") {
		t.Fatalf("exit %d, want 1 naming the order store, no panic; stderr:\n%s", code, stderr)
	}
}
