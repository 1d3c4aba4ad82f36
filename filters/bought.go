package filters

import (
	"encoding/binary"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// BoughtCache remembers, per product and user, how many units the user is
// known to have bought, so a shopper who reached the limit is answered at
// the edge instead of costing a script call for every repeat click.
// Entries expire quickly (Redis is the truth, and a release can lower the
// count); an evicted or expired entry only means the next attempt asks
// Redis. Bounded by ristretto's admission policy.
type BoughtCache struct {
	c   *ristretto.Cache[uint64, int32]
	ttl time.Duration
}

// NewBoughtCache holds up to maxEntries pairs for ttl each.
func NewBoughtCache(maxEntries int64, ttl time.Duration) (*BoughtCache, error) {
	c, err := ristretto.NewCache(&ristretto.Config[uint64, int32]{
		NumCounters: maxEntries * 10,
		MaxCost:     maxEntries,
		BufferItems: 64,
	})
	if err != nil {
		return nil, err
	}
	return &BoughtCache{c: c, ttl: ttl}, nil
}

func boughtKey(product, user []byte) uint64 {
	p, u := KeyFromBytes(product), KeyFromBytes(user)
	return binary.LittleEndian.Uint64(p[:8])*0x9E3779B97F4A7C15 ^ binary.LittleEndian.Uint64(u[:8])
}

// Get returns the units known to be bought (0 when unknown).
func (b *BoughtCache) Get(product, user []byte) int {
	n, _ := b.c.Get(boughtKey(product, user))
	return int(n)
}

// Set records units bought. Ristretto applies sets asynchronously; that is
// fine for a cache that only saves work.
func (b *BoughtCache) Set(product, user []byte, units int) {
	b.c.SetWithTTL(boughtKey(product, user), int32(units), 1, b.ttl)
}

// Forget drops an entry (after a release lowered the count).
func (b *BoughtCache) Forget(product, user []byte) { b.c.Del(boughtKey(product, user)) }

// Wait blocks until pending sets are visible (tests).
func (b *BoughtCache) Wait() { b.c.Wait() }

// Close stops the cache's goroutines.
func (b *BoughtCache) Close() { b.c.Close() }
