package filters

import (
	"slices"
	"sync"
)

// Zones holds the filter state that must outlive a config reload, keyed by
// name: limiter zones (like nginx's shared zones, a reload that keeps a zone
// name keeps its buckets even if the rate changed), connection counters, and
// per-filter counters for metrics. The proxy creates one Zones at start and
// passes it in Env to every Build; the zero value is ready to use.
//
// Zones are never dropped: a zone a new config no longer names keeps its
// (bounded) memory until the process exits, so that renaming a zone back
// and forth during an incident does not reset anyone's limits.
type Zones struct {
	mu       sync.Mutex
	limiters map[string]*Limiter
	conns    map[string]*ConnZone
	stats    map[string]*Stats
}

// NewZones returns an empty set of zones.
func NewZones() *Zones { return &Zones{} }

// Limiter returns the limit_req zone called name, creating it on first use.
// An existing zone keeps its state; a different maxKeys changes its bound in
// place (the last caller wins if two filters disagree).
func (z *Zones) Limiter(name string, maxKeys int) *Limiter {
	z.mu.Lock()
	defer z.mu.Unlock()
	if l, ok := z.limiters[name]; ok {
		if maxKeys <= 0 {
			maxKeys = DefaultMaxKeys
		}
		if l.MaxKeys() != maxKeys {
			l.SetMaxKeys(maxKeys)
		}
		return l
	}
	if z.limiters == nil {
		z.limiters = map[string]*Limiter{}
	}
	l := NewLimiter(maxKeys)
	z.limiters[name] = l
	return l
}

// Conns returns the connection-count zone called name, creating it on first
// use. In-flight requests of the old config keep counting in it after a reload.
func (z *Zones) Conns(name string) *ConnZone {
	z.mu.Lock()
	defer z.mu.Unlock()
	if c, ok := z.conns[name]; ok {
		return c
	}
	if z.conns == nil {
		z.conns = map[string]*ConnZone{}
	}
	c := NewConnZone()
	z.conns[name] = c
	return c
}

// Stats returns the counters of the filter called name, so that a reload does
// not reset what Prometheus sees as monotonic counters.
func (z *Zones) Stats(name string) *Stats {
	z.mu.Lock()
	defer z.mu.Unlock()
	if s, ok := z.stats[name]; ok {
		return s
	}
	if z.stats == nil {
		z.stats = map[string]*Stats{}
	}
	s := &Stats{}
	z.stats[name] = s
	return s
}

// EachStats calls fn for every filter's counters, in name order (stable
// output for the metrics exporter).
func (z *Zones) EachStats(fn func(name string, s *Stats)) {
	z.mu.Lock()
	names := make([]string, 0, len(z.stats))
	for n := range z.stats {
		names = append(names, n)
	}
	stats := make([]*Stats, len(names))
	slices.Sort(names)
	for i, n := range names {
		stats[i] = z.stats[n]
	}
	z.mu.Unlock()
	for i, n := range names {
		fn(n, stats[i])
	}
}

// EachLimiter calls fn for every limiter zone in name order (for gauges of
// keys tracked and evictions).
func (z *Zones) EachLimiter(fn func(name string, l *Limiter)) {
	z.mu.Lock()
	names := make([]string, 0, len(z.limiters))
	for n := range z.limiters {
		names = append(names, n)
	}
	slices.Sort(names)
	ls := make([]*Limiter, len(names))
	for i, n := range names {
		ls[i] = z.limiters[n]
	}
	z.mu.Unlock()
	for i, n := range names {
		fn(n, ls[i])
	}
}
