package conf

import (
	"crypto/rand"
	"fmt"
	"time"

	"flashgate/conf/field"
)

// RedisConfig is the `redis:` section.
type RedisConfig struct {
	// Addr is host:port, a comma-separated cluster seed list, a redis://
	// URL, or "" / "embedded" for the in-process stand-in (demo only).
	Addr string `yaml:"addr"`
	// Timeout is the budget of every Redis call: slow or gone answers 503
	// DEGRADED within it, never a hang.
	Timeout time.Duration `yaml:"timeout"`
	// QueueTimeout is how long a purchase may wait for its product's
	// script call in flight (the group commit) before it is answered 503
	// unsent (default 1s, at least Timeout). See stock.Options.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// MaxBatch caps the purchase attempts of one product that one
	// deduction script call carries (the group commit; default 256).
	// Bigger batches cost Redis less per purchase, and block it longer
	// for every other product while the script runs. See stock.Options.
	MaxBatch      int           `yaml:"max_batch"`
	MaxFlushDelay time.Duration `yaml:"max_flush_delay"`
	Password      string        `yaml:"password" secret:"true"`
	// Username is the ACL user ("" the default user); Sentinel and TLS
	// say how to reach a production Redis. All three: redis.go.
	Username string              `yaml:"username"`
	Sentinel RedisSentinelConfig `yaml:"sentinel"`
	TLS      RedisTLSConfig      `yaml:"tls"`
	// WaitReplicas > 0: after each deduction script call, WAIT until that
	// many replicas have its writes (or WaitTimeout) before any of its
	// purchases is answered. See stock.Options.WaitReplicas.
	WaitReplicas int           `yaml:"wait_replicas"`
	WaitTimeout  time.Duration `yaml:"wait_timeout"`
}

// DefaultMaxBatch is redis.max_batch's default (and stock.Options'). At
// 128, under one hot product with 512 shoppers in flight, most calls were
// full; 512 gave 1.13x the purchases/s at 0.85x Redis' CPU per purchase
// (bench compare -edge-b, 4 rounds), with scripts of up to ~8 ms. 256 keeps
// a script under ~5 ms.
const DefaultMaxBatch = 256

// MaxBatchLimit bounds redis.max_batch: deduct.lua unpacks up to two
// arguments per attempt onto Lua's stack (8,000 slots) for one HSET.
const MaxBatchLimit = 2000

// AuthConfig is the `auth:` section: the signed shopper session.
type AuthConfig struct {
	// Secrets sign (the first) and verify (all) session JWTs; at least 32
	// bytes each; "env:NAME" reads one from the environment. Empty: a random
	// secret per process (demo: sessions end on restart and are not valid on
	// other edges).
	Secrets    []string      `yaml:"secrets" secret:"true"`
	SessionTTL time.Duration `yaml:"session_ttl"`
	// DemoLogin turns on POST /api/login, which signs anyone in as the
	// user id they name: the zero-setup demo. Validation refuses it when
	// Redis, Kafka or ClickHouse are real servers unless DemoLoginForce
	// says so (a test rig on real servers): see demo.go.
	DemoLogin      bool `yaml:"demo_login"`
	DemoLoginForce bool `yaml:"demo_login_force"`
	CookieSecure   bool `yaml:"cookie_secure"`
}

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

// fill gives the settings left out or written as zero their defaults;
// queue_timeout's depends on timeout.
func (c *RedisConfig) fill() {
	orDefault(&c.Timeout, 200*time.Millisecond)
	orDefault(&c.QueueTimeout, max(time.Second, c.Timeout))
	orDefault(&c.WaitTimeout, 50*time.Millisecond)
	orDefault(&c.MaxBatch, DefaultMaxBatch)
}

// Embedded reports whether the in-process stand-in is configured.
func (c *RedisConfig) Embedded() bool {
	return (c.Addr == "" || c.Addr == "embedded") && !c.Sentinel.set()
}

// Validate checks the section; paths are relative to `redis`.
func (c *RedisConfig) Validate() field.Errors {
	var errs field.Errors
	if c.Timeout < time.Millisecond || c.Timeout > 10*time.Second {
		errs.Add("timeout", "must be between 1ms and 10s, got %v", c.Timeout)
	}
	if c.QueueTimeout < c.Timeout || c.QueueTimeout > 30*time.Second {
		errs.Add("queue_timeout", "must be between timeout (%v) and 30s, got %v", c.Timeout, c.QueueTimeout)
	}
	if c.MaxBatch < 1 || c.MaxBatch > MaxBatchLimit {
		errs.Add("max_batch", "must be between 1 and %d, got %d", MaxBatchLimit, c.MaxBatch)
	}
	if c.MaxFlushDelay < 0 || c.MaxFlushDelay > 10*time.Millisecond {
		errs.Add("max_flush_delay", "must be between 0 and 10ms, got %v", c.MaxFlushDelay)
	}
	if _, err := field.ResolveEnv(c.Password); err != nil {
		errs.Add("password", "%v", err)
	}
	if c.WaitReplicas < 0 || c.WaitReplicas > 16 {
		errs.Add("wait_replicas", "must be between 0 (off) and 16, got %d", c.WaitReplicas)
	}
	if c.WaitTimeout < time.Millisecond || c.WaitTimeout >= c.Timeout {
		errs.Add("wait_timeout", "must be at least 1ms and less than timeout (%v): the WAIT is part of the call's budget, got %v", c.Timeout, c.WaitTimeout)
	}
	if c.WaitReplicas > 0 && c.Embedded() {
		errs.Add("wait_replicas", "the embedded stand-in has no replicas")
	}
	c.validateConn(&errs)
	return errs
}

// fill gives the settings left out or written as zero their defaults.
func (c *AuthConfig) fill() {
	orDefault(&c.SessionTTL, 24*time.Hour)
}

// Validate checks the section; paths are relative to `auth`.
func (c *AuthConfig) Validate() field.Errors {
	var errs field.Errors
	for i, s := range c.Secrets {
		if _, err := secret(s); err != nil {
			errs.Add(field.Index("secrets", i), "%v", err)
		}
	}
	if c.SessionTTL < time.Minute || c.SessionTTL > 30*24*time.Hour {
		errs.Add("session_ttl", "must be between 1m and 720h, got %v", c.SessionTTL)
	}
	return errs
}

// SessionSecrets resolves the secrets, or one random secret when none is
// configured (random reports that, so the caller can warn).
func (c *AuthConfig) SessionSecrets() (secrets [][]byte, random bool, err error) {
	for _, s := range c.Secrets {
		b, err := secret(s)
		if err != nil {
			return nil, false, err
		}
		secrets = append(secrets, b)
	}
	if len(secrets) == 0 {
		return [][]byte{randomSecret()}, true, nil
	}
	return secrets, false, nil
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
