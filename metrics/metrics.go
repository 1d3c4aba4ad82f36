package metrics

import (
	"bufio"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Counter is a monotonically increasing count.
type Counter struct{ v atomic.Uint64 }

func (c *Counter) Inc()          { c.v.Add(1) }
func (c *Counter) Add(n uint64)  { c.v.Add(n) }
func (c *Counter) Value() uint64 { return c.v.Load() }

// Gauge is a value that goes up and down.
type Gauge struct{ v atomic.Int64 }

func (g *Gauge) Set(n int64)  { g.v.Store(n) }
func (g *Gauge) Add(n int64)  { g.v.Add(n) }
func (g *Gauge) Value() int64 { return g.v.Load() }

// Histogram counts observations in fixed buckets (seconds, as Prometheus
// wants base units). Observe is lock-free.
type Histogram struct {
	bounds  []float64 // upper bounds in seconds, ascending
	les     []string  // the same bounds as the le label writes them
	nanos   []int64   // the same bounds in nanoseconds, for comparison
	counts  []atomic.Uint64
	sumNano atomic.Int64
	count   atomic.Uint64
}

// LatencyBuckets spans 100µs to 10s, the range an edge request can take.
var LatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewHistogram returns a histogram with the given upper bounds in seconds.
func NewHistogram(bounds []float64) *Histogram {
	h := &Histogram{bounds: bounds, les: make([]string, len(bounds)), nanos: make([]int64, len(bounds)), counts: make([]atomic.Uint64, len(bounds)+1)}
	for i, b := range bounds {
		h.nanos[i] = int64(b * 1e9)
		h.les[i] = strconv.FormatFloat(b, 'g', -1, 64)
	}
	return h
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	n := int64(d)
	// A scan from the smallest bound, not a binary search: an edge's
	// answers fall in the first buckets, so this stops after a compare or
	// two where sort.Search made four calls through a closure.
	i := 0
	for i < len(h.nanos) && h.nanos[i] < n {
		i++
	}
	h.counts[i].Add(1)
	h.sumNano.Add(n)
	h.count.Add(1)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.count.Load() }

// SumNanos returns the sum of the observations in nanoseconds.
func (h *Histogram) SumNanos() int64 { return h.sumNano.Load() }

// AddFrom adds o's observations to h (same bounds): a scrape sums the
// histograms of parts (a sale's each) into one family this way.
func (h *Histogram) AddFrom(o *Histogram) {
	for i := range h.counts {
		h.counts[i].Add(o.counts[i].Load())
	}
	h.sumNano.Add(o.sumNano.Load())
	h.count.Add(o.count.Load())
}

// Bounds returns the upper bounds in seconds (the last bucket, beyond
// them, has none). The caller must not change the slice.
func (h *Histogram) Bounds() []float64 { return h.bounds }

// ReadBuckets copies each bucket's own count (not cumulative; one more
// than Bounds: the last is beyond the highest bound) into dst, which must
// have room for them, so a sampler can take differences without
// allocating.
func (h *Histogram) ReadBuckets(dst []uint64) {
	for i := range h.counts {
		dst[i] = h.counts[i].Load()
	}
}

// Label is one name="value" pair.
type Label struct{ Name, Value string }

// Writer writes samples of one family; collect functions get one. Writing
// a sample allocates nothing: numbers are formatted into num.
type Writer struct {
	w    *bufio.Writer
	name string
	num  [32]byte
}

// Value writes `name{labels} v`.
func (w *Writer) Value(v float64, labels ...Label) {
	w.sample("", "", v, labels)
}

// Histogram writes the _bucket/_sum/_count series of h.
func (w *Writer) Histogram(h *Histogram, labels ...Label) {
	var cum uint64
	for i, le := range h.les {
		cum += h.counts[i].Load()
		w.sample("_bucket", le, float64(cum), labels)
	}
	cum += h.counts[len(h.bounds)].Load()
	w.sample("_bucket", "+Inf", float64(cum), labels)
	w.sample("_sum", "", float64(h.sumNano.Load())/1e9, labels)
	w.sample("_count", "", float64(h.count.Load()), labels)
}

// sample writes one line: the family's name and suffix (_bucket, ...).
func (w *Writer) sample(suffix, le string, v float64, labels []Label) {
	w.w.WriteString(w.name)
	w.w.WriteString(suffix)
	if len(labels) > 0 || le != "" {
		w.w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.w.WriteByte(',')
			}
			w.w.WriteString(l.Name)
			w.w.WriteString(`="`)
			writeEscaped(w.w, l.Value)
			w.w.WriteByte('"')
		}
		if le != "" {
			if len(labels) > 0 {
				w.w.WriteByte(',')
			}
			w.w.WriteString(`le="`)
			w.w.WriteString(le)
			w.w.WriteByte('"')
		}
		w.w.WriteByte('}')
	}
	w.w.WriteByte(' ')
	switch {
	case math.IsInf(v, 1):
		w.w.WriteString("+Inf")
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		w.w.Write(strconv.AppendInt(w.num[:0], int64(v), 10))
	default:
		w.w.Write(strconv.AppendFloat(w.num[:0], v, 'g', -1, 64))
	}
	w.w.WriteByte('\n')
}

func writeEscaped(w *bufio.Writer, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			w.WriteString(`\\`)
		case '"':
			w.WriteString(`\"`)
		case '\n':
			w.WriteString(`\n`)
		default:
			w.WriteByte(c)
		}
	}
}

type family struct {
	name, help, typ string
	collect         func(w *Writer)
}

// Registry is a set of metric families.
type Registry struct {
	mu       sync.Mutex
	families []family
}

// Register adds a family; typ is "counter", "gauge" or "histogram".
func (r *Registry) Register(name, help, typ string, collect func(w *Writer)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.families {
		if f.name == name {
			panic("metrics: duplicate family " + name)
		}
	}
	r.families = append(r.families, family{name, help, typ, collect})
}

// WriteTo writes every family in the Prometheus text format (0.0.4).
func (r *Registry) WriteTo(out io.Writer) (int64, error) {
	r.mu.Lock()
	fams := append([]family(nil), r.families...)
	r.mu.Unlock()
	sort.Slice(fams, func(i, j int) bool { return fams[i].name < fams[j].name })
	cw := &countingWriter{w: out}
	bw := bufio.NewWriter(cw)
	w := &Writer{w: bw}
	for _, f := range fams {
		for _, part := range [...]string{"# HELP ", f.name, " ", f.help, "\n# TYPE ", f.name, " ", f.typ, "\n"} {
			bw.WriteString(part)
		}
		w.name = f.name
		f.collect(w)
	}
	err := bw.Flush()
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Quantile estimates the q-quantile (0..1) in seconds of observations
// counted in buckets with the given upper bounds (counts as ReadBuckets
// gives them: one more than bounds), interpolating linearly inside the
// bucket it falls in, as Prometheus' histogram_quantile does. The last
// bucket has no bound: a quantile there reads as the highest bound. -1
// when nothing was counted.
func Quantile(bounds []float64, counts []uint64, q float64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 || len(bounds) == 0 {
		return -1
	}
	rank := q * float64(total)
	var cum uint64
	for i, c := range counts {
		if c == 0 || float64(cum+c) < rank {
			cum += c
			continue
		}
		if i >= len(bounds) {
			return bounds[len(bounds)-1]
		}
		lo := 0.0
		if i > 0 {
			lo = bounds[i-1]
		}
		return lo + (bounds[i]-lo)*(rank-float64(cum))/float64(c)
	}
	return bounds[len(bounds)-1]
}
