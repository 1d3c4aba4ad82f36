package filters

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// u128 is an address as a number, IPv4 in its IPv4-mapped IPv6 form so that
// one table answers for both families.
type u128 struct{ hi, lo uint64 }

func addrU128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

func (x u128) inc() (u128, bool) {
	lo := x.lo + 1
	hi := x.hi
	if lo == 0 {
		hi++
		if hi == 0 {
			return u128{}, false
		}
	}
	return u128{hi, lo}, true
}

var u128Max = u128{^uint64(0), ^uint64(0)}

// prefixRule is one CIDR with the value it maps to; rules are ordered and the
// first that contains an address decides (nginx allow/deny semantics).
type prefixRule struct {
	first, last u128 // inclusive
	val         uint8
}

func rulePrefix(p netip.Prefix, val uint8) prefixRule {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	first := addrU128(p.Addr())
	last := first
	host := 128 - bits
	switch {
	case host >= 64:
		last.lo = ^uint64(0)
		if host == 128 {
			last.hi = ^uint64(0)
		} else {
			last.hi |= (uint64(1) << (host - 64)) - 1
		}
	case host > 0:
		last.lo |= (uint64(1) << host) - 1
	}
	return prefixRule{first: first, last: last, val: val}
}

func ruleAll(val uint8) prefixRule { return prefixRule{last: u128Max, val: val} }

// rangeSet answers "which rule decides for this address" with one binary
// search over disjoint intervals. Overlapping prefixes with first-match-wins
// are flattened at build time, so lookup cost is log2(intervals) comparisons
// and never allocates, however many rules there are.
type rangeSet struct {
	starts []u128 // sorted, starts[0] is ::
	vals   []uint8
}

// buildRangeSet is O(rules x boundaries); fine for the thousands of rules a
// config holds, and it only runs when a config is loaded.
func buildRangeSet(rules []prefixRule, def uint8) rangeSet {
	bounds := []u128{{}}
	for _, r := range rules {
		bounds = append(bounds, r.first)
		if next, ok := r.last.inc(); ok {
			bounds = append(bounds, next)
		}
	}
	slices.SortFunc(bounds, func(a, b u128) int {
		switch {
		case a.less(b):
			return -1
		case b.less(a):
			return 1
		}
		return 0
	})
	bounds = slices.Compact(bounds)
	var s rangeSet
	for _, b := range bounds {
		// Prefixes are aligned, so an elementary interval lies wholly inside
		// or outside each rule: testing its first address is enough.
		v := def
		for _, r := range rules {
			if !b.less(r.first) && !r.last.less(b) {
				v = r.val
				break
			}
		}
		if n := len(s.vals); n > 0 && s.vals[n-1] == v {
			continue
		}
		s.starts = append(s.starts, b)
		s.vals = append(s.vals, v)
	}
	return s
}

func (s *rangeSet) lookup(x u128) uint8 {
	lo, hi := 0, len(s.starts) // invariant: starts[lo] <= x < starts[hi]
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if x.less(s.starts[m]) {
			hi = m
		} else {
			lo = m
		}
	}
	return s.vals[lo]
}

// parseCIDR reads "10.0.0.0/8", "2001:db8::/32" or a single address. A prefix
// with host bits set is refused: "10.1.2.3/8" is almost always a typo, and
// guessing which part the operator meant would be a security decision.
func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("invalid CIDR %q", s)
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: zones are not allowed", s)
		}
		if m := p.Masked(); m != p {
			return netip.Prefix{}, fmt.Errorf("CIDR %q has host bits set (did you mean %s?)", s, m)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid address or CIDR %q", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
