package conf

import (
	"crypto/rand"
	"fmt"
	"time"

	"flashgate/conf/field"
)

// SaleConfig is the `sale:` section.
type SaleConfig struct {
	// TokenSecret signs purchase tokens (≥ 32 bytes, "env:NAME" allowed;
	// empty: random per process, demo only). Every edge must share it.
	TokenSecret string        `yaml:"token_secret" secret:"true"`
	TokenTTL    time.Duration `yaml:"token_ttl"`
	// MaxBody bounds a sale API request body (413 TOO_LARGE beyond).
	MaxBody int `yaml:"max_body"`
	// OrderTTL is how long order states stay in Redis for result polls.
	OrderTTL time.Duration `yaml:"order_ttl"`
	// OrderHashes writes new orders in Redis as hashes, the layout of the
	// versions before the string one: set it while edges of such a version
	// still run beside this one (they cannot read a string order), unset it
	// once none does. This version reads both layouts either way.
	OrderHashes bool `yaml:"order_hashes"`
	// BuyerKeys warms new sales with one Redis key per buyer count and per
	// used token, the layout of the versions before the per-product
	// hashes: set it while edges of such a version serve the same Redis
	// (they know only those keys), unset it once none does. A sale keeps
	// the layout it was warmed with; this version serves both.
	BuyerKeys bool `yaml:"buyer_keys"`
	// OrderKeys warms new sales in the per-order ledger: one Redis key and
	// one outbox entry per order, the only one the versions before the
	// order bucket hashes know (they can neither read a batched sale's
	// orders nor relay or rebuild it). Set it while edges of such a version
	// serve the same Redis, unset it once none does. A sale keeps the
	// ledger it was warmed with; this version serves both. BuyerKeys and
	// OrderHashes imply it: their older versions know only this ledger.
	OrderKeys bool `yaml:"order_keys"`
	// RefreshInterval is how often the edge re-reads sales and stock from
	// Redis (sold-out flags are also pushed; this is the safety net).
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// HotspotThreshold is requests per second per product above which the
	// product is logged and counted as a hotspot (0 disables).
	HotspotThreshold int64 `yaml:"hotspot_threshold"`
	// BoughtCacheSize and BoughtCacheTTL size the local cache of shoppers
	// who reached a product's limit.
	BoughtCacheSize int64         `yaml:"bought_cache_size"`
	BoughtCacheTTL  time.Duration `yaml:"bought_cache_ttl"`
	// A product's breaker opens after this many consecutive failed Redis
	// calls for it (a coalesced call of many attempts counts once) and
	// stays open for BreakerOpenFor (default 1s, at least 100ms), then lets
	// one probe through. One breaker per product (sale.Breakers).
	BreakerFailures int           `yaml:"breaker_failures"`
	BreakerOpenFor  time.Duration `yaml:"breaker_open_for"`
}

// fill gives the settings left out or written as zero their defaults.
func (c *SaleConfig) fill() {
	orDefault(&c.TokenTTL, 60*time.Second)
	orDefault(&c.MaxBody, 4096)
	orDefault(&c.OrderTTL, 7*24*time.Hour)
	orDefault(&c.RefreshInterval, time.Second)
	orDefault(&c.BoughtCacheSize, 1<<18)
	orDefault(&c.BoughtCacheTTL, 30*time.Second)
	orDefault(&c.BreakerFailures, 20)
	orDefault(&c.BreakerOpenFor, time.Second)
}

// WithDefaults returns c with the defaults Parse gives the `sale:`
// section: constructors fill their zero settings from it (doc.go).
func (c SaleConfig) WithDefaults() SaleConfig {
	c.fill()
	return c
}

// Validate checks the section; paths are relative to `sale`.
func (c *SaleConfig) Validate() field.Errors {
	var errs field.Errors
	if _, err := secret(c.TokenSecret); err != nil {
		errs.Add("token_secret", "%v", err)
	}
	if c.TokenTTL < time.Second || c.TokenTTL > time.Hour {
		errs.Add("token_ttl", "must be between 1s and 1h, got %v", c.TokenTTL)
	}
	if c.MaxBody < 64 || c.MaxBody > 1<<20 {
		errs.Add("max_body", "must be between 64 and 1048576 bytes, got %d", c.MaxBody)
	}
	if c.OrderTTL < time.Minute {
		errs.Add("order_ttl", "must be at least 1m, got %v", c.OrderTTL)
	}
	if c.RefreshInterval < 10*time.Millisecond || c.RefreshInterval > time.Minute {
		errs.Add("refresh_interval", "must be between 10ms and 1m, got %v", c.RefreshInterval)
	}
	if c.HotspotThreshold < 0 {
		errs.Add("hotspot_threshold", "must not be negative")
	}
	if c.BoughtCacheSize < 1 || c.BoughtCacheSize > 1<<26 {
		errs.Add("bought_cache_size", "must be between 1 and %d", 1<<26)
	}
	if c.BoughtCacheTTL < time.Second {
		errs.Add("bought_cache_ttl", "must be at least 1s")
	}
	if c.BreakerFailures < 1 {
		errs.Add("breaker_failures", "must be at least 1")
	}
	if c.BreakerOpenFor < 100*time.Millisecond {
		errs.Add("breaker_open_for", "must be at least 100ms")
	}
	return errs
}

// TokenSecretBytes resolves the purchase-token secret (random if unset).
func (c *SaleConfig) TokenSecretBytes() (b []byte, random bool, err error) {
	if c.TokenSecret == "" {
		return randomSecret(), true, nil
	}
	b, err = secret(c.TokenSecret)
	return b, false, err
}

func randomSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// secret resolves "env:NAME" and checks the length. "" is allowed (random).
func secret(s string) ([]byte, error) {
	v, err := field.ResolveEnv(s)
	if err != nil || v == "" {
		return nil, err
	}
	if len(v) < 32 {
		return nil, fmt.Errorf("must be at least 32 bytes (got %d)", len(v))
	}
	return []byte(v), nil
}
