package metrics

import (
	"bufio"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape returns r's text and its samples by series (name and labels).
func scrape(t *testing.T, r *Registry) (string, map[string]float64) {
	t.Helper()
	var sb strings.Builder
	if _, err := r.WriteTo(&sb); err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, line := range strings.Split(sb.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		vals[line[:i]] = v
	}
	return sb.String(), vals
}

func TestRuntimeAndProcessFamilies(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the process_* series read /proc")
	}
	var r Registry
	RegisterRuntime(&r, Build{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.99"})
	text, before := scrape(t, &r)
	for _, name := range []string{
		"go_goroutines", "go_threads", "go_gc_cycles_total", "go_gc_heap_allocs_bytes_total", "go_gc_heap_goal_bytes",
		"go_memstats_heap_alloc_bytes", "go_memstats_sys_bytes", "go_sched_gomaxprocs_threads",
		"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds", "process_start_time_seconds",
	} {
		if _, ok := before[name]; !ok {
			t.Errorf("no %s in\n%s", name, text)
		}
	}
	if !strings.Contains(text, "# TYPE go_gc_cycles_total counter\n") || !strings.Contains(text, "# TYPE go_goroutines gauge\n") {
		t.Error("families typed wrongly")
	}
	if v := before[`flashgate_build_info{version="v1.2.3",revision="abc123",goversion="go1.99"}`]; v != 1 {
		t.Errorf("build info: %v in\n%s", v, text)
	}
	if v := before["go_sched_gomaxprocs_threads"]; v != float64(runtime.GOMAXPROCS(0)) {
		t.Errorf("gomaxprocs %v, want %d", v, runtime.GOMAXPROCS(0))
	}
	if st := before["process_start_time_seconds"]; st > float64(time.Now().Unix())+1 || st < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("start time %v is not this test's process", st)
	}
	if rss := before["process_resident_memory_bytes"]; rss < 1<<20 {
		t.Errorf("resident memory %v bytes", rss)
	}

	// The figures move with what the process does.
	var files []*os.File
	for range 5 {
		f, err := os.Open(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	stop := make(chan struct{})
	for range 50 {
		go func() { <-stop }()
	}
	sink := make([][]byte, 0, 1000)
	for range 1000 {
		sink = append(sink, make([]byte, 1024))
	}
	runtime.GC()
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // CPU for process_cpu_seconds_total (10 ms ticks)
	}
	_, after := scrape(t, &r)
	close(stop)
	for _, f := range files {
		f.Close()
	}
	if d := after["process_open_fds"] - before["process_open_fds"]; d != 5 {
		t.Errorf("open fds moved by %v after opening 5 files", d)
	}
	if d := after["go_goroutines"] - before["go_goroutines"]; d < 50 {
		t.Errorf("goroutines moved by %v after starting 50", d)
	}
	if d := after["go_gc_heap_allocs_bytes_total"] - before["go_gc_heap_allocs_bytes_total"]; d < 1000*1024 {
		t.Errorf("heap allocs moved by %v bytes after allocating 1 MB", d)
	}
	if after["go_gc_cycles_total"] <= before["go_gc_cycles_total"] {
		t.Error("GC cycles did not move after runtime.GC")
	}
	if after["process_cpu_seconds_total"] <= before["process_cpu_seconds_total"] {
		t.Errorf("CPU seconds did not move after 50 ms of spinning: %v", after["process_cpu_seconds_total"])
	}
	_ = sink
}

// TestCollectingAllocs: writing samples (values with labels,
// histograms) and collecting the runtime and process families allocate
// nothing, so a scrape every few seconds adds no garbage per series.
func TestCollectingAllocs(t *testing.T) {
	var r Registry
	RegisterRuntime(&r, ReadBuild("v1"))
	h := NewHistogram(LatencyBuckets)
	h.Observe(3 * time.Millisecond)
	r.Register("fg_latency_seconds", "Latency.", "histogram", func(w *Writer) { w.Histogram(h, Label{"route", "api"}) })
	r.Register("fg_requests_total", "Requests.", "counter", func(w *Writer) {
		w.Value(123456789, Label{"route", "api"}, Label{"code", "200"})
		w.Value(0.000123)
	})
	w := &Writer{w: bufio.NewWriter(io.Discard)}
	collect := func() {
		for _, f := range r.families {
			w.name = f.name
			f.collect(w)
		}
	}
	collect()
	if n := testing.AllocsPerRun(100, collect); n != 0 {
		t.Fatalf("%v allocations per collection of %d families", n, len(r.families))
	}
}

func TestReadBuild(t *testing.T) {
	b := ReadBuild("v2.0.1")
	if b.Version != "v2.0.1" || b.GoVersion != runtime.Version() || b.Revision == "" {
		t.Fatalf("%+v", b)
	}
	// Without -ldflags the version is the module's, or "dev" for a tree
	// Go stamped "(devel)"; never empty.
	if d := ReadBuild("dev"); d.Version == "" || d.Version == "(devel)" {
		t.Fatalf("%+v", d)
	}
}
