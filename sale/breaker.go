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
	Open                         // the sale answers 503 DEGRADED at the edge
	HalfOpen                     // one probe at a time decides
)

var breakerNames = [...]string{"closed", "open", "half_open"}

func (s BreakerState) String() string { return breakerNames[s] }

// Breaker protects Redis (and shoppers' patience) when Redis fails: after
// `failures` consecutive failed calls it opens, and the sale answers 503
// DEGRADED without calling Redis; after openFor it lets a single probe
// through (half-open); the probe's success closes it, its failure opens it
// again. The closed-state path is two atomic loads.
//
// A failure is one failed Redis call, not one failed purchase attempt: a
// coalesced script call carries up to stock.Options.MaxBatch attempts, and
// one stall must not count as a hundred (stock.ErrCallFailed marks one
// attempt per failed call). An attempt that was never sent says nothing
// about Redis and is not counted.
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
