// Package metrics is a small Prometheus text-format exporter built for the
// request path: counters and histograms are plain atomics, so recording a
// sample allocates nothing and takes no lock. Families are registered with a
// collect function, which lets state owned elsewhere (filter verdicts that
// survive reloads, upstream health) be exported without copying it here.
// Writing a sample allocates nothing either. runtime.go adds the Go
// runtime's and the process's own series (go_*, process_*) and the build
// (flashgate_build_info).
package metrics
