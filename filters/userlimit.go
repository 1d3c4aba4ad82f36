package filters

import (
	"strconv"

	"flashgate/conf/field"
	"flashgate/sale/catalog"
)

func init() { Register("user_limit", newUserLimit) }

// userLimit is limit_req keyed by the signed-in user (several rates at once,
// e.g. 5r/s and 50r/m), plus the local "already bought" check: a shopper at
// the product's per-user limit is answered 409 here. The rates are local to
// the edge unless policy is redis: then every edge shares them
// (redislimit.go), all of a user's rates in one script call. The bought
// check is always local; the deduction script enforces the purchase limit
// exactly.
type userLimit struct {
	limits []*RateLimit
	bought *catalog.BoughtCache
	redis  *redisLimit // nil: policy local
}

type userLimitConfig struct {
	Limits       []LimitConfig `yaml:"limits"`
	PolicyConfig `yaml:",inline"`
}

func newUserLimit(spec Spec, env *Env) (Filter, field.Errors) {
	cfg := userLimitConfig{PolicyConfig: DefaultPolicyConfig()}
	errs := decodeParams(spec, &cfg)
	cfg.PolicyConfig.check(&errs)
	if len(errs) > 0 {
		return nil, errs
	}
	if cfg.Limits == nil {
		// The seed design's defaults: 5 per second and 50 per minute per user.
		// The bursts let a shopper's token+do pair through at once.
		cfg.Limits = []LimitConfig{DefaultLimitConfig(), DefaultLimitConfig()}
		cfg.Limits[0].Rate, _ = ParseRate("5r/s")
		cfg.Limits[0].Burst, cfg.Limits[0].NoDelay = 5, true
		cfg.Limits[1].Rate, _ = ParseRate("50r/m")
		cfg.Limits[1].Burst, cfg.Limits[1].NoDelay = 10, true
	}
	f := &userLimit{}
	if env != nil {
		f.bought = env.Bought
	}
	zones := envZones(env)
	maxKeys := 0
	for i := range cfg.Limits {
		lc := cfg.Limits[i]
		if lc.Status == 0 {
			lc.Status = 429
		}
		if lc.MaxKeys == 0 {
			lc.MaxKeys = DefaultMaxKeys
		}
		maxKeys = max(maxKeys, lc.MaxKeys)
		rl, lerrs := lc.Compile(zones, zoneName(spec, "")+"#"+strconv.Itoa(i))
		errs.Nest(field.Index("limits", i), lerrs)
		if rl != nil {
			f.limits = append(f.limits, rl)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if f.redis, errs = newRedisLimit(cfg.PolicyConfig, env, f.limits, true, maxKeys, f.checkLocal); len(errs) > 0 {
		return nil, errs
	}
	return f, nil
}

func (f *userLimit) Handle(r *Request) Verdict {
	if !r.Endpoint.Buys() || len(r.UserID) == 0 {
		return Pass
	}
	if f.bought != nil && r.Sale.Sale != nil {
		if rej := r.CheckLimit(f.bought.Get(r.ProductID, r.UserID, r.Sale.Generation())); rej != nil {
			return Verdict{Reject: rej}
		}
	}
	if len(f.limits) == 0 {
		return Pass
	}
	key := KeyFromBytes(r.UserID)
	if f.redis != nil {
		return f.redis.Check(r, key)
	}
	return f.checkLocal(key, r.NowNano)
}

// checkLocal applies the limits with this edge's state. Like nginx with
// several limit_req: the request is charged to every limit only if all of
// them pass. All but the last are checked without accounting, the last is
// accounted, then the others.
func (f *userLimit) checkLocal(key [16]byte, nowNano int64) Verdict {
	last := len(f.limits) - 1
	for _, rl := range f.limits[:last] {
		if v := rl.Peek(key, nowNano); v.Reject != nil {
			return v
		}
	}
	v := f.limits[last].Check(key, nowNano)
	if v.Reject != nil {
		return v
	}
	for _, rl := range f.limits[:last] {
		v.Delay = max(v.Delay, rl.Check(key, nowNano).Delay)
	}
	return v
}
