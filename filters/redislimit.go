package filters

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"flashgate/conf/field"
	"flashgate/metrics"
	"flashgate/orders/stock"
	"flashgate/sale/api"
)

// PolicyConfig is where a limit_req filter keeps its state, shared by
// ip_limit and user_limit (inlined in their YAML).
//
// With policy "redis" every edge charges the same state: one script call
// per decision (orders/stock.TakeRate) applies nginx's arithmetic to the
// client's keys in Redis, on Redis's clock. Two things keep a hot key from
// costing a round trip per request:
//
//   - A refusal is remembered: Redis answers how long until every limit
//     would pass, and the edge refuses the key itself until then. This is
//     exact: the shared excess only shrinks with time (other edges' charges
//     only add to it), and the edge counts from before it sent the call, so
//     it never refuses a request Redis would have passed.
//   - Allowance: one call may lease up to Allowance units that pass without
//     delay; the edge spends the Allowance-1 left over on the key's next
//     requests during the lease, one request interval of the fastest rate
//     (at most 1s), and lets the unspent ones expire. Every unit is charged
//     in Redis when it is leased, by nginx's arithmetic, so across all edges
//     no more pass than the units Redis granted, each at most one lease
//     after it was charged: the edges never admit more than one nginx would
//     admit over a window one lease longer, which, a lease being at most one
//     request interval, is at most one request more. They may admit fewer:
//     units leased and not spent, at most edges x (Allowance-1) per lease
//     (an edge asks for one lease of a key at a time; requests that arrive
//     while it is asked for ask for their own unit).
//     A request that nginx would delay (no nodelay, or beyond delay=) is
//     never leased: it goes to Redis one by one.
//
// OnRedisError decides while Redis fails (an error, or no answer within
// redis.timeout): "local" (the default) applies the same limits with this
// edge's own state, so a Redis outage makes the limits per edge again
// rather than lifting them (allow) or refusing everyone (deny); "allow"
// passes, "deny" refuses with the filter's status and Retry-After: 1.
// After a failed call the filter does not ask Redis again for a second,
// so that a dead Redis costs one timeout per second, not one per request.
//
// The cache belongs to the compiled filter: a reload starts an empty one
// (leased units left are lost, within the bound above; a remembered
// refusal is asked again).
type PolicyConfig struct {
	Policy       string `yaml:"policy"`
	OnRedisError string `yaml:"on_redis_error"`
	Allowance    int    `yaml:"allowance"`
}

// DefaultPolicyConfig is the local policy with the Redis policy's defaults.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{Policy: "local", OnRedisError: "local", Allowance: DefaultAllowance}
}

// DefaultAllowance leases one unit beyond the request: a shopper's
// token-then-purchase pair on one edge costs one call, and at most one unit
// per edge per lease is lost.
const DefaultAllowance = 2

// MaxAllowance bounds allowance: a lease beyond the burst is never granted
// anyway, and a larger one would let one edge hoard a client's budget.
const MaxAllowance = 1000

// redisErrorPause is how long a filter answers OnRedisError without asking
// Redis after a failed call.
const redisErrorPause = time.Second

const (
	onErrorLocal = iota
	onErrorAllow
	onErrorDeny
)

// check validates the policy keys (errors relative to the filter).
func (c *PolicyConfig) check(errs *field.Errors) {
	switch c.Policy {
	case "local", "redis":
	default:
		errs.Add("policy", `must be "local" or "redis", got %q`, c.Policy)
	}
	switch c.OnRedisError {
	case "local", "allow", "deny":
	default:
		errs.Add("on_redis_error", `must be "local", "allow" or "deny", got %q`, c.OnRedisError)
	}
	if c.Allowance < 0 || c.Allowance > MaxAllowance {
		errs.Add("allowance", "must be between 0 and %d (0 or 1: no lease), got %d", MaxAllowance, c.Allowance)
	}
}

// redisLimit is the Redis policy of one filter: its rules as one plan, the
// edge's cache of refusals and leases, and the fallback.
type redisLimit struct {
	store   *stock.Store
	plan    *stock.RatePlan
	rejects []*api.Rejection // per rule
	byUser  bool             // client "u:<user id>", else "ip:<address>"
	units   int              // asked per call (>= 1)
	leaseMs int64
	onError int
	local   func(key [16]byte, nowNano int64) Verdict
	// edgeClock passes the request's time to the script instead of Redis's
	// own (Env.rateEdgeClock: tests replaying virtual time).
	edgeClock bool
	downUntil atomic.Int64 // unix ns: no call before, after a failure

	// cache holds, per client key, a refusal (b = refused|rule) until a,
	// b leased units until a, or (b = leasing) until a, a request asking
	// Redis for a lease (an expiring keyTable).
	cache keyTable
}

// refused marks a cache entry that refuses; the low bits are the rule.
const refused = 1 << 31

// leasing marks a key whose lease one request is asking Redis for; others
// meanwhile ask for their own unit only, so that an edge holds one lease of
// a key at a time: the bound on unspent units. The mark lasts at most
// redisErrorPause (a call that takes longer lets another request lease).
const leasing = 1 << 30

// newRedisLimit compiles the Redis policy of rules (nil: policy local).
func newRedisLimit(pc PolicyConfig, env *Env, rules []*RateLimit, byUser bool, maxKeys int, local func([16]byte, int64) Verdict) (*redisLimit, field.Errors) {
	var errs field.Errors
	if pc.Policy != "redis" || len(rules) == 0 {
		return nil, nil
	}
	if env == nil || (env.Stock == nil && !env.CheckOnly) {
		errs.Add("policy", `"redis" needs the edge's Redis store (the redis section; the embedded server will do), and this chain was built without one`)
		return nil, errs
	}
	rl := &redisLimit{store: env.Stock, byUser: byUser, units: max(pc.Allowance, 1), local: local, edgeClock: env.rateEdgeClock}
	switch pc.OnRedisError {
	case "allow":
		rl.onError = onErrorAllow
	case "deny":
		rl.onError = onErrorDeny
	}
	rrules := make([]stock.RateRule, len(rules))
	rl.leaseMs = 1000
	for i, r := range rules {
		milli := min(max(r.Limit.Rate.Milli, 1), MaxRatePerSecond*1000)
		rrules[i] = stock.RateRule{Zone: r.Zone, Milli: milli, Burst: r.Limit.Burst, Delay: r.Limit.Delay}
		rl.rejects = append(rl.rejects, r.Reject)
		rl.leaseMs = min(rl.leaseMs, max(1000*1000/milli, 1))
	}
	plan, err := stock.NewRatePlan(rrules)
	if err != nil {
		errs.Add("policy", "%v", err)
		return nil, errs
	}
	rl.plan = plan
	rl.cache.init(maxKeys)
	return rl, nil
}

// Check decides one request of key (the edge's key of the client; the
// Redis key is built from r only when Redis is asked).
func (rl *redisLimit) Check(r *Request, key [16]byte) Verdict {
	now := r.NowNano / int64(time.Millisecond)
	v, hit, lead := rl.cached(&key, now)
	if hit {
		return v
	}
	if rl.store == nil || r.NowNano < rl.downUntil.Load() {
		rl.unmark(&key, now, lead)
		return rl.failed(key, r.NowNano)
	}
	var at int64
	if rl.edgeClock {
		at = now
	}
	units := 1
	if lead {
		units = rl.units
	}
	a, err := rl.store.TakeRate(context.Background(), rl.plan, rl.client(r, &key), units, at)
	if err != nil {
		if !errors.Is(err, stock.ErrInvalid) { // a client no key can name says nothing of Redis
			rl.downUntil.Store(r.NowNano + int64(redisErrorPause))
		}
		rl.unmark(&key, now, lead)
		return rl.failed(key, r.NowNano)
	}
	switch {
	case a.Units == 0:
		rl.remember(&key, now, a.WaitAll.Milliseconds(), refused|uint32(a.Refused))
		return Verdict{Reject: rl.rejects[a.Refused], RetryAfter: retryAfter(a.Wait)}
	case a.Units > 1:
		rl.remember(&key, now, rl.leaseMs, uint32(a.Units-1))
	default:
		rl.unmark(&key, now, lead)
	}
	return Verdict{Delay: a.Delay}
}

func retryAfter(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// client is the Redis key's hash tag: the user id, or the address (after
// ipv6_prefix) in its text form.
func (rl *redisLimit) client(r *Request, key *[16]byte) string {
	if rl.byUser {
		return "u:" + string(r.UserID)
	}
	return "ip:" + netip.AddrFrom16(*key).Unmap().String()
}

func (rl *redisLimit) failed(key [16]byte, nowNano int64) Verdict {
	switch rl.onError {
	case onErrorAllow:
		return Pass
	case onErrorDeny:
		return Verdict{Reject: rl.rejects[0], RetryAfter: 1}
	}
	return rl.local(key, nowNano)
}

// cached answers from the edge's cache: a refusal while one is remembered,
// a pass that spends a leased unit, or nothing (hit false). On a miss, lead
// says this request is to ask for the lease (the key is then marked
// leasing); with no allowance nobody leads.
func (rl *redisLimit) cached(key *[16]byte, now int64) (v Verdict, hit, lead bool) {
	s, h := rl.cache.shard(key)
	s.mu.Lock()
	rel := s.prepare(now, expiring)
	i, found := s.t.find(key, h)
	if found && int64(s.t.slots[i].a) <= rel {
		s.t.remove(i)
		found = false
	}
	if !found {
		if rl.units > 1 {
			s.insert(key, h, rel, now, expiring, &rl.cache)
			i, _ = s.t.find(key, h)
			s.t.slots[i].a, s.t.slots[i].b = uint32(rel+redisErrorPause.Milliseconds()), leasing
			lead = true
		}
		s.mu.Unlock()
		return Pass, false, lead
	}
	e := &s.t.slots[i]
	switch {
	case e.b&refused != 0:
		rule, wait := e.b&^refused, int64(e.a)-rel
		s.mu.Unlock()
		return Verdict{Reject: rl.rejects[rule], RetryAfter: retryAfter(time.Duration(wait) * time.Millisecond)}, true, false
	case e.b == leasing:
		s.mu.Unlock()
		return Pass, false, false
	}
	if e.b--; e.b == 0 {
		s.t.remove(i)
	}
	s.mu.Unlock()
	return Pass, true, false
}

// unmark removes the leader's leasing mark when its call brought no lease.
func (rl *redisLimit) unmark(key *[16]byte, now int64, lead bool) {
	if !lead {
		return
	}
	s, h := rl.cache.shard(key)
	s.mu.Lock()
	s.prepare(now, expiring)
	if i, found := s.t.find(key, h); found && s.t.slots[i].b == leasing {
		s.t.remove(i)
	}
	s.mu.Unlock()
}

// remember caches a refusal or a lease (b) of key for forMs from now. A
// lease adds to one still running and keeps the earlier end, so that no
// unit outlives its own lease.
func (rl *redisLimit) remember(key *[16]byte, now, forMs int64, b uint32) {
	s, h := rl.cache.shard(key)
	s.mu.Lock()
	rel := s.prepare(now, expiring)
	end := uint32(rel + min(max(forMs, 1), rebaseKeepMs))
	i, found := s.t.find(key, h)
	if !found {
		s.insert(key, h, rel, now, expiring, &rl.cache)
		i, _ = s.t.find(key, h)
	} else if e := &s.t.slots[i]; int64(e.a) > rel && e.b&(refused|leasing) == 0 && b&refused == 0 {
		e.b += b
		e.a = min(e.a, end)
		s.mu.Unlock()
		return
	}
	s.t.slots[i].a, s.t.slots[i].b = end, b
	s.mu.Unlock()
}

// RegisterRedisMetrics exports the Redis policy's script calls of store:
// flashgate_limit_redis_calls_total{result="pass|refuse|error"}. The
// decisions the edge's cache answered are not calls; the filters' own
// verdict counters count every decision.
func RegisterRedisMetrics(reg *metrics.Registry, store *stock.Store) {
	reg.Register("flashgate_limit_redis_calls_total", "Rate limit script calls to Redis (policy redis) by result.", "counter", func(w *metrics.Writer) {
		c := store.RateCalls()
		w.Value(float64(c.Passed), metrics.Label{Name: "result", Value: "pass"})
		w.Value(float64(c.Refused), metrics.Label{Name: "result", Value: "refuse"})
		w.Value(float64(c.Failed), metrics.Label{Name: "result", Value: "error"})
	})
}
