package routeroom

import (
	"math"
	"sync"
	"sync/atomic"

	"flashgate/metrics"
	"flashgate/orders/stock"
)

// A room over time: what the last minute held (admissions a minute, the
// abandon rate, the wait's average and p90), for the metrics and the
// dashboard. Tend feeds it (every tick, read once a second at most); the
// request path never touches it.

const (
	windowMs    = 60_000 // the window the figures are over
	windowEvery = 1_000  // one reading a second
	windowLen   = windowMs/windowEvery + 2
)

// reading is the counters at one moment: Redis's (every edge's) and this
// edge's wait histogram.
type reading struct {
	atMs                int64
	admitted, abandoned int64
	waitSumNs           int64
	waitBuckets         [len(waitBoundsArr) + 1]uint64
}

// window is a ring of readings, fixed in size: adding allocates nothing.
type window struct {
	mu   sync.Mutex
	ring [windowLen]reading
	n    int // readings held
	next int // where the next goes
	// The figures, float64 bits: -1 where the window holds nothing yet.
	perMin, abandonRate, waitAvg, waitP90 atomic.Uint64
}

// Stats are a room's figures over the last minute.
type Stats struct {
	// AdmittedPerMin is the visitors let in over the last minute (every
	// edge's), scaled to a minute while the window is shorter.
	AdmittedPerMin float64 `json:"admittedPerMin"`
	// AbandonRate is the share of the visitors who left the line over the
	// last minute who left it by abandoning (-1: nobody left it).
	AbandonRate float64 `json:"abandonRate"`
	// WaitAvgS and WaitP90S are the wait of the visitors this edge let in
	// over the last minute, in seconds (-1: none).
	WaitAvgS float64 `json:"waitAvgS"`
	WaitP90S float64 `json:"waitP90S"`
}

func newWindow() *window {
	w := &window{}
	for _, f := range []*atomic.Uint64{&w.perMin, &w.abandonRate, &w.waitAvg, &w.waitP90} {
		f.Store(math.Float64bits(-1))
	}
	return w
}

// add books a reading taken at nowMs (skipped when the last is under a
// second old) and recomputes the figures against the oldest reading
// within the window.
func (w *window) add(nowMs int64, info *stock.RouteRoomInfo, wait *metrics.Histogram) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n > 0 {
		last := &w.ring[(w.next+windowLen-1)%windowLen]
		if nowMs-last.atMs < windowEvery {
			return
		}
	}
	r := &w.ring[w.next]
	r.atMs, r.admitted, r.abandoned, r.waitSumNs = nowMs, info.Admitted, info.Abandoned, wait.SumNanos()
	wait.ReadBuckets(r.waitBuckets[:])
	w.next = (w.next + 1) % windowLen
	w.n = min(w.n+1, windowLen)
	// The oldest reading no older than the window.
	old := r
	for i := w.n - 1; i >= 1; i-- {
		o := &w.ring[(w.next+windowLen-1-i)%windowLen]
		if nowMs-o.atMs <= windowMs {
			old = o
			break
		}
	}
	span := r.atMs - old.atMs
	if span <= 0 {
		return
	}
	adm, ab := r.admitted-old.admitted, r.abandoned-old.abandoned
	w.perMin.Store(math.Float64bits(float64(max(adm, 0)) * windowMs / float64(span)))
	rate := -1.0
	if adm+ab > 0 {
		rate = float64(max(ab, 0)) / float64(adm+ab)
	}
	w.abandonRate.Store(math.Float64bits(rate))
	var d [len(waitBoundsArr) + 1]uint64
	var n uint64
	for i := range d {
		d[i] = r.waitBuckets[i] - old.waitBuckets[i]
		n += d[i]
	}
	avg, p90 := -1.0, -1.0
	if n > 0 {
		avg = float64(r.waitSumNs-old.waitSumNs) / 1e9 / float64(n)
		p90 = metrics.Quantile(waitBounds, d[:], 0.9)
	}
	w.waitAvg.Store(math.Float64bits(avg))
	w.waitP90.Store(math.Float64bits(p90))
}

func (w *window) stats() Stats {
	f := func(a *atomic.Uint64) float64 { return math.Float64frombits(a.Load()) }
	return Stats{AdmittedPerMin: max(f(&w.perMin), 0), AbandonRate: f(&w.abandonRate), WaitAvgS: f(&w.waitAvg), WaitP90S: f(&w.waitP90)}
}
