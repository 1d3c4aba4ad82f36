package filters

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"flashgate/conf/field"
)

// Stats counts a filter's decisions. It lives in Zones, keyed by filter
// name, so the counters survive reloads and stay monotonic for Prometheus.
type Stats struct {
	Passed         atomic.Uint64
	Rejected       atomic.Uint64
	DryRunRejected atomic.Uint64 // would have rejected; dry_run let it through
}

// Entry is one compiled stage of a chain.
type Entry struct {
	Name, Type string
	Filter     Filter
	DryRun     bool
	Stats      *Stats
}

// Chain is an immutable, compiled filter list. Run is a flat loop over a
// slice: no closures, maps or allocations per request. Disabled filters are
// not in it at all.
type Chain struct {
	entries []Entry
	now     func() int64
}

// NewChain makes a chain of entries (copied). Entries without Stats get
// private counters. The clock used when a Request arrives without NowNano
// is the wall clock; Build uses Env.Now instead.
func NewChain(entries []Entry) *Chain {
	c := &Chain{entries: slices.Clone(entries), now: wallNow}
	for i := range c.entries {
		if c.entries[i].Stats == nil {
			c.entries[i].Stats = &Stats{}
		}
	}
	return c
}

func wallNow() int64 { return time.Now().UnixNano() }

// Len is the number of filters that run.
func (c *Chain) Len() int {
	if c == nil {
		return 0
	}
	return len(c.entries)
}

// Entries returns a copy of the chain's entries (for metrics and the admin API).
func (c *Chain) Entries() []Entry {
	if c == nil {
		return nil
	}
	return slices.Clone(c.entries)
}

// Run passes r through the filters in order and returns the first real
// rejection. A rejection by a dry_run filter is only counted, and the chain
// goes on as if it had passed.
//
// A passing verdict carries the longest Delay any (non-dry-run) filter asked
// for; the caller holds the request that long before going on. The longest,
// not the sum: every limiter already booked the request at the same instant,
// so once the longest delay is over every limiter's rate is respected. This
// is what nginx does with several limit_req in one location.
//
// r.NowNano is filled from the chain's clock if the caller left it zero.
// Whatever the verdict, the caller must call r.Finish() once the request is
// done: filters before a rejecting one may hold slots (conn_limit).
func (c *Chain) Run(r *Request) Verdict {
	if c == nil {
		return Pass
	}
	if r.NowNano == 0 {
		r.NowNano = c.now()
	}
	var delay time.Duration
	for i := range c.entries {
		e := &c.entries[i]
		v := e.Filter.Handle(r)
		if v.Reject == nil {
			e.Stats.Passed.Add(1)
			if !e.DryRun && v.Delay > delay {
				delay = v.Delay
			}
			continue
		}
		if e.DryRun {
			e.Stats.DryRunRejected.Add(1)
			continue
		}
		e.Stats.Rejected.Add(1)
		return v
	}
	return Verdict{Delay: delay}
}

// Build compiles specs into a chain. Each spec's type is looked up in the
// registry and its constructor decodes its own params. Errors are relative to
// the filters list ("[2].rate"); the caller prefixes "filters".
//
// Names default to the type. Two filters with the same name are an error
// rather than being renamed "ip_limit#2": the name keys the filter's counters
// and, by default, its limiter zone, and a generated name would silently
// change meaning when someone reorders the list. Disabled specs are checked
// too (a mistake should not wait until someone enables the filter during an
// incident) but are left out of the chain.
//
// env.Zones carries the state that must survive reloads; pass the same Zones
// to every Build. A nil env or nil Zones gets fresh state.
func Build(specs []Spec, env *Env) (*Chain, field.Errors) {
	e := Env{}
	if env != nil {
		e = *env
	}
	if e.Zones == nil {
		e.Zones = NewZones()
	}
	if e.Now == nil {
		e.Now = wallNow
	}
	var errs field.Errors
	var entries []Entry
	names := map[string]int{}
	finishers := 0
	for i, sp := range specs {
		at := fmt.Sprintf("[%d]", i)
		ctor, ok := Lookup(sp.Type)
		if !ok {
			known := Types()
			slices.Sort(known)
			what := "is required"
			if sp.Type != "" {
				what = fmt.Sprintf("unknown filter type %q", sp.Type)
			}
			errs.Add(at+".type", "%s (known types: %s)", what, strings.Join(known, ", "))
			continue
		}
		if sp.Name == "" {
			sp.Name = sp.Type
		}
		if j, dup := names[sp.Name]; dup {
			errs.Add(at+".name", "%q is also the name of filters[%d]; give each filter of a type used twice its own name", sp.Name, j)
			continue
		}
		names[sp.Name] = i
		f, ferrs := ctor(sp, &e)
		if len(ferrs) > 0 {
			errs.Nest(at, ferrs)
			continue
		}
		if !sp.Enabled {
			continue
		}
		if _, ok := f.(Finisher); ok {
			finishers++
		}
		entries = append(entries, Entry{Name: sp.Name, Type: sp.Type, Filter: f, DryRun: sp.DryRun, Stats: e.Zones.Stats(sp.Name)})
	}
	if finishers > maxFinishers {
		errs.Add("", "at most %d filters that hold a slot until the request ends (conn_limit) fit in one chain", maxFinishers)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c := NewChain(entries)
	c.now = e.Now
	return c, nil
}
