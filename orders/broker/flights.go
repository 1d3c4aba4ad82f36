package broker

import (
	"context"
	"sync"
	"sync/atomic"
)

// Flights counts the work that may still put an order event into Kafka: a
// purchase from before its deduction until its publish returned, a relay
// sweep from reading the outbox until its publishes returned. Quiesce waits
// for all of it that started before the call, which is what a ledger
// rebuild needs to know: once every edge is quiet on a fence, no event of a
// deduction made before the fence can still arrive (see stock.Store.Fence).
//
// Enter and Leave take no lock and allocate nothing; Quiesce seals the
// current generation and starts a new one.
type Flights struct {
	mu  sync.Mutex // serialises Quiesce's swap
	cur atomic.Pointer[flightGen]
}

type flightGen struct {
	n      atomic.Int64
	sealed atomic.Bool
	once   sync.Once
	done   chan struct{}
}

func newGen() *flightGen { return &flightGen{done: make(chan struct{})} }

// NewFlights returns an empty tracker.
func NewFlights() *Flights {
	f := &Flights{}
	f.cur.Store(newGen())
	return f
}

// Flight is one unit of work Enter counted; Leave it exactly once.
type Flight struct{ g *flightGen }

// Enter counts one unit of work. A nil *Flights counts nothing.
func (f *Flights) Enter() Flight {
	if f == nil {
		return Flight{}
	}
	for {
		g := f.cur.Load()
		g.n.Add(1)
		if !g.sealed.Load() {
			return Flight{g}
		}
		// Quiesce sealed this generation after we loaded it: counting in
		// it could keep Quiesce waiting on work that started after it.
		// Nothing has happened yet; count in the new one instead.
		g.leave()
	}
}

// Leave ends the work.
func (fl Flight) Leave() {
	if fl.g != nil {
		fl.g.leave()
	}
}

func (g *flightGen) leave() {
	if g.n.Add(-1) == 0 && g.sealed.Load() {
		g.once.Do(func() { close(g.done) })
	}
}

// Quiesce returns once every unit of work entered before it was called has
// left, or with ctx's error.
func (f *Flights) Quiesce(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	old := f.cur.Load()
	f.cur.Store(newGen())
	old.sealed.Store(true)
	f.mu.Unlock()
	if old.n.Load() == 0 {
		old.once.Do(func() { close(old.done) })
	}
	select {
	case <-old.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
