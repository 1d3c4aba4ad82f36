package catalog

import (
	"hash/maphash"
	"sync"
	"time"
)

// BoughtCache remembers, per product and user, how many units the user is
// known to have bought, so a shopper who reached the limit is answered at
// the edge instead of costing a script call for every repeat click.
// Entries expire quickly (Redis is the truth, and a release can lower the
// count); a missing or expired entry only means the next attempt asks
// Redis, so when a shard is full the cache simply drops entries.
//
// It is the edge's memory of a sale, like the sold-out flag: the
// user_limit filter reads it, the sale handler writes it from the
// deduction's verdicts.
//
// It is a sharded map rather than a general-purpose cache (ristretto was
// tried: its Get allocates a buffer every 64 lookups, and this lookup runs
// on every purchase attempt).
type BoughtCache struct {
	shards    [boughtShards]boughtShard
	perShard  int
	ttlMillis int64
	now       func() int64 // unix nanoseconds
}

const boughtShards = 64

type boughtShard struct {
	mu sync.Mutex
	m  map[uint64]boughtEntry
}

type boughtEntry struct {
	units     int32
	expiresMs int64
}

// NewBoughtCache holds up to maxEntries pairs for ttl each.
func NewBoughtCache(maxEntries int64, ttl time.Duration) (*BoughtCache, error) {
	b := &BoughtCache{perShard: int(max(maxEntries/boughtShards, 16)), ttlMillis: ttl.Milliseconds(), now: wallNow}
	for i := range b.shards {
		b.shards[i].m = make(map[uint64]boughtEntry)
	}
	return b, nil
}

// boughtKey mixes in the product's release generation: a release or
// restock anywhere bumps it on every edge (State.BumpGeneration), so every entry
// of the product is forgotten at once, without a scan.
func boughtKey(product, user []byte, gen uint32) uint64 {
	return (maphash.Bytes(boughtSeed, product)+uint64(gen))*0x9E3779B97F4A7C15 ^ maphash.Bytes(boughtSeed, user)
}

var boughtSeed = maphash.MakeSeed()

func wallNow() int64 { return time.Now().UnixNano() }

func (b *BoughtCache) shard(k uint64) *boughtShard { return &b.shards[k>>58] }

// Get returns the units known to be bought (0 when unknown or expired) in
// the product's current release generation.
func (b *BoughtCache) Get(product, user []byte, gen uint32) int {
	k := boughtKey(product, user, gen)
	s := b.shard(k)
	s.mu.Lock()
	e, ok := s.m[k]
	s.mu.Unlock()
	if !ok || e.expiresMs <= b.now()/1e6 {
		return 0
	}
	return int(e.units)
}

// Set records units bought.
func (b *BoughtCache) Set(product, user []byte, gen uint32, units int) {
	k := boughtKey(product, user, gen)
	s := b.shard(k)
	nowMs := b.now() / 1e6
	s.mu.Lock()
	if len(s.m) >= b.perShard {
		s.evict(nowMs)
	}
	s.m[k] = boughtEntry{units: int32(units), expiresMs: nowMs + b.ttlMillis}
	s.mu.Unlock()
}

// evict drops expired entries, and if none were, an arbitrary quarter of the
// shard: losing an entry costs one script call, never correctness.
func (s *boughtShard) evict(nowMs int64) {
	n := len(s.m)
	for k, e := range s.m {
		if e.expiresMs <= nowMs {
			delete(s.m, k)
		}
	}
	if len(s.m) < n {
		return
	}
	drop := n / 4
	for k := range s.m {
		if drop == 0 {
			break
		}
		delete(s.m, k)
		drop--
	}
}
