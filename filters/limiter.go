package filters

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultMaxKeys bounds a limiter zone when max_keys is not set: about a
// million clients, at most ~48 MB of table (nginx's equivalent is a 64 MB
// zone). Memory grows with the keys actually seen, not with this bound.
const DefaultMaxKeys = 1 << 20

// MaxRatePerSecond is the largest rate accepted; it keeps every product in
// Take's arithmetic inside int64.
const MaxRatePerSecond = 1_000_000

// MaxBurst is the largest burst: the excess, in milli-requests, is stored in
// 32 bits.
const MaxBurst = 1_000_000

const (
	limMaxShards = 256
	// Each shard is sized for max_keys/shards; fewer shards for small zones
	// keep that share from being tiny.
	limKeysPerShardMin = 256
	// nginx looks for idle nodes to free on every request; a sweep of a whole
	// shard every minute (of that shard's own traffic) does the same job in
	// bulk. It needs no goroutine: Take runs it when due.
	sweepEveryMs = 60_000
	// Entries store their last access in 32 bits of milliseconds from the
	// shard's base. When that distance reaches 2^31 (~25 days) the base moves
	// to 2^30 ms (~12 days) ago; entries older than that are then treated as
	// idle for 12 days, which has decayed any sane limit to zero.
	rebaseAtMs   = 1 << 31
	rebaseKeepMs = 1 << 30
	// Victims for eviction are chosen among this many entries near the new
	// key's home slot (sampled LRU, as Redis does it).
	evictSample = 8
)

// Rate is a limit_req rate. Milli is nginx's internal unit, milli-requests
// per second, with nginx's truncation for per-minute rates (1r/m is 16, not
// 16.67), so that limits behave exactly as they did in nginx.
type Rate struct {
	Milli     int64
	n         int64
	perMinute bool
}

// ParseRate reads "10r/s" or "600r/m": a positive decimal count without sign,
// spaces or leading zeros, then the unit. Per-minute rates give the sub-1r/s
// rates nginx allows (30r/m is one request every two seconds).
func ParseRate(s string) (Rate, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	bad := func(why string) (Rate, error) {
		return Rate{}, fmt.Errorf("invalid rate %q: %s", s, why)
	}
	if i == 0 {
		return bad(`want requests per second or minute, e.g. "10r/s" or "600r/m"`)
	}
	if s[0] == '0' {
		return bad("the count must be positive and have no leading zeros")
	}
	var perMinute bool
	switch s[i:] {
	case "r/s":
	case "r/m":
		perMinute = true
	default:
		return bad(`the unit must be "r/s" or "r/m"`)
	}
	limit, scale := int64(MaxRatePerSecond), int64(1)
	if perMinute {
		limit, scale = MaxRatePerSecond*60, 60
	}
	if i > 10 {
		return bad(fmt.Sprintf("at most %d%s", limit, s[i:]))
	}
	var n int64
	for _, c := range s[:i] {
		n = n*10 + int64(c-'0')
	}
	if n > limit {
		return bad(fmt.Sprintf("at most %d%s", limit, s[i:]))
	}
	return Rate{Milli: n * 1000 / scale, n: n, perMinute: perMinute}, nil
}

// String is the rate as written, e.g. "10r/s".
func (r Rate) String() string {
	if r.n == 0 {
		return ""
	}
	if r.perMinute {
		return fmt.Sprintf("%dr/m", r.n)
	}
	return fmt.Sprintf("%dr/s", r.n)
}

// UnmarshalYAML lets field.Decode read a rate with its path and line.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf(`want a rate such as "10r/s"`)
	}
	v, err := ParseRate(n.Value)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Limit is one limit_req directive applied to a zone.
type Limit struct {
	Rate Rate
	// Burst is how many requests above the rate are tolerated (nginx burst=).
	Burst int
	// Delay is how many of those pass without delay (nginx delay=); the rest
	// of the burst is delayed to the rate. Delay >= Burst is nodelay.
	Delay int
}

// Limiter is a limit_req zone: per key, the excess in milli-requests and the
// time of the last accepted request. Take applies nginx's arithmetic exactly:
//
//	excess = max(excess - rate*elapsed_ms/1000 + 1000, 0)
//	excess > burst*1000                -> reject, state unchanged
//	else store excess, pass after (excess - delay*1000)*1000/rate ms if positive
//
// A key seen for the first time passes with excess 0, so a burst of B lets
// B+1 simultaneous requests through (the first is not "excess").
//
// Storage is sharded open addressing of 24-byte entries (16-byte key, 32-bit
// last access, 32-bit excess): about 32-48 bytes per key including the spare
// slots, against ~128 for nginx's rbtree nodes or a Go map of pointers.
//
// The zone is bounded by its max keys. Before growing or evicting, a shard
// drops entries that are indistinguishable from absent ones (their excess
// would compute to 0, so removing them changes no decision). When a shard is
// still full, the least recently used of a few entries near the new key's
// slot is evicted: an approximate LRU, like nginx dropping the tail of its
// LRU queue, and like it a flood of new keys can push out a throttled one.
// Keys are spread over the shards by a seeded hash, so each shard holds
// max_keys/shards; a zone may start evicting slightly before it holds
// max_keys in total.
type Limiter struct {
	keyTable
}

// keyTable is the Limiter's storage: sharded, bounded by max keys, idle
// entries swept, the rest evicted by sampled LRU. The Redis policy's edge
// cache (redislimit.go) is one too, its entries expiring at a time instead
// of decaying at a rate (the rate argument expiring).
type keyTable struct {
	shards  []limShard
	shift   uint
	seed    maphash.Seed
	maxKeys atomic.Int64
	evicted atomic.Uint64
}

// expiring, passed as the rate, marks a table whose slot.a is the time an
// entry expires (relative ms), not the time of its last access.
const expiring = 0

type limShardState struct {
	mu        sync.Mutex
	t         table
	base      int64 // ms; slot.a = ms - base (>= 1), slot.b = excess
	maxKeys   int
	nextSweep int64 // ms
	inserts   int   // since the last sweep
}

// limShard is padded to two cache lines so neighbouring shards' mutexes do
// not share a line (and the adjacent-line prefetcher) between cores.
type limShard struct {
	limShardState
	_ [128 - 80]byte
}

// NewLimiter returns an empty zone holding at most about maxKeys keys
// (DefaultMaxKeys if maxKeys <= 0). Most callers get theirs from
// (*Zones).Limiter so that it survives reloads.
func NewLimiter(maxKeys int) *Limiter {
	l := &Limiter{}
	l.init(maxKeys)
	return l
}

func (l *keyTable) init(maxKeys int) {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := 1
	for n < limMaxShards && n*2*limKeysPerShardMin <= maxKeys {
		n *= 2
	}
	l.shards, l.shift, l.seed = make([]limShard, n), uint(64-bits.TrailingZeros(uint(n))), maphash.MakeSeed()
	for i := range l.shards {
		l.shards[i].t.seed = l.seed
	}
	l.SetMaxKeys(maxKeys)
}

// shard is key's shard and hash.
func (l *keyTable) shard(key *[16]byte) (*limShard, uint64) {
	h := maphash.Bytes(l.seed, key[:])
	return &l.shards[h>>l.shift], h
}

// SetMaxKeys changes the bound (a reload with a new max_keys). The shard
// count stays; shards above the new bound shrink as keys arrive.
func (l *keyTable) SetMaxKeys(maxKeys int) {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	l.maxKeys.Store(int64(maxKeys))
	per := (maxKeys + len(l.shards) - 1) / len(l.shards)
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		s.maxKeys = per
		s.mu.Unlock()
	}
}

// MaxKeys is the configured bound.
func (l *keyTable) MaxKeys() int { return int(l.maxKeys.Load()) }

// Len counts the tracked keys (it locks every shard: for metrics and tests).
func (l *keyTable) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += s.t.n
		s.mu.Unlock()
	}
	return n
}

// Evicted counts keys pushed out while still holding excess (zone too small).
func (l *keyTable) Evicted() uint64 { return l.evicted.Load() }

// Take accounts one request of key at nowNano (unix nanoseconds) against
// lim. On a pass, d is how long nginx would delay the request (0 unless the
// excess is above lim.Delay). On a rejection, d is how long until the same
// request would pass; the state is not changed, as in nginx, so rejected
// requests cost the client nothing and cannot push its unblocking further out.
func (l *Limiter) Take(key [16]byte, nowNano int64, lim Limit) (ok bool, d time.Duration) {
	return l.take(key, nowNano, lim, true)
}

// Peek answers like Take without accounting the request, so a filter with
// several limits can charge none of them when one refuses (nginx accounts
// a request in every limit_req of a location only once all passed).
func (l *Limiter) Peek(key [16]byte, nowNano int64, lim Limit) (ok bool, d time.Duration) {
	return l.take(key, nowNano, lim, false)
}

func (l *Limiter) take(key [16]byte, nowNano int64, lim Limit, commit bool) (ok bool, d time.Duration) {
	// Clamped so that no caller can overflow the 32-bit stored excess.
	rate := min(max(lim.Rate.Milli, 1), MaxRatePerSecond*1000)
	burst := int64(min(max(lim.Burst, 0), MaxBurst)) * 1000
	thr := int64(min(max(lim.Delay, 0), MaxBurst)) * 1000
	s, h := l.shard(&key)
	now := nowNano / int64(time.Millisecond)

	s.mu.Lock()
	rel := s.prepare(now, rate)
	i, found := s.t.find(&key, h)
	if !found {
		if commit {
			s.insert(&key, h, rel, now, rate, &l.keyTable)
		}
		s.mu.Unlock()
		return true, 0
	}
	e := &s.t.slots[i]
	ms := now - (s.base + int64(e.a))
	// nginx's guard against the clock going back: a small step back counts
	// as no time, a large one (a clock reset) as one millisecond.
	if ms < -60000 {
		ms = 1
	} else if ms < 0 {
		ms = 0
	}
	excess := int64(e.b) - rate*ms/1000 + 1000
	if excess < 0 {
		excess = 0
	}
	if excess > burst {
		// Passes once rate*(ms+wait)/1000 >= stored excess + 1000 - burst.
		need := int64(e.b) + 1000 - burst
		wait := (need*1000+rate-1)/rate - ms
		s.mu.Unlock()
		return false, time.Duration(max(wait, 1)) * time.Millisecond
	}
	if commit {
		e.b = uint32(excess)
		if ms != 0 {
			e.a = uint32(rel)
		}
	}
	s.mu.Unlock()
	if excess > thr {
		return true, time.Duration((excess-thr)*1000/rate) * time.Millisecond
	}
	return true, 0
}

// prepare initializes the shard, runs a due sweep and returns now relative
// to the shard's base.
func (s *limShard) prepare(now, rate int64) int64 {
	if s.t.slots == nil {
		s.t.slots = make([]slot, tableMinCap)
		s.base = now - 1
		s.nextSweep = now + sweepEveryMs
	}
	if now-s.base >= rebaseAtMs {
		s.rebase(now)
	}
	rel := max(now-s.base, 1)
	if now >= s.nextSweep {
		s.sweep(rel, now, rate, true)
	}
	return rel
}

func (s *limShard) insert(k *[16]byte, h uint64, rel, now, rate int64, l *keyTable) {
	if s.t.n >= s.maxKeys || s.t.full(s.t.n+1) {
		// Free idle entries before growing or evicting, at most once per
		// eighth of the table's worth of inserts: O(1) amortized per insert.
		if s.inserts >= len(s.t.slots)/8 {
			// No shrinking here: freeing room and then shrinking would make
			// the next inserts grow the table again (churn, allocations).
			s.sweep(rel, now, rate, false)
		}
		for s.t.n >= s.maxKeys {
			if s.evict(h, rel, rate) {
				l.evicted.Add(1)
			}
		}
		for s.t.full(s.t.n + 1) {
			if !s.t.grow(capFor(s.maxKeys)) {
				s.evict(h, rel, rate) // only if the bound was lowered meanwhile
			}
		}
	}
	i, _ := s.t.find(k, h)
	s.t.slots[i] = slot{key: *k, a: uint32(rel)}
	s.t.n++
	s.inserts++
}

// idle reports whether the entry's excess has decayed so far that the next
// request would compute excess 0, exactly as for an unknown key; in an
// expiring table, whether the entry has expired.
func idle(e *slot, rel, rate int64) bool {
	if rate == expiring {
		return int64(e.a) <= rel
	}
	ms := rel - int64(e.a)
	return ms >= 0 && rate*ms/1000 >= int64(e.b)+1000
}

// sweep drops idle entries (judged at this caller's rate: zones shared by
// limits of different rates are judged by whichever sweeps) and, on the
// periodic sweep, gives memory back after a flood.
func (s *limShard) sweep(rel, now, rate int64, shrink bool) {
	for i := 0; i < len(s.t.slots); {
		if e := &s.t.slots[i]; e.a != 0 && idle(e, rel, rate) {
			s.t.remove(i) // may shift another entry into i: look again
			continue
		}
		i++
	}
	if shrink {
		s.t.shrink()
	}
	s.inserts = 0
	s.nextSweep = now + sweepEveryMs
}

// evict removes one entry near h's home slot: an idle one if any, else the
// least recently used of the sample. It reports whether the victim still
// held excess (a real loss of state).
func (s *limShard) evict(h uint64, rel, rate int64) bool {
	i := s.t.home(h)
	victim, oldest, lost := -1, int64(-1), true
	for seen, steps := 0, 0; seen < evictSample && steps < len(s.t.slots); steps++ {
		if e := &s.t.slots[i]; e.a != 0 {
			seen++
			if idle(e, rel, rate) {
				victim, lost = i, false
				break
			}
			if age := rel - int64(e.a); age > oldest {
				victim, oldest = i, age
			}
		}
		if i++; i == len(s.t.slots) {
			i = 0
		}
	}
	s.t.remove(victim)
	return lost
}

func (s *limShard) rebase(now int64) {
	nb := now - rebaseKeepMs
	for i := range s.t.slots {
		if e := &s.t.slots[i]; e.a != 0 {
			e.a = uint32(max(s.base+int64(e.a)-nb, 1))
		}
	}
	s.base = nb
}

// Keys are 16 bytes so one zone type serves every key kind: an address
// (IPv4 as IPv4-mapped IPv6), or a hash of anything else.
var keySeedLo, keySeedHi = maphash.MakeSeed(), maphash.MakeSeed()

// KeyFromAddr is the limiter key of an address. IPv4 and its IPv4-mapped
// form share a key; the zone of an IPv6 address is ignored. The invalid
// Addr maps to the all-zero key (the same as ::), so requests without an
// address share one bucket rather than escaping the limit.
func KeyFromAddr(a netip.Addr) [16]byte { return a.As16() }

// KeyFromBytes hashes b (a user id, a token) into a key with two independent
// seeded 64-bit hashes. Keys are stable for the life of the process only;
// zones do not outlive it either. Collisions need ~2^64 distinct inputs.
func KeyFromBytes(b []byte) [16]byte {
	var k [16]byte
	binary.BigEndian.PutUint64(k[:8], maphash.Bytes(keySeedHi, b))
	binary.BigEndian.PutUint64(k[8:], maphash.Bytes(keySeedLo, b))
	return k
}

// keyFromAddrPrefix groups IPv6 clients by prefix (bits < 128), so that one
// client holding a whole /64 is one key rather than 2^64 of them.
func keyFromAddrPrefix(a netip.Addr, v6bits int) [16]byte {
	k := a.As16()
	if v6bits >= 128 || !a.Is6() || a.Is4In6() {
		return k
	}
	full := v6bits / 8
	if rem := v6bits % 8; rem != 0 {
		k[full] &= byte(0xff << (8 - rem))
		full++
	}
	for i := full; i < 16; i++ {
		k[i] = 0
	}
	return k
}
