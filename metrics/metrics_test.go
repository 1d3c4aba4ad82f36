package metrics

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestTextFormat(t *testing.T) {
	var r Registry
	var c Counter
	c.Add(3)
	h := NewHistogram([]float64{0.001, 0.01})
	h.Observe(500 * time.Microsecond)
	h.Observe(5 * time.Millisecond)
	h.Observe(time.Second)
	r.Register("fg_requests_total", "Requests.", "counter", func(w *Writer) {
		w.Value(float64(c.Value()), Label{"route", `a"b`})
	})
	r.Register("fg_latency_seconds", "Latency.", "histogram", func(w *Writer) { w.Histogram(h, Label{"pool", "p"}) })
	var sb strings.Builder
	if _, err := r.WriteTo(&sb); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{
		"# TYPE fg_requests_total counter\n",
		`fg_requests_total{route="a\"b"} 3` + "\n",
		`fg_latency_seconds_bucket{pool="p",le="0.001"} 1` + "\n",
		`fg_latency_seconds_bucket{pool="p",le="0.01"} 2` + "\n",
		`fg_latency_seconds_bucket{pool="p",le="+Inf"} 3` + "\n",
		`fg_latency_seconds_count{pool="p"} 3` + "\n",
		`fg_latency_seconds_sum{pool="p"} 1.0055` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Index(out, "fg_latency") > strings.Index(out, "fg_requests") {
		t.Error("families not sorted by name")
	}
}

func TestObserveAllocs(t *testing.T) {
	h := NewHistogram(LatencyBuckets)
	var c Counter
	if n := testing.AllocsPerRun(1000, func() { h.Observe(3 * time.Millisecond); c.Inc() }); n != 0 {
		t.Fatalf("allocs = %v", n)
	}
}

func TestQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.01, 0.1}
	for _, tc := range []struct {
		counts  []uint64
		q, want float64
	}{
		{[]uint64{0, 0, 0, 0}, 0.5, -1},
		{[]uint64{10, 0, 0, 0}, 0.5, 0.0005},
		{[]uint64{0, 10, 0, 0}, 0.5, 0.0055},
		{[]uint64{50, 0, 50, 0}, 0.99, 0.01 + 0.09*0.98},
		{[]uint64{0, 0, 0, 4}, 0.5, 0.1}, // beyond the last bound
		{[]uint64{1, 0, 0, 1}, 0.5, 0.001},
	} {
		if got := Quantile(bounds, tc.counts, tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tc.counts, tc.q, got, tc.want)
		}
	}
	h := NewHistogram(bounds)
	h.Observe(5 * time.Millisecond)
	dst := make([]uint64, len(h.Bounds())+1)
	h.ReadBuckets(dst)
	if dst[1] != 1 || dst[0]+dst[2]+dst[3] != 0 {
		t.Fatalf("ReadBuckets %v", dst)
	}
	sum := NewHistogram(bounds)
	sum.Observe(50 * time.Millisecond)
	sum.AddFrom(h)
	sum.ReadBuckets(dst)
	if sum.Count() != 2 || dst[1] != 1 || dst[2] != 1 || sum.sumNano.Load() != int64(55*time.Millisecond) {
		t.Fatalf("AddFrom: count %d buckets %v sum %d", sum.Count(), dst, sum.sumNano.Load())
	}
}
