package filters

import (
	"hash/maphash"
	"sync"

	"flashgate/conf/field"
	"flashgate/sale/api"
)

func init() { Register("conn_limit", newConnLimit) }

// connLimit is nginx's limit_conn per client address: at most Max requests of
// one client in flight at once. Handle takes a slot and registers the filter
// with Request.Defer; Finish gives the slot back. The proxy must call
// Request.Finish after every request that went through the chain, whatever
// the verdict, or the client's slots leak.
//
// nginx answers 503 by default (limit_conn_status); we answer 429
// RATE_LIMITED with Retry-After: 1 because that is the shopper API's contract
// for "slow down", and the sale page retries on it. status may override.
//
// A request rejected by a later filter still held its slot until Finish: a
// client with Max requests parked in a limit_req delay is at its limit, as in
// nginx.
type connLimit struct {
	zone   *ConnZone
	max    int
	v6bits int
	reject *api.Rejection
}

type connLimitConfig struct {
	// Max is the number of requests one client may have in flight.
	Max    int    `yaml:"max"`
	Status int    `yaml:"status"`
	Zone   string `yaml:"zone"`
	// IPv6Prefix groups IPv6 clients by network (64 treats a /64 as one
	// client); 128, the default, is nginx's $binary_remote_addr.
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

func newConnLimit(spec Spec, env *Env) (Filter, field.Errors) {
	cfg := connLimitConfig{Status: 429, IPv6Prefix: 128}
	errs := decodeParams(spec, &cfg)
	if cfg.Max < 1 {
		errs.Add("max", "must be at least 1")
	}
	checkStatus(&errs, cfg.Status)
	checkIPv6Prefix(&errs, cfg.IPv6Prefix)
	if len(errs) > 0 {
		return nil, errs
	}
	return &connLimit{
		zone:   envZones(env).Conns(zoneName(spec, cfg.Zone)),
		max:    cfg.Max,
		v6bits: cfg.IPv6Prefix,
		reject: api.RateLimited.WithStatus(cfg.Status),
	}, nil
}

// key writes the client's key in the zone to k. Handle and Finish derive it
// on every request: the default prefix (128, every address its own client)
// skips keyFromAddrPrefix's masking, and the key goes to the table by
// pointer, not copied from call to call.
func (c *connLimit) key(k *[16]byte, r *Request) {
	if c.v6bits >= 128 {
		*k = r.ClientIP.As16()
		return
	}
	*k = keyFromAddrPrefix(r.ClientIP, c.v6bits)
}

func (c *connLimit) Handle(r *Request) Verdict {
	var key [16]byte
	c.key(&key, r)
	if !c.zone.acquire(&key, c.max) {
		return Verdict{Reject: c.reject, RetryAfter: 1}
	}
	if !r.Defer(c) {
		// No room to remember the slot (Build keeps finishers below the
		// limit, so only a hand-made chain gets here): do not leak it.
		c.zone.release(&key)
	}
	return Pass
}

// Finish releases the slot taken by Handle. r.ClientIP must not have changed.
func (c *connLimit) Finish(r *Request) {
	var key [16]byte
	c.key(&key, r)
	c.zone.release(&key)
}

const connShards = 64

// ConnZone counts in-flight requests per key. Keys at zero are removed at
// once, so its memory follows the requests in flight, which the server's
// concurrency bounds; it needs no eviction.
type ConnZone struct {
	shards [connShards]connShard
	seed   maphash.Seed
}

type connShardState struct {
	mu sync.Mutex
	t  table // slot.a is the count
}

type connShard struct {
	connShardState
	_ [128 - 48]byte // one shard per pair of cache lines
}

// NewConnZone returns an empty zone. Most callers use (*Zones).Conns.
func NewConnZone() *ConnZone {
	z := &ConnZone{seed: maphash.MakeSeed()}
	for i := range z.shards {
		z.shards[i].t.seed = z.seed
	}
	return z
}

func (z *ConnZone) shard(k *[16]byte) (*connShard, uint64) {
	h := maphash.Bytes(z.seed, k[:])
	return &z.shards[h>>(64-6)], h
}

// Acquire counts one more request of key unless limit are already in flight.
// Acquire and Release run on every request: they unlock by hand, not by
// defer, and nothing between Lock and Unlock can panic.
func (z *ConnZone) Acquire(key [16]byte, limit int) bool { return z.acquire(&key, limit) }

func (z *ConnZone) acquire(key *[16]byte, limit int) bool {
	s, h := z.shard(key)
	s.mu.Lock()
	ok := s.acquire(key, h, limit)
	s.mu.Unlock()
	return ok
}

func (s *connShard) acquire(key *[16]byte, h uint64, limit int) bool {
	if s.t.slots == nil {
		s.t.slots = make([]slot, tableMinCap)
	}
	i, found := s.t.find(key, h)
	if found {
		if int(s.t.slots[i].a) >= limit {
			return false
		}
		s.t.slots[i].a++
		return true
	}
	if limit < 1 {
		return false
	}
	if s.t.full(s.t.n + 1) {
		s.t.grow(1 << 30)
		i, _ = s.t.find(key, h)
	}
	s.t.slots[i] = slot{key: *key, a: 1}
	s.t.n++
	return true
}

// Release gives back one request of key.
func (z *ConnZone) Release(key [16]byte) { z.release(&key) }

func (z *ConnZone) release(key *[16]byte) {
	s, h := z.shard(key)
	s.mu.Lock()
	s.release(key, h)
	s.mu.Unlock()
}

func (s *connShard) release(key *[16]byte, h uint64) {
	if s.t.slots == nil {
		return
	}
	i, found := s.t.find(key, h)
	if !found {
		return
	}
	if s.t.slots[i].a--; s.t.slots[i].a == 0 {
		s.t.remove(i)
		s.t.shrink()
	}
}

// Count is the number of requests of key in flight.
func (z *ConnZone) Count(key [16]byte) int {
	s, h := z.shard(&key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t.slots == nil {
		return 0
	}
	if i, found := s.t.find(&key, h); found {
		return int(s.t.slots[i].a)
	}
	return 0
}

// Len is the number of keys with requests in flight.
func (z *ConnZone) Len() int {
	n := 0
	for i := range z.shards {
		s := &z.shards[i]
		s.mu.Lock()
		n += s.t.n
		s.mu.Unlock()
	}
	return n
}
