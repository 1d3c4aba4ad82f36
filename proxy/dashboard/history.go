package dashboard

import (
	"strconv"
	"sync"
)

// The charts' history: the edge's last 15 minutes at 1 s, kept in a ring of
// fixed-size samples so that an operator who opens the page during an
// incident sees what led up to it. Memory is fixed: the time axis and the
// edge's series are arrays, a sale's series are allocated once, the first
// time the sale is seen (at most HistoryProducts of them); adding a sample
// copies numbers and allocates nothing (TestHistoryAddAllocs).
const (
	// HistoryLen is how many 1 s samples the ring holds: 15 minutes.
	HistoryLen = 900
	// HistoryProducts bounds the sales charted; more are counted in
	// HistoryView.Dropped and shown as not charted.
	HistoryProducts = 16
	// historyMarks bounds the markers kept.
	historyMarks = 256
)

// Codes are the answers to `do` the charts tell apart (HTTP status); the
// last series, "other", collects every other status.
var Codes = [...]int{200, 401, 403, 409, 410, 429, 503}

// NumCodes is len(Codes) plus "other".
const NumCodes = len(Codes) + 1

// CodeIndex is the series a `do` answer's status counts in.
func CodeIndex(status int) int {
	switch status {
	case 200:
		return 0
	case 401:
		return 1
	case 403:
		return 2
	case 409:
		return 3
	case 410:
		return 4
	case 429:
		return 5
	case 503:
		return 6
	}
	return NumCodes - 1
}

// codeNames are the series' names in the JSON, in CodeIndex order.
var codeNames = func() []string {
	out := make([]string, 0, NumCodes)
	for _, c := range Codes {
		out = append(out, strconv.Itoa(c))
	}
	return append(out, "other")
}()

// ProductSample is one sale's second. -1 marks a figure the edge does not
// know (or, for the room's, a sale without a room).
type ProductSample struct {
	Attempts uint32           // `do` calls answered this second
	Codes    [NumCodes]uint32 // the same by answer (CodeIndex)
	P50, P99 float32          // `do` latency this second, ms; -1 when none answered
	Left     int64            // stock left
	// Units held unpaid, paid, released by the pay deadline (sampled
	// every 2 s from Redis).
	Unpaid, Paid, Expired int32
	// The waiting room: in line, let in so far (cumulative), active.
	Waiting, Admitted, Active int32
}

// absent is a sale's sample for a second it was not in the catalogue.
var absent = ProductSample{P50: -1, P99: -1, Left: -1, Unpaid: -1, Paid: -1, Expired: -1, Waiting: -1, Admitted: -1, Active: -1}

// Frame is what the edge's sampler hands Add once a second. It is meant to
// be reused: Add copies it.
type Frame struct {
	TimeMs      int64
	Outbox, Lag int64 // -1: unknown
	// P50 and P99 are the `do` latency of every sale together, ms (-1:
	// none answered).
	P50, P99 float32
	N        int // sales in IDs and P
	IDs      [HistoryProducts]string
	P        [HistoryProducts]ProductSample
}

// Mark kinds: the moments that explain a line.
const (
	MarkBreakerOpen   = "breaker_open"
	MarkBreakerClosed = "breaker_closed"
	MarkFenced        = "fenced"
	MarkRecovered     = "recovered"
	MarkReload        = "reload"
	MarkReloadFailed  = "reload_failed"
	MarkDegradeOn     = "degrade_on"
	MarkDegradeOff    = "degrade_off"
)

// Mark is one moment on the time axis. Product is "" for the edge (a
// reload, the degrade switch for every sale).
type Mark struct {
	TimeMs  int64  `json:"t"`
	Kind    string `json:"kind"`
	Product string `json:"product,omitempty"`
	Version uint64 `json:"version,omitempty"` // a reload's config version
}

// History is the ring. It is safe for concurrent use.
type History struct {
	mu   sync.Mutex
	n    int // samples held
	head int // the next sample's index

	t, outbox, lag [HistoryLen]int64
	p50, p99       [HistoryLen]float32

	ids      [HistoryProducts]string
	lastSeen [HistoryProducts]int64 // the slot's sale was last in a frame at this time (ms)
	prods    [HistoryProducts]*[HistoryLen]ProductSample
	dropped  int // sales of the last frame without a slot

	marks            [historyMarks]Mark
	nMarks, markHead int
}

// NewHistory returns an empty ring.
func NewHistory() *History { return &History{} }

// Add appends f as the newest second, overwriting the oldest once the ring
// is full. A sale met for the first time takes a free slot (its series
// allocated then, once); a slot whose sale has been absent for the whole
// window is free again.
func (h *History) Add(f *Frame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := h.head
	h.t[i], h.outbox[i], h.lag[i] = f.TimeMs, f.Outbox, f.Lag
	h.p50[i], h.p99[i] = f.P50, f.P99
	for _, p := range h.prods {
		if p != nil {
			p[i] = absent
		}
	}
	h.dropped = 0
	for k := range min(f.N, len(f.IDs)) {
		s := h.slot(f.IDs[k], f.TimeMs)
		if s < 0 {
			h.dropped++
			continue
		}
		h.prods[s][i] = f.P[k]
		h.lastSeen[s] = f.TimeMs
	}
	h.head = (i + 1) % HistoryLen
	if h.n < HistoryLen {
		h.n++
	}
}

// slot finds or assigns id's slot; -1 when every slot is in use.
func (h *History) slot(id string, nowMs int64) int {
	free := -1
	for s := range h.ids {
		if h.prods[s] != nil && h.ids[s] == id {
			return s
		}
		if free < 0 && (h.prods[s] == nil || nowMs-h.lastSeen[s] > HistoryLen*1000) {
			free = s
		}
	}
	if free < 0 {
		return -1
	}
	if h.prods[free] == nil {
		h.prods[free] = new([HistoryLen]ProductSample)
	}
	// The slot's older seconds belong to another sale (or none).
	for j := range h.prods[free] {
		h.prods[free][j] = absent
	}
	h.ids[free] = id
	return free
}

// Mark records a moment; the oldest is dropped once historyMarks are held.
func (h *History) Mark(m Mark) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.marks[h.markHead] = m
	h.markHead = (h.markHead + 1) % historyMarks
	if h.nMarks < historyMarks {
		h.nMarks++
	}
}

// HistoryView is the ring as the page reads it (GET
// /admin/dashboard/history): parallel series, oldest first, one value per
// second of T.
type HistoryView struct {
	StepMs   int             `json:"stepMs"`
	Codes    []string        `json:"codes"` // the names of ProductSeries.Codes' series
	T        []int64         `json:"t"`     // unix ms
	Outbox   []int64         `json:"outbox"`
	Lag      []int64         `json:"lag"`
	P50      []float32       `json:"p50"` // every sale's `do` together, ms
	P99      []float32       `json:"p99"`
	Products []ProductSeries `json:"products"`
	Marks    []Mark          `json:"marks"`
	Dropped  int             `json:"dropped"` // sales not charted (more than HistoryProducts)
}

// ProductSeries is one sale's series (ProductSample's fields, by second).
type ProductSeries struct {
	ProductID string     `json:"productId"`
	Attempts  []uint32   `json:"attempts"`
	Codes     [][]uint32 `json:"codes"`
	P50       []float32  `json:"p50"`
	P99       []float32  `json:"p99"`
	Left      []int64    `json:"left"`
	Unpaid    []int32    `json:"unpaid"`
	Paid      []int32    `json:"paid"`
	Expired   []int32    `json:"expired"`
	Waiting   []int32    `json:"waiting"`
	Admitted  []int32    `json:"admitted"`
	Active    []int32    `json:"active"`
}

// View copies the seconds after sinceMs (0: all) and the marks after it.
// It allocates: it serves a page's request, not the sampler.
func (h *History) View(sinceMs int64) HistoryView {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := HistoryView{StepMs: 1000, Codes: codeNames, Dropped: h.dropped, Products: []ProductSeries{}, Marks: []Mark{}}
	start := (h.head - h.n + HistoryLen) % HistoryLen
	var idx []int
	for k := range h.n {
		i := (start + k) % HistoryLen
		if h.t[i] > sinceMs {
			idx = append(idx, i)
		}
	}
	for _, i := range idx {
		v.T = append(v.T, h.t[i])
		v.Outbox = append(v.Outbox, h.outbox[i])
		v.Lag = append(v.Lag, h.lag[i])
		v.P50, v.P99 = append(v.P50, h.p50[i]), append(v.P99, h.p99[i])
	}
	if v.T == nil {
		v.T, v.Outbox, v.Lag, v.P50, v.P99 = []int64{}, []int64{}, []int64{}, []float32{}, []float32{}
	}
	for s, p := range h.prods {
		if p == nil || (len(idx) > 0 && h.lastSeen[s] < h.t[idx[0]]) || (len(idx) == 0 && h.lastSeen[s] <= sinceMs) {
			continue // free, or absent from every second asked for
		}
		n := len(idx)
		ps := ProductSeries{ProductID: h.ids[s], Attempts: make([]uint32, 0, n), Codes: make([][]uint32, NumCodes),
			P50: make([]float32, 0, n), P99: make([]float32, 0, n), Left: make([]int64, 0, n),
			Unpaid: make([]int32, 0, n), Paid: make([]int32, 0, n), Expired: make([]int32, 0, n),
			Waiting: make([]int32, 0, n), Admitted: make([]int32, 0, n), Active: make([]int32, 0, n)}
		for c := range ps.Codes {
			ps.Codes[c] = make([]uint32, 0, n)
		}
		for _, i := range idx {
			x := &p[i]
			ps.Attempts = append(ps.Attempts, x.Attempts)
			for c := range ps.Codes {
				ps.Codes[c] = append(ps.Codes[c], x.Codes[c])
			}
			ps.P50, ps.P99 = append(ps.P50, x.P50), append(ps.P99, x.P99)
			ps.Left = append(ps.Left, x.Left)
			ps.Unpaid, ps.Paid, ps.Expired = append(ps.Unpaid, x.Unpaid), append(ps.Paid, x.Paid), append(ps.Expired, x.Expired)
			ps.Waiting, ps.Admitted, ps.Active = append(ps.Waiting, x.Waiting), append(ps.Admitted, x.Admitted), append(ps.Active, x.Active)
		}
		v.Products = append(v.Products, ps)
	}
	for k := range h.nMarks {
		m := h.marks[(h.markHead-h.nMarks+k+historyMarks)%historyMarks]
		if m.TimeMs > sinceMs {
			v.Marks = append(v.Marks, m)
		}
	}
	return v
}
