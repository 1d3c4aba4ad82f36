package catalog

import (
	"sort"
	"sync"
	"sync/atomic"
)

// State is a product's runtime state on this edge. It outlives changes of
// the Sale itself (a reload that moves the end time keeps the flag).
type State struct {
	soldOut   atomic.Bool
	remaining atomic.Int64
	// hotspot detection: requests counted per one-second window.
	winSec  atomic.Int64
	winHits atomic.Int64
	hot     atomic.Bool
	// attempts counts purchase attempts (do calls) that reached the sale
	// filters on this edge, for the dashboard's attempts per second.
	attempts atomic.Uint64
	// gen counts releases and restocks seen for the product; caches of
	// "this shopper is at the limit" include it, so a release forgets them.
	gen atomic.Uint32
	// tokensFrom is the highest token horizon seen for the sale (Unix ms):
	// Redis refuses a purchase token expiring at or before it.
	tokensFrom atomic.Int64
}

// TokensFrom is the highest token horizon this edge has seen for the sale:
// a purchase token expiring at or before it is refused by the deduction.
func (s *State) TokensFrom() int64 { return s.tokensFrom.Load() }

// RaiseTokensFrom records a token horizon; a lower one than known changes
// nothing (a stale read must not undo a later rebuild's).
func (s *State) RaiseTokensFrom(ms int64) {
	for {
		cur := s.tokensFrom.Load()
		if ms <= cur || s.tokensFrom.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// Generation is the product's release generation.
func (s *State) Generation() uint32 { return s.gen.Load() }

// BumpGeneration forgets what edge caches know about the product's buyers.
func (s *State) BumpGeneration() { s.gen.Add(1) }

// CountAttempt counts one purchase attempt.
func (s *State) CountAttempt() { s.attempts.Add(1) }

// Attempts is the number of purchase attempts counted so far.
func (s *State) Attempts() uint64 { return s.attempts.Load() }

// SoldOut reports the local sold-out flag.
func (s *State) SoldOut() bool { return s.soldOut.Load() }

// SetSoldOut sets or clears the flag and reports whether it changed.
func (s *State) SetSoldOut(v bool) bool { return s.soldOut.Swap(v) != v }

// Remaining is the last stock figure this edge heard of (display only: the
// truth is in Redis).
func (s *State) Remaining() int64 { return s.remaining.Load() }

// SetRemaining records a stock figure.
func (s *State) SetRemaining(n int64) { s.remaining.Store(n) }

// Hot reports whether the product is a hotspot now.
func (s *State) Hot() bool { return s.hot.Load() }

// Hit counts one request at nowMs and reports whether this request made the
// product cross the threshold (so the caller logs it once per second). The
// window is a fixed second: cheap, and precise enough to spot a stampede.
func (s *State) Hit(nowMs int64, threshold int64) (crossed bool) {
	sec := nowMs / 1000
	if cur := s.winSec.Load(); cur != sec {
		if s.winSec.CompareAndSwap(cur, sec) {
			prev := s.winHits.Swap(0)
			// Keep the flag while the previous full second was hot.
			if cur == sec-1 && threshold > 0 && prev > threshold {
				s.hot.Store(true)
			} else {
				s.hot.Store(false)
			}
		}
	}
	n := s.winHits.Add(1)
	if threshold > 0 && n == threshold+1 {
		s.hot.Store(true)
		return true
	}
	return false
}

// Entry pairs an activity with its state.
type Entry struct {
	*Sale
	*State
}

// Registry maps product ids to entries.
type Registry struct {
	mu     sync.Mutex // serialises writers
	m      atomic.Pointer[map[string]Entry]
	states map[string]*State // guarded by mu; never shrinks while the process runs
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{states: map[string]*State{}}
	empty := map[string]Entry{}
	r.m.Store(&empty)
	return r
}

// Get looks a product up. The string conversion in a map index does not
// allocate.
func (r *Registry) Get(productID []byte) (Entry, bool) {
	e, ok := (*r.m.Load())[string(productID)]
	return e, ok
}

// GetString is Get for string ids.
func (r *Registry) GetString(productID string) (Entry, bool) {
	e, ok := (*r.m.Load())[productID]
	return e, ok
}

// StateOf returns the state of a product, creating it if needed, so that a
// sold-out broadcast for a product this edge has not loaded yet is kept.
func (r *Registry) StateOf(productID string) *State {
	if e, ok := r.GetString(productID); ok {
		return e.State
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(productID)
}

func (r *Registry) stateLocked(id string) *State {
	s := r.states[id]
	if s == nil {
		s = &State{}
		s.remaining.Store(-1)
		r.states[id] = s
	}
	return s
}

// Put adds or replaces one sale.
func (r *Registry) Put(a *Sale) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := *r.m.Load()
	next := make(map[string]Entry, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[a.ProductID] = Entry{Sale: a, State: r.stateLocked(a.ProductID)}
	r.m.Store(&next)
}

// Replace swaps the whole set (a refresh that read every activity).
func (r *Registry) Replace(all []*Sale) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]Entry, len(all))
	for _, a := range all {
		next[a.ProductID] = Entry{Sale: a, State: r.stateLocked(a.ProductID)}
	}
	r.m.Store(&next)
}

// List returns the entries sorted by product id.
func (r *Registry) List() []Entry {
	m := *r.m.Load()
	out := make([]Entry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProductID < out[j].ProductID })
	return out
}

// Len is the number of activities.
func (r *Registry) Len() int { return len(*r.m.Load()) }
