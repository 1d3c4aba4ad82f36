// Package metrics is a small Prometheus text-format exporter built for the
// request path: counters and histograms are plain atomics, so recording a
// sample allocates nothing and takes no lock. Families are registered with a
// collect function, which lets state owned elsewhere (filter verdicts that
// survive reloads, upstream health) be exported without copying it here.
package metrics
