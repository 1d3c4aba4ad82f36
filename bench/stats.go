package main

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, 1 µs .. 10 min.
const (
	histMin = 1
	histMax = int64(10 * time.Minute / time.Microsecond)
)

func newHist(sigfigs int) *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, sigfigs) }

// Outcome classes of one request.
const (
	classErr = iota // transport error or timeout: no answer
	class2xx
	class3xx
	class4xx
	class5xx
	numClasses
)

// Endpoint accumulates one call's results: the whole-run histogram, one
// coarser histogram per second (the latency-over-time chart), answer
// classes and codes.
type Endpoint struct {
	Name string

	mu     sync.Mutex
	hist   *hdrhistogram.Histogram
	perSec []*hdrhistogram.Histogram // one per Recorder.slot
	class  [numClasses]int64
	codes  map[string]int64
	lag    *hdrhistogram.Histogram // how late requests left against their intended time
	first  int64                   // unix ns of the first completion
	last   int64
}

func newEndpoint(name string) *Endpoint {
	return &Endpoint{Name: name, hist: newHist(3), lag: newHist(2), codes: map[string]int64{}}
}

// Recorder is every endpoint of a run plus the run-wide counters the
// progress line reads.
type Recorder struct {
	start     time.Time
	slot      time.Duration // time-series resolution: 1 s, or 100 ms for short runs
	endpoints map[string]*Endpoint
	order     []string

	done   atomic.Int64 // answered or failed requests
	errs   atomic.Int64 // transport errors and 5xx
	lateMs atomic.Int64 // worst send lag so far, ms
}

func newRecorder(start time.Time, names []string) *Recorder {
	r := &Recorder{start: start, slot: time.Second, endpoints: map[string]*Endpoint{}}
	for _, n := range names {
		r.endpoints[n] = newEndpoint(n)
		r.order = append(r.order, n)
	}
	return r
}

func (r *Recorder) endpoint(name string) *Endpoint {
	e := r.endpoints[name]
	if e == nil {
		panic("bench: unknown endpoint " + name)
	}
	return e
}

func classOf(status int) int {
	switch {
	case status >= 200 && status < 300:
		return class2xx
	case status >= 300 && status < 400:
		return class3xx
	case status >= 400 && status < 500:
		return class4xx
	case status >= 500:
		return class5xx
	}
	return classErr
}

// Record books one request: intended is when it should have left, sent
// when it did, end when its answer (or error) came. status 0 is a
// transport error; code is the error code of the answer ("" for 2xx).
func (r *Recorder) Record(name string, intended, sent, end time.Time, status int, code string) {
	lat := end.Sub(intended)
	us := max(histMin, min(histMax, lat.Microseconds()))
	cls := classOf(status)
	if code == "" {
		if cls == class2xx {
			code = "OK"
		} else {
			code = httpCodeName(status)
		}
	}
	sec := int(end.Sub(r.start) / r.slot)
	lagUs := max(0, sent.Sub(intended).Microseconds())
	e := r.endpoint(name)
	e.mu.Lock()
	e.hist.RecordValue(us)
	e.lag.RecordValue(max(histMin, min(histMax, lagUs)))
	if sec >= 0 && sec < 100000 {
		for len(e.perSec) <= sec {
			e.perSec = append(e.perSec, nil)
		}
		h := e.perSec[sec]
		if h == nil {
			h = newHist(2)
			e.perSec[sec] = h
		}
		h.RecordValue(us)
	}
	e.class[cls]++
	e.codes[code]++
	en := end.UnixNano()
	if e.first == 0 || en < e.first {
		e.first = en
	}
	if en > e.last {
		e.last = en
	}
	e.mu.Unlock()

	r.done.Add(1)
	if cls == classErr || cls == class5xx {
		r.errs.Add(1)
	}
	if ms := lagUs / 1000; ms > r.lateMs.Load() {
		r.lateMs.Store(ms)
	}
}

func httpCodeName(status int) string {
	if status == 0 {
		return "NO_ANSWER"
	}
	return "HTTP_" + itoa(status)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// secondP99 is the worst p99 (ms) of any endpoint in second sec, for the
// progress line.
func (r *Recorder) secondP99(sec int) (p99ms float64, n int64) {
	per := int(time.Second / r.slot)
	for _, name := range r.order {
		e := r.endpoints[name]
		e.mu.Lock()
		h := newHist(2)
		for i := sec * per; i >= 0 && i < (sec+1)*per && i < len(e.perSec); i++ {
			if e.perSec[i] != nil {
				h.Merge(e.perSec[i])
			}
		}
		e.mu.Unlock()
		if h.TotalCount() > 0 {
			n += h.TotalCount()
			p99ms = math.Max(p99ms, float64(h.ValueAtQuantile(99))/1000)
		}
	}
	return p99ms, n
}

// Stats is a latency summary in milliseconds.
type Stats struct {
	Count int64   `json:"count"`
	RPS   float64 `json:"rps"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

func summarize(h *hdrhistogram.Histogram, seconds float64) Stats {
	s := Stats{Count: h.TotalCount()}
	if s.Count == 0 {
		return s
	}
	ms := func(v int64) float64 { return float64(v) / 1000 }
	s.P50, s.P90, s.P99, s.P999 = ms(h.ValueAtQuantile(50)), ms(h.ValueAtQuantile(90)), ms(h.ValueAtQuantile(99)), ms(h.ValueAtQuantile(99.9))
	s.Max, s.Mean = ms(h.Max()), h.Mean()/1000
	if seconds > 0 {
		s.RPS = float64(s.Count) / seconds
	}
	return s
}

// EndpointResult is one endpoint's line of the report.
type EndpointResult struct {
	Name    string           `json:"name"`
	Stats                    // over the measured window
	Classes map[string]int64 `json:"classes"` // 2xx 3xx 4xx 5xx error
	Codes   map[string]int64 `json:"codes"`   // OK, SOLD_OUT, ..., NO_ANSWER
	Series  []SecondPoint    `json:"series"`  // latency over time
	Hist    []Bucket         `json:"histogram"`
}

// SecondPoint is one slot (1 s, or 100 ms for short runs) of the
// latency-over-time chart.
type SecondPoint struct {
	T     float64 `json:"t"`     // seconds since the start, at the slot's start
	Count int64   `json:"count"` // answers in the slot
	Rate  float64 `json:"rate"`  // answers per second
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Bucket is one bar of the latency histogram: requests with latency in
// [Lo, Hi) ms.
type Bucket struct {
	Lo    float64 `json:"lo_ms"`
	Hi    float64 `json:"hi_ms"`
	Count int64   `json:"count"`
}

var classNames = [numClasses]string{"error", "2xx", "3xx", "4xx", "5xx"}

func (r *Recorder) results(seconds float64) (eps []EndpointResult, total, lag Stats) {
	all, lags := newHist(3), newHist(2)
	for _, name := range r.order {
		e := r.endpoints[name]
		e.mu.Lock()
		if e.hist.TotalCount() == 0 {
			e.mu.Unlock()
			continue
		}
		all.Merge(e.hist)
		lags.Merge(e.lag)
		er := EndpointResult{Name: name, Stats: summarize(e.hist, seconds), Classes: map[string]int64{}, Codes: map[string]int64{}}
		for c, n := range e.class {
			if n > 0 || c != class3xx {
				er.Classes[classNames[c]] = n
			}
		}
		for k, v := range e.codes {
			er.Codes[k] = v
		}
		for sec, h := range e.perSec {
			if h == nil {
				continue
			}
			er.Series = append(er.Series, SecondPoint{T: float64(sec) * r.slot.Seconds(), Count: h.TotalCount(),
				Rate: float64(h.TotalCount()) / r.slot.Seconds(),
				P50:  float64(h.ValueAtQuantile(50)) / 1000, P99: float64(h.ValueAtQuantile(99)) / 1000, Max: float64(h.Max()) / 1000})
		}
		er.Hist = logBuckets(e.hist)
		e.mu.Unlock()
		eps = append(eps, er)
	}
	return eps, summarize(all, seconds), summarize(lags, 0)
}

// logBuckets regroups a histogram into 5 buckets per decade of ms, from
// the smallest to the largest non-empty one.
func logBuckets(h *hdrhistogram.Histogram) []Bucket {
	const perDecade = 5
	idx := func(us int64) int { // bucket index; 0 = [1µs, 1.58µs)
		return int(math.Floor(math.Log10(math.Max(1, float64(us))) * perDecade))
	}
	counts := map[int]int64{}
	lo, hi := math.MaxInt, math.MinInt
	for _, b := range h.Distribution() {
		if b.Count == 0 {
			continue
		}
		i := idx(b.From)
		counts[i] += b.Count
		lo, hi = min(lo, i), max(hi, i)
	}
	if lo > hi {
		return nil
	}
	out := make([]Bucket, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		out = append(out, Bucket{
			Lo:    math.Pow(10, float64(i)/perDecade) / 1000,
			Hi:    math.Pow(10, float64(i+1)/perDecade) / 1000,
			Count: counts[i],
		})
	}
	return out
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// quantile is the nearest-rank q-quantile of sorted values; zero when
// there are none.
func quantile[T int64 | float64](sorted []T, q float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
