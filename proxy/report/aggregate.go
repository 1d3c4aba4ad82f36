package report

import (
	"slices"
	"strconv"

	"flashgate/metrics"
	"flashgate/proxy/dashboard"
)

// Series is the edges' records of a span of seconds, summed by second: the
// fleet's view of a sale (or of every sale), for the dashboard's "all
// edges" charts and the sale report. Every slice has one value per second
// from FromSec to ToSec.
type Series struct {
	FromSec int64   `json:"fromSec"`
	ToSec   int64   `json:"toSec"`
	Nodes   []int64 `json:"nodes"` // the edges that wrote records
	// Attempts are the `do` answers of every edge; ByNode the same per edge
	// (keyed by node id).
	Attempts []uint64            `json:"attempts"`
	ByNode   map[string][]uint64 `json:"byNode"`
	// Codes are the answers by code (dashboard.Codes, then other).
	Codes [][]uint64 `json:"codes"`
	// P50, P99 are the `do` latency of every edge's answers of the second,
	// ms, -1 when none (from the summed latency buckets).
	P50 []float64 `json:"p50"`
	P99 []float64 `json:"p99"`
	// Buckets are the whole span's latency buckets (metrics.LatencyBuckets).
	Buckets []uint64 `json:"buckets"`
	// The shared figures as the edges saw them, carried forward over
	// seconds nobody wrote: stock left, the room's tickets, line, admitted
	// and active (-1: unknown, or no room).
	Left     []int64 `json:"left"`
	Joined   []int64 `json:"joined"`
	Waiting  []int64 `json:"waiting"`
	Admitted []int64 `json:"admitted"`
	Active   []int64 `json:"active"`
	// Flags are the edges' Flag* of the second, ORed; an edge's hold until
	// its next record (it writes one whenever they change).
	Flags []uint8 `json:"flags"`
}

// maxSpan bounds the seconds one Series covers (a day), whatever the
// records say.
const maxSpan = 86400

// Aggregate sums recs over [fromSec, toSec]; records outside are ignored,
// except that the last one before fromSec of each edge seeds its flags and
// the shared figures.
func Aggregate(recs []Second, fromSec, toSec int64) Series {
	if toSec < fromSec {
		toSec = fromSec
	}
	if toSec-fromSec >= maxSpan {
		fromSec = toSec - maxSpan + 1
	}
	n := int(toSec - fromSec + 1)
	s := Series{FromSec: fromSec, ToSec: toSec, Nodes: []int64{}, ByNode: map[string][]uint64{},
		Attempts: make([]uint64, n), Codes: make([][]uint64, dashboard.NumCodes), P50: make([]float64, n), P99: make([]float64, n),
		Buckets: make([]uint64, NumBuckets), Left: filled(n), Joined: filled(n), Waiting: filled(n), Admitted: filled(n),
		Active: filled(n), Flags: make([]uint8, n)}
	for c := range s.Codes {
		s.Codes[c] = make([]uint64, n)
	}
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, b Second) int {
		if a.Sec != b.Sec {
			return int(a.Sec - b.Sec)
		}
		return int(a.Node - b.Node)
	})
	buckets := make([][]uint64, n)
	written := make([]bool, n)
	nodeFlags := map[int64]uint8{}
	var seed Second
	var seedFlags uint8
	seeded := false
	for i := range sorted {
		r := &sorted[i]
		if r.Sec > toSec {
			break
		}
		if r.Sec < fromSec {
			nodeFlags[r.Node] = r.Flags
			seed, seeded = *r, true
			seedFlags = 0
			for _, nf := range nodeFlags {
				seedFlags |= nf
			}
			continue
		}
		k := int(r.Sec - fromSec)
		if _, ok := s.ByNode[strconv.FormatInt(r.Node, 10)]; !ok {
			s.Nodes = append(s.Nodes, r.Node)
			s.ByNode[strconv.FormatInt(r.Node, 10)] = make([]uint64, n)
		}
		a := r.Attempts()
		s.Attempts[k] += a
		s.ByNode[strconv.FormatInt(r.Node, 10)][k] += a
		for c, v := range r.Codes {
			s.Codes[c][k] += uint64(v)
		}
		if buckets[k] == nil {
			buckets[k] = make([]uint64, NumBuckets)
		}
		for b, v := range r.Buckets {
			buckets[k][b] += uint64(v)
			s.Buckets[b] += uint64(v)
		}
		if !written[k] {
			written[k] = true
			s.Left[k], s.Joined[k], s.Waiting[k], s.Admitted[k], s.Active[k] = r.Left, r.Joined, r.Waiting, r.Admitted, r.Active
		} else {
			s.Left[k] = min(s.Left[k], r.Left) // the edge that saw the most sold
			s.Joined[k], s.Waiting[k], s.Admitted[k], s.Active[k] = max(s.Joined[k], r.Joined), max(s.Waiting[k], r.Waiting),
				max(s.Admitted[k], r.Admitted), max(s.Active[k], r.Active)
		}
		nodeFlags[r.Node] = r.Flags
		var f uint8
		for _, nf := range nodeFlags {
			f |= nf
		}
		s.Flags[k] = f
	}
	slices.Sort(s.Nodes)
	// Carry the shared figures and the flags over the seconds nobody wrote.
	for k := range n {
		s.P50[k] = quantile(buckets[k], 0.5)
		s.P99[k] = quantile(buckets[k], 0.99)
		if written[k] {
			continue
		}
		switch {
		case k > 0:
			s.Left[k], s.Joined[k], s.Waiting[k], s.Admitted[k], s.Active[k] = s.Left[k-1], s.Joined[k-1], s.Waiting[k-1], s.Admitted[k-1], s.Active[k-1]
			s.Flags[k] = s.Flags[k-1]
		case seeded:
			s.Left[k], s.Joined[k], s.Waiting[k], s.Admitted[k], s.Active[k] = seed.Left, seed.Joined, seed.Waiting, seed.Admitted, seed.Active
			s.Flags[k] = seedFlags
		}
	}
	return s
}

func filled(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = -1
	}
	return s
}

// quantile is the q-quantile of buckets in ms, -1 when empty.
func quantile(buckets []uint64, q float64) float64 {
	if buckets == nil {
		return -1
	}
	v := metrics.Quantile(metrics.LatencyBuckets, buckets, q)
	if v < 0 {
		return -1
	}
	return v * 1000
}

// Quantiles reads the percentiles the report lists from a span's buckets,
// ms (-1 when empty).
func Quantiles(buckets []uint64) map[string]float64 {
	return map[string]float64{"p50": quantile(buckets, 0.5), "p90": quantile(buckets, 0.9),
		"p99": quantile(buckets, 0.99), "p999": quantile(buckets, 0.999)}
}
