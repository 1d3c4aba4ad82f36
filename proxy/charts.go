package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"flashgate/metrics"
	"flashgate/proxy/dashboard"
	"flashgate/proxy/report"
	"flashgate/sale"
)

// The charts and the sale's timeline: every `do` answer is counted per
// sale by code and latency (doStats, on the request path: a map read and
// three atomic adds), and once a second the sampler turns the counters and
// the edge's state into one sample of the dashboard's ring, the markers
// (breaker, fence, reload, degrade), and one record per active sale in the
// sale's timeline in Redis (report.Second), which the sale report reads
// after the sale.

// doStats are one sale's `do` answers on this edge, cumulative.
type doStats struct {
	codes [dashboard.NumCodes]metrics.Counter
	lat   *metrics.Histogram
}

func newDoStats() *doStats { return &doStats{lat: metrics.NewHistogram(metrics.LatencyBuckets)} }

// chartStats holds every sale's doStats. The edge adds the catalogue's
// sales at start and the sampler adds new ones once a second (copy on
// write); an answer for a sale not added yet (at most a second of a sale
// created through the admin API), or for an unknown product, counts in
// other.
type chartStats struct {
	mu        sync.Mutex
	byProduct atomic.Pointer[map[string]*doStats]
	other     *doStats
}

func newChartStats() *chartStats {
	c := &chartStats{other: newDoStats()}
	empty := map[string]*doStats{}
	c.byProduct.Store(&empty)
	return c
}

// observe counts one `do` answer. It allocates nothing.
func (c *chartStats) observe(product []byte, status int, d time.Duration) {
	st := (*c.byProduct.Load())[string(product)]
	if st == nil {
		st = c.other
	}
	st.codes[dashboard.CodeIndex(status)].Inc()
	st.lat.Observe(d)
}

// latency is every sale's `do` latency summed (and other's), for the
// Prometheus family; it allocates one histogram per scrape.
func (c *chartStats) latency() *metrics.Histogram {
	sum := metrics.NewHistogram(metrics.LatencyBuckets)
	sum.AddFrom(c.other.lat)
	for _, st := range *c.byProduct.Load() {
		sum.AddFrom(st.lat)
	}
	return sum
}

// get returns id's stats, adding them on first sight.
func (c *chartStats) get(id string) *doStats {
	if st := (*c.byProduct.Load())[id]; st != nil {
		return st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := *c.byProduct.Load()
	if st := cur[id]; st != nil {
		return st
	}
	next := make(map[string]*doStats, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	st := newDoStats()
	next[id] = st
	c.byProduct.Store(&next)
	return st
}

// saleSeen is what the sampler remembers of a sale from one second to the
// next: the counters (for the differences), the states (for the markers)
// and the last record written to the timeline.
type saleSeen struct {
	codes      [dashboard.NumCodes]uint64
	buckets    [report.NumBuckets]uint64
	breaker    sale.BreakerState
	recovering bool
	degraded   bool
	last       report.Second // the last record written (Node, Sec zero when none)
}

// sampler builds the samples; only its goroutine touches it.
type sampler struct {
	s     *Server
	frame dashboard.Frame
	seen  map[string]*saleSeen
	buf   []uint64 // bucket scratch
	all   []uint64 // every sale's buckets of the second
	rec   []byte   // record scratch

	degradedAll   bool
	reloadVersion uint64
	reloadAt      time.Time
	started       bool

	// timeline writes the records of one second (stock.AppendTimeline in
	// the edge); nil: none.
	timeline func(ctx context.Context, productID string, sec int64, rec []byte) error
}

func (s *Server) newSampler() *sampler {
	sp := &sampler{s: s, seen: map[string]*saleSeen{}, buf: make([]uint64, report.NumBuckets), all: make([]uint64, report.NumBuckets)}
	if s.store != nil {
		sp.timeline = s.store.AppendTimeline
	}
	return sp
}

// runCharts samples once a second until ctx ends.
func (s *Server) runCharts(ctx context.Context, every time.Duration) {
	sp := s.newSampler()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sp.tick(ctx, s.opts.Now()/1e6)
		}
	}
}

// tick takes one sample at nowMs.
func (sp *sampler) tick(ctx context.Context, nowMs int64) {
	s := sp.s
	f := &sp.frame
	f.TimeMs, f.N = nowMs, 0
	clear(sp.all)
	f.Outbox, f.Lag = s.orders.outbox.Load(), s.orders.lag.Load()
	if s.orders.consumer == nil {
		f.Lag = -1
	}
	sp.edgeMarks(nowMs)
	per := s.orders.perProduct.Load()
	node := int64(s.snap.Load().Doc.Config.NodeID)
	for _, e := range s.env.Sales.List() {
		id := e.ProductID
		seen := sp.seen[id]
		st := s.m.charts.get(id)
		if seen == nil {
			// First sight: the states as a healthy sale's, so that one met
			// fenced, degraded or with its breaker open is marked so; the
			// counters from zero — every answer since the sale's stats were
			// made belongs to this second.
			seen = &saleSeen{breaker: sale.Closed}
			sp.seen[id] = seen
		}
		var rec report.Second
		rec.Node, rec.Sec = node, nowMs/1000
		var ps dashboard.ProductSample
		for c := range seen.codes {
			v := st.codes[c].Value()
			d := v - seen.codes[c]
			seen.codes[c] = v
			ps.Codes[c], rec.Codes[c] = uint32(d), uint32(d)
			ps.Attempts += uint32(d)
		}
		st.lat.ReadBuckets(sp.buf)
		for i, v := range sp.buf {
			sp.buf[i] = v - seen.buckets[i]
			seen.buckets[i] = v
			rec.Buckets[i] = uint32(sp.buf[i])
			sp.all[i] += sp.buf[i]
		}
		ps.P50, ps.P99 = quantileMs(sp.buf, 0.5), quantileMs(sp.buf, 0.99)
		ps.Left = e.Remaining()
		rec.Left = ps.Left
		ps.Unpaid, ps.Paid, ps.Expired = -1, -1, -1
		if per != nil {
			if pp, ok := (*per)[id]; ok {
				ps.Unpaid, ps.Paid, ps.Expired = int32(pp.unpaid), int32(pp.paid), int32(pp.expired)
			}
		}
		ps.Waiting, ps.Admitted, ps.Active = -1, -1, -1
		rec.Joined, rec.Waiting, rec.Admitted, rec.Active = -1, -1, -1, -1
		if rf, ok := s.sale.RoomFigures(e, nowMs); ok {
			ps.Waiting, ps.Admitted, ps.Active = int32(rf.Waiting), int32(rf.Admitted), int32(rf.Active)
			rec.Joined, rec.Waiting, rec.Admitted, rec.Active = rf.Joined, rf.Waiting, rf.Admitted, rf.Active
		}
		rec.Flags = sp.saleMarks(id, seen, nowMs)
		if f.N < len(f.IDs) {
			f.IDs[f.N], f.P[f.N] = id, ps
			f.N++
		}
		sp.record(ctx, id, seen, &rec)
	}
	f.P50, f.P99 = quantileMs(sp.all, 0.5), quantileMs(sp.all, 0.99)
	s.history.Add(f)
}

// quantileMs is the q-quantile of one second's latency buckets in ms, -1
// when none.
func quantileMs(buckets []uint64, q float64) float32 {
	v := metrics.Quantile(metrics.LatencyBuckets, buckets, q)
	if v < 0 {
		return -1
	}
	return float32(v * 1000)
}

// edgeMarks marks a reload and the degrade switch of every sale.
func (sp *sampler) edgeMarks(nowMs int64) {
	s := sp.s
	lr := s.LastReload()
	all, _ := s.sale.DegradeState()
	if !sp.started {
		// The start is not a reload; a degrade switch already on is marked
		// below, as one met at first sight.
		sp.started = true
		sp.reloadVersion, sp.reloadAt = lr.Version, lr.At
	}
	if lr.At != sp.reloadAt {
		kind := dashboard.MarkReload
		if lr.Error != "" {
			kind = dashboard.MarkReloadFailed
		}
		s.history.Mark(dashboard.Mark{TimeMs: lr.At.UnixMilli(), Kind: kind, Version: lr.Version})
		sp.reloadVersion, sp.reloadAt = lr.Version, lr.At
	}
	if all != sp.degradedAll {
		kind := dashboard.MarkDegradeOff
		if all {
			kind = dashboard.MarkDegradeOn
		}
		s.history.Mark(dashboard.Mark{TimeMs: nowMs, Kind: kind})
		sp.degradedAll = all
	}
}

// saleMarks marks a sale's breaker, fence and own degrade switch changing,
// and returns its flags for the timeline.
func (sp *sampler) saleMarks(id string, seen *saleSeen, nowMs int64) uint8 {
	s := sp.s
	mark := func(kind string) { s.history.Mark(dashboard.Mark{TimeMs: nowMs, Kind: kind, Product: id}) }
	var flags uint8
	br := s.sale.ProductBreakerState(id)
	if br != seen.breaker {
		switch {
		case br == sale.Open:
			mark(dashboard.MarkBreakerOpen)
		case br == sale.Closed:
			mark(dashboard.MarkBreakerClosed)
		}
		seen.breaker = br
	}
	if br != sale.Closed {
		flags |= report.FlagBreakerOpen
	}
	// changed marks a flag turning on or off.
	changed := func(now bool, was *bool, on, off string) {
		if now != *was {
			if now {
				mark(on)
			} else {
				mark(off)
			}
			*was = now
		}
	}
	rec, _ := s.sale.Recovering(id)
	changed(rec, &seen.recovering, dashboard.MarkFenced, dashboard.MarkRecovered)
	if rec {
		flags |= report.FlagRecovering
	}
	all, _ := s.sale.DegradeState()
	deg := s.sale.Degraded([]byte(id)) && !all // the switch of every sale is the edge's mark
	changed(deg, &seen.degraded, dashboard.MarkDegradeOn, dashboard.MarkDegradeOff)
	if deg || all {
		flags |= report.FlagDegraded
	}
	return flags
}

// record writes the sale's second to its timeline when something moved:
// answers, the stock, the room, the flags. A quiet second is not written;
// the report carries the last figures forward.
func (sp *sampler) record(ctx context.Context, id string, seen *saleSeen, rec *report.Second) {
	if sp.timeline == nil {
		return
	}
	prev := seen.last
	if rec.Attempts() == 0 && prev.Sec != 0 && rec.Flags == prev.Flags && rec.Left == prev.Left &&
		rec.Joined == prev.Joined && rec.Waiting == prev.Waiting && rec.Admitted == prev.Admitted && rec.Active == prev.Active {
		return
	}
	sp.rec = rec.Append(sp.rec[:0])
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := sp.timeline(wctx, id, rec.Sec, sp.rec)
	cancel()
	if err != nil {
		// The record of this second is lost; the next one that moves is
		// written again.
		sp.s.log.Debug("sale timeline not written", "product", id, "err", err)
		return
	}
	seen.last = *rec
}
