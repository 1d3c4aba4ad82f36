package proxy_test

import (
	"runtime"
	"strings"
	"testing"

	"flashgate/internal/edgetest"
)

// TestMetricsCarryRuntimeAndBuild: /metrics has the Go runtime's and the
// process's series and what binary is running, next to the edge's own.
func TestMetricsCarryRuntimeAndBuild(t *testing.T) {
	e := edgetest.Start(t, edgetest.WriteConfig(t, guardConfig), nil)
	code, body := adminCall{method: "GET", path: "/metrics"}.do(t, e.Admin)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	want := []string{"\ngo_goroutines ", "\ngo_gc_cycles_total ", "\ngo_memstats_heap_alloc_bytes ", "\nflashgate_http_requests_in_flight ",
		`,goversion="` + runtime.Version() + `"} 1` + "\n", "\nflashgate_build_info{version=\""}
	if runtime.GOOS == "linux" {
		want = append(want, "\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ", "\nprocess_open_fds ", "\nprocess_start_time_seconds ")
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
}
