package filters

import (
	"time"

	"flashgate/conf/field"
	"flashgate/sale/api"
)

func init() { Register("ip_limit", newIPLimit) }

// LimitConfig is the YAML of a limit_req-style filter. ip_limit uses it as
// is; a filter keyed by something else (the user id) embeds it with
// `yaml:",inline"` and calls Compile, so both read and behave the same.
type LimitConfig struct {
	// Rate is the zone's rate ("10r/s", "600r/m"). In nginx it belongs to
	// limit_req_zone; here each filter states it, and filters sharing a zone
	// should agree.
	Rate  Rate `yaml:"rate"`
	Burst int  `yaml:"burst"`
	// NoDelay passes the whole burst at once (nginx nodelay); without it and
	// without Delay, every request above the rate waits its turn.
	NoDelay bool `yaml:"nodelay"`
	// Delay passes this many burst requests at once and delays the rest
	// (nginx delay=, two-stage limiting).
	Delay *int `yaml:"delay"`
	// Status of a rejection: 429 by default (the API contract); 4xx or 5xx.
	Status int `yaml:"status"`
	// Zone names the state; it defaults to the filter's name. Filters naming
	// the same zone share buckets, and a reload keeps them.
	Zone    string `yaml:"zone"`
	MaxKeys int    `yaml:"max_keys"`
}

// DefaultLimitConfig is LimitConfig with its defaults; decode over it.
func DefaultLimitConfig() LimitConfig {
	return LimitConfig{Status: 429, MaxKeys: DefaultMaxKeys}
}

// RateLimit is a compiled LimitConfig: the zone and this filter's limit.
type RateLimit struct {
	Zone    string
	Limiter *Limiter
	Limit   Limit
	Reject  *api.Rejection
}

// Compile validates c (errors relative to the filter's mapping) and binds it
// to its zone in zones, named c.Zone or else defaultZone. A nil zones gives
// the limit private state.
func (c *LimitConfig) Compile(zones *Zones, defaultZone string) (*RateLimit, field.Errors) {
	var errs field.Errors
	if c.Rate.Milli <= 0 {
		errs.Add("rate", `is required, e.g. "10r/s" or "600r/m"`)
	}
	if c.Burst < 0 || c.Burst > MaxBurst {
		errs.Add("burst", "must be between 0 and %d", MaxBurst)
	}
	delay := 0
	if c.Delay != nil {
		delay = *c.Delay
		if c.NoDelay {
			errs.Add("delay", "conflicts with nodelay (nodelay means delay = burst)")
		}
		if delay < 0 {
			errs.Add("delay", "must not be negative")
		}
	}
	if c.NoDelay {
		delay = c.Burst
	}
	checkStatus(&errs, c.Status)
	if c.MaxKeys < 1 || c.MaxKeys > 1<<28 {
		errs.Add("max_keys", "must be between 1 and %d", 1<<28)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	zone := c.Zone
	if zone == "" {
		zone = defaultZone
	}
	if zones == nil {
		zones = NewZones()
	}
	return &RateLimit{
		Zone:    zone,
		Limiter: zones.Limiter(zone, c.MaxKeys),
		Limit:   Limit{Rate: c.Rate, Burst: c.Burst, Delay: min(delay, c.Burst)},
		Reject:  api.RateLimited.WithStatus(c.Status),
	}, nil
}

// Check takes one request of key. A rejection carries Retry-After: whole
// seconds (at least 1) until the same request would pass; a pass may carry
// the delay nginx would impose.
func (rl *RateLimit) Check(key [16]byte, nowNano int64) Verdict {
	return rl.verdict(rl.Limiter.Take(key, nowNano, rl.Limit))
}

// Peek is Check without accounting the request.
func (rl *RateLimit) Peek(key [16]byte, nowNano int64) Verdict {
	return rl.verdict(rl.Limiter.Peek(key, nowNano, rl.Limit))
}

func (rl *RateLimit) verdict(ok bool, d time.Duration) Verdict {
	if !ok {
		return Verdict{Reject: rl.Reject, RetryAfter: int((d + time.Second - 1) / time.Second)}
	}
	return Verdict{Delay: d}
}

// ipLimit is nginx's limit_req keyed by the client address, per edge or,
// with policy redis, shared by every edge (redislimit.go).
type ipLimit struct {
	rl     RateLimit
	v6bits int
	redis  *redisLimit // nil: policy local
}

type ipLimitConfig struct {
	LimitConfig  `yaml:",inline"`
	PolicyConfig `yaml:",inline"`
	// IPv6Prefix groups IPv6 clients by network (64 treats a /64 as one
	// client); 128, the default, is nginx's $binary_remote_addr.
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

func newIPLimit(spec Spec, env *Env) (Filter, field.Errors) {
	cfg := ipLimitConfig{LimitConfig: DefaultLimitConfig(), PolicyConfig: DefaultPolicyConfig(), IPv6Prefix: 128}
	errs := decodeParams(spec, &cfg)
	checkIPv6Prefix(&errs, cfg.IPv6Prefix)
	cfg.PolicyConfig.check(&errs)
	if len(errs) > 0 {
		return nil, errs
	}
	rl, errs := cfg.Compile(envZones(env), zoneName(spec, ""))
	if len(errs) > 0 {
		return nil, errs
	}
	f := &ipLimit{rl: *rl, v6bits: cfg.IPv6Prefix}
	if f.redis, errs = newRedisLimit(cfg.PolicyConfig, env, []*RateLimit{&f.rl}, false, cfg.MaxKeys, f.rl.Check); len(errs) > 0 {
		return nil, errs
	}
	return f, nil
}

func (f *ipLimit) Handle(r *Request) Verdict {
	key := keyFromAddrPrefix(r.ClientIP, f.v6bits)
	if f.redis != nil {
		return f.redis.Check(r, key)
	}
	return f.rl.Check(key, r.NowNano)
}
