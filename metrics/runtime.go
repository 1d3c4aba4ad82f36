package metrics

import (
	"os"
	"runtime"
	"runtime/debug"
	rtm "runtime/metrics"
	"sync"
	"time"
)

// The Go runtime's and the process's own figures, under the names the
// Prometheus Go client uses (go_*, process_*), so existing dashboards and
// alerts work unchanged, and the build-info series. Collecting them
// allocates nothing: runtime/metrics is read into samples made once (it
// does not stop the world, unlike runtime.ReadMemStats), and /proc/self/stat
// and /proc/self/fd are kept open and read again from the start into
// buffers made once. Outside Linux the process_* series other than the
// start time are left out (runtime_other.go).

// Build names the running binary for the build-info series.
type Build struct {
	Version   string // release version (-ldflags -X main.version=...), else the module version Go stamped
	Revision  string // VCS revision, "-dirty" when built from a modified tree; "unknown" without VCS data
	GoVersion string
}

// ReadBuild fills Build from the binary's embedded build info; version is
// the one set with -ldflags ("" or "dev": not set).
func ReadBuild(version string) Build {
	b := Build{Version: version, Revision: "unknown", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "unknown"
		}
		return b
	}
	if (b.Version == "" || b.Version == "dev") && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && b.Revision != "unknown" {
		b.Revision += "-dirty"
	}
	return b
}

// runtimeFamilies maps runtime/metrics names to exported families.
var runtimeFamilies = []struct{ metric, name, typ, help string }{
	{"/sched/goroutines:goroutines", "go_goroutines", "gauge", "Goroutines that currently exist."},
	{"/sched/threads/total:threads", "go_threads", "gauge", "OS threads the Go runtime owns."},
	{"/sched/gomaxprocs:threads", "go_sched_gomaxprocs_threads", "gauge", "GOMAXPROCS: OS threads that may run Go code at once."},
	{"/gc/cycles/total:gc-cycles", "go_gc_cycles_total", "counter", "Completed GC cycles."},
	{"/gc/heap/allocs:bytes", "go_gc_heap_allocs_bytes_total", "counter", "Bytes allocated on the heap."},
	{"/gc/heap/allocs:objects", "go_gc_heap_allocs_objects_total", "counter", "Objects allocated on the heap."},
	{"/gc/heap/goal:bytes", "go_gc_heap_goal_bytes", "gauge", "Heap size the current GC cycle aims to end at."},
	{"/gc/heap/live:bytes", "go_gc_heap_live_bytes", "gauge", "Heap memory marked live by the last GC."},
	{"/gc/gogc:percent", "go_gc_gogc_percent", "gauge", "The GOGC setting."},
	{"/gc/gomemlimit:bytes", "go_gc_gomemlimit_bytes", "gauge", "The GOMEMLIMIT setting."},
	{"/cpu/classes/gc/total:cpu-seconds", "go_cpu_classes_gc_total_cpu_seconds_total", "counter", "CPU time the GC used (the runtime's estimate)."},
	{"/sync/mutex/wait/total:seconds", "go_sync_mutex_wait_total_seconds_total", "counter", "Time goroutines spent blocked on a sync.Mutex, sync.RWMutex or runtime lock."},
	{"/memory/classes/heap/objects:bytes", "go_memstats_heap_alloc_bytes", "gauge", "Heap bytes in live and not yet swept objects (MemStats.HeapAlloc)."},
	{"/memory/classes/total:bytes", "go_memstats_sys_bytes", "gauge", "Bytes of memory the runtime got from the OS (MemStats.Sys)."},
}

// procOfSelf is the one reader of /proc/self per process: every registry
// (tests build many edges in one process) shares its two open files.
var procOfSelf = sync.OnceValue(openProcSelf)

// RegisterRuntime adds the go_* and process_* families and
// flashgate_build_info{version,revision,goversion} 1 to r.
func RegisterRuntime(r *Registry, b Build) {
	var mu sync.Mutex // the samples are shared by concurrent scrapes
	samples := make([]rtm.Sample, len(runtimeFamilies))
	for i, f := range runtimeFamilies {
		samples[i].Name = f.metric
	}
	rtm.Read(samples)
	for i, f := range runtimeFamilies {
		if samples[i].Value.Kind() == rtm.KindBad {
			continue // not in this Go version
		}
		r.Register(f.name, f.help, f.typ, func(w *Writer) {
			mu.Lock()
			s := samples[i : i+1]
			rtm.Read(s)
			var v float64
			switch s[0].Value.Kind() {
			case rtm.KindUint64:
				v = float64(s[0].Value.Uint64())
			case rtm.KindFloat64:
				v = s[0].Value.Float64()
			}
			mu.Unlock()
			w.Value(v)
		})
	}

	p := procOfSelf()
	page := float64(os.Getpagesize())
	start := float64(time.Now().UnixNano()) / 1e9 // without /proc: close enough, taken at start-up
	if bt, ok := bootTime(); ok {
		if _, _, _, st, ok := p.statFields(); ok {
			start = float64(bt) + float64(st)/clockTicks
		}
	}
	if _, _, _, _, ok := p.statFields(); ok {
		r.Register("process_cpu_seconds_total", "User and system CPU time the process used, in seconds.", "counter", func(w *Writer) {
			if cpu, _, _, _, ok := p.statFields(); ok {
				w.Value(float64(cpu) / clockTicks)
			}
		})
		r.Register("process_resident_memory_bytes", "Resident memory of the process, in bytes.", "gauge", func(w *Writer) {
			if _, _, rss, _, ok := p.statFields(); ok {
				w.Value(float64(rss) * page)
			}
		})
		r.Register("process_virtual_memory_bytes", "Virtual memory of the process, in bytes.", "gauge", func(w *Writer) {
			if _, vsize, _, _, ok := p.statFields(); ok {
				w.Value(float64(vsize))
			}
		})
	}
	if _, ok := p.openFDs(); ok {
		r.Register("process_open_fds", "Open file descriptors (sockets included).", "gauge", func(w *Writer) {
			if n, ok := p.openFDs(); ok {
				w.Value(float64(n))
			}
		})
		r.Register("process_max_fds", "The limit on open file descriptors (RLIMIT_NOFILE, soft).", "gauge", func(w *Writer) {
			if n, ok := maxFDs(); ok {
				w.Value(float64(n))
			}
		})
	}
	r.Register("process_start_time_seconds", "When the process started, in Unix seconds.", "gauge", func(w *Writer) { w.Value(start) })

	labels := []Label{{"version", b.Version}, {"revision", b.Revision}, {"goversion", b.GoVersion}}
	r.Register("flashgate_build_info", "The running binary: version, VCS revision and Go version; always 1.", "gauge", func(w *Writer) {
		w.Value(1, labels...)
	})
}
