package sale

import (
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the circuit breaker's state.
type BreakerState int32

const (
	Closed   BreakerState = iota // Redis calls flow
	Open                         // the product's sale answers 503 DEGRADED at the edge
	HalfOpen                     // one probe at a time decides
)

var breakerNames = [...]string{"closed", "open", "half_open"}

func (s BreakerState) String() string { return breakerNames[s] }

// Breaker protects Redis (and shoppers' patience) when Redis fails, for one
// product (see Breakers): after `failures` consecutive failed calls it
// opens, and the product's sale answers 503 DEGRADED without calling Redis;
// after openFor it lets a single probe through (half-open); the probe's
// success closes it, its failure opens it again. The closed-state path is
// two atomic loads.
//
// A failure is one failed Redis call, not one failed purchase attempt: a
// coalesced script call carries up to stock.Options.MaxBatch attempts, and
// one stall must not count as a hundred (stock.ErrCallFailed marks one
// attempt per failed call). A call Redis refused before anything was sent
// (a refused dial, CLUSTERDOWN) is a failed call; an attempt dropped unsent
// from its queue says nothing about Redis and is not counted.
type Breaker struct {
	failures int64
	openFor  time.Duration
	now      func() time.Time
	onChange func(from, to BreakerState)

	state      atomic.Int32
	consec     atomic.Int64
	openedAt   atomic.Int64 // unix nanos
	probing    atomic.Bool
	mu         sync.Mutex // serialises transitions
	Transition atomic.Uint64
}

// NewBreaker returns a closed breaker.
func NewBreaker(failures int, openFor time.Duration, now func() time.Time, onChange func(from, to BreakerState)) *Breaker {
	if now == nil {
		now = time.Now
	}
	return &Breaker{failures: int64(failures), openFor: openFor, now: now, onChange: onChange}
}

// State is the current state.
func (b *Breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// Allow reports whether a Redis call may be made now. A true answer in
// half-open state makes the caller the probe: it must report Success,
// Failure or Abstain (see Admit).
func (b *Breaker) Allow() bool {
	ok, _ := b.Admit()
	return ok
}

// Admit is Allow that also says whether the caller is the half-open probe.
// A probe whose call ended without a verdict on Redis (never sent, or its
// failure counted by another attempt of the same call) must Abstain, or
// the breaker would wait for a verdict that never comes.
func (b *Breaker) Admit() (ok, probe bool) {
	switch BreakerState(b.state.Load()) {
	case Closed:
		return true, false
	case Open:
		if b.now().UnixNano()-b.openedAt.Load() < int64(b.openFor) {
			return false, false
		}
		b.set(Open, HalfOpen)
		fallthrough
	default: // half-open: one probe in flight at a time
		ok := b.probing.CompareAndSwap(false, true)
		return ok, ok
	}
}

// Abstain hands the probe back without a verdict: the next Admit in
// half-open state becomes the probe. Only the probe may call it.
func (b *Breaker) Abstain() {
	b.probing.Store(false)
}

// Success records a call that worked.
func (b *Breaker) Success() {
	b.consec.Store(0)
	if BreakerState(b.state.Load()) != Closed {
		b.probing.Store(false)
		b.set(HalfOpen, Closed)
	}
}

// Failure records a call that failed (timeout, connection error): once per
// call, however many attempts it carried.
func (b *Breaker) Failure() {
	n := b.consec.Add(1)
	switch BreakerState(b.state.Load()) {
	case HalfOpen:
		b.probing.Store(false)
		b.openedAt.Store(b.now().UnixNano())
		b.set(HalfOpen, Open)
	case Closed:
		if n >= b.failures {
			b.openedAt.Store(b.now().UnixNano())
			b.set(Closed, Open)
		}
	}
}

func (b *Breaker) set(from, to BreakerState) {
	b.mu.Lock()
	changed := b.state.CompareAndSwap(int32(from), int32(to))
	b.mu.Unlock()
	if changed {
		b.Transition.Add(1)
		if b.onChange != nil {
			b.onChange(from, to)
		}
	}
}

// Breakers is one Breaker per product, all with the same config.
//
// Per product rather than per edge: on Redis Cluster a product's keys share
// its hash tag, so one slot and one master serve all of its calls, and a
// dead master must close only the products it serves. With one breaker per
// edge, a hot product on a dead master opened the breaker for every product
// and the half-open probe, whoever's attempt it was, could go to any node.
// Per product, the probe is that product's own call, to that product's node.
//
// Per product rather than per Redis node: mapping a product to its node
// means following the cluster's slot map through failovers, which the client
// keeps to itself; a per-product breaker needs no map and is never wrong
// about where the product lives. What it costs: products on one dead node
// each count their own failures before they open, breaker_failures calls
// each rather than once for the node — a few failed calls per product, each
// bounded by redis.timeout.
//
// Bounded: a breaker is made for a product the activity registry knows
// (the handler asks only after the product check), once, and kept like the
// registry's product states while the process runs. Lookups are one atomic
// load and a map read, no lock, no allocation.
type Breakers struct {
	failures int
	openFor  time.Duration
	now      func() time.Time
	onChange func(product string, from, to BreakerState)

	m           atomic.Pointer[map[string]*Breaker]
	mu          sync.Mutex    // serialises makers
	transitions atomic.Uint64 // every product's, for the edge-wide counter
}

// NewBreakers returns the breakers of an edge: failures consecutive failed
// calls for one product open its breaker for openFor (sale.breaker_failures,
// sale.breaker_open_for). onChange, if set, hears every product's
// transitions.
func NewBreakers(failures int, openFor time.Duration, now func() time.Time, onChange func(product string, from, to BreakerState)) *Breakers {
	bs := &Breakers{failures: failures, openFor: openFor, now: now, onChange: onChange}
	empty := map[string]*Breaker{}
	bs.m.Store(&empty)
	return bs
}

// For is the product's breaker, made on first use. product must be one the
// activity registry knows, and a string the caller keeps (an Activity's id,
// not a view of a request buffer).
func (bs *Breakers) For(product string) *Breaker {
	if b := (*bs.m.Load())[product]; b != nil {
		return b
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	old := *bs.m.Load()
	if b := old[product]; b != nil {
		return b
	}
	b := NewBreaker(bs.failures, bs.openFor, bs.now, func(from, to BreakerState) {
		bs.transitions.Add(1)
		if bs.onChange != nil {
			bs.onChange(product, from, to)
		}
	})
	// Copy on write: made once per product, read on every attempt.
	next := make(map[string]*Breaker, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[product] = b
	bs.m.Store(&next)
	return b
}

// State is the product's breaker state; Closed for a product that has made
// no call yet. It never makes a breaker.
func (bs *Breakers) State(product string) BreakerState {
	if b := (*bs.m.Load())[product]; b != nil {
		return b.State()
	}
	return Closed
}

// Transitions is the product's breaker transitions (0 before its first call).
func (bs *Breakers) Transitions(product string) uint64 {
	if b := (*bs.m.Load())[product]; b != nil {
		return b.Transition.Load()
	}
	return 0
}

// Worst is the edge's summary: Open if any product's breaker is open, else
// HalfOpen if any is probing, else Closed.
func (bs *Breakers) Worst() BreakerState {
	worst := Closed
	for _, b := range *bs.m.Load() {
		switch b.State() {
		case Open:
			return Open
		case HalfOpen:
			worst = HalfOpen
		}
	}
	return worst
}

// AllTransitions counts every product's transitions since the edge started.
func (bs *Breakers) AllTransitions() uint64 { return bs.transitions.Load() }
