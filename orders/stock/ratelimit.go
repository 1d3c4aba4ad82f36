package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Rate limits shared by every edge (the filters' `policy: redis`): nginx's
// limit_req arithmetic, kept in Redis by one script call per decision
// (lua/ratelimit.lua), one key per client and zone (rateKeys, keys.go).
//
// The hash tag is the client ("ip:<address>", "u:<user id>"), so that the
// limits of one client (user_limit's several rates) are one slot and one
// script call, and clients spread over a cluster's nodes. An idle key
// computes exactly like an absent one, so its TTL changes no decision: it
// only keeps Redis' memory to the clients seen lately. The keys are not
// part of the embedded server's snapshot (lost on restart, like a local
// limiter's zone).
//
// The clock is the Redis server's (TIME in the script, allowed since 7.0's
// effects replication): the edges' clocks differ, and a key's elapsed time
// must not depend on which edge the client's last request hit. All of a
// client's keys live on one server, so they share one clock. A caller may
// pass its own clock instead (RateAsk.NowMs) to replay a recorded sequence.

var (
	//go:embed lua/ratelimit.lua
	rateLua    string
	rateScript = rueidis.NewLuaScript(rateLua)
)

// RateRule is one limit_req limit in nginx's units.
type RateRule struct {
	// Zone names the state: filters naming the same zone share it.
	Zone string
	// Milli is the rate in milli-requests per second (nginx's unit).
	Milli int64
	// Burst and Delay are in requests (nginx burst= and delay=; Delay >=
	// Burst is nodelay).
	Burst, Delay int
}

// RatePlan is a set of rules checked together, with the script's
// arguments formatted once.
type RatePlan struct {
	zones []string
	args  []string // per rule: rate, burst*1000, delay*1000
}

// NewRatePlan checks and prepares rules (at least one).
func NewRatePlan(rules []RateRule) (*RatePlan, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: a rate plan needs a rule", ErrInvalid)
	}
	p := &RatePlan{}
	for _, r := range rules {
		if r.Zone == "" || r.Milli <= 0 || r.Burst < 0 || r.Delay < 0 || r.Milli > 1e12 || r.Burst > 1e9 {
			return nil, fmt.Errorf("%w: rate rule %+v", ErrInvalid, r)
		}
		p.zones = append(p.zones, r.Zone)
		p.args = append(p.args, strconv.FormatInt(r.Milli, 10),
			strconv.FormatInt(int64(r.Burst)*1000, 10), strconv.FormatInt(int64(min(r.Delay, r.Burst))*1000, 10))
	}
	return p, nil
}

// Rules is how many rules the plan checks.
func (p *RatePlan) Rules() int { return len(p.zones) }

// RateAnswer is the decision of one script call.
type RateAnswer struct {
	// Units granted: 0 refuses; 1 passes the request; more pass the request
	// and lease Units-1 that pass without delay (already charged).
	Units int
	// Delay is how long nginx would hold the request (one unit only).
	Delay time.Duration
	// On a refusal: Wait until the first refusing rule (Refused) would
	// pass, WaitAll until every rule would. Nothing was charged.
	Wait, WaitAll time.Duration
	Refused       int
}

// RateCalls counts the rate script calls by result.
type RateCalls struct {
	Passed, Refused, Failed uint64
}

// rateCalls are the store's counters (atomics, read by RateCalls).
type rateCalls struct{ passed, refused, failed atomic.Uint64 }

// RateCalls reports the rate script calls sent so far.
func (s *Store) RateCalls() RateCalls {
	return RateCalls{Passed: s.rate.passed.Load(), Refused: s.rate.refused.Load(), Failed: s.rate.failed.Load()}
}

// validRateClient is the alphabet of a client key: letters, digits and
// ":._@-" (addresses, "ip:", "u:" and user ids). No brace, which would move
// the hash tag.
func validRateClient(c string) bool {
	if c == "" || len(c) > 128 {
		return false
	}
	for i := 0; i < len(c); i++ {
		switch b := c[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case b == ':', b == '.', b == '_', b == '@', b == '-':
		default:
			return false
		}
	}
	return true
}

// TakeRate asks for up to units (>= 1) units of client under every rule of
// p, at nowMs (unix ms; 0: the Redis server's clock). The call is bounded
// by the store's Timeout. An error means nothing is known: the request may
// or may not have been charged.
func (s *Store) TakeRate(ctx context.Context, p *RatePlan, client string, units int, nowMs int64) (RateAnswer, error) {
	if !validRateClient(client) || units < 1 {
		return RateAnswer{}, fmt.Errorf("%w: rate client %q, units %d", ErrInvalid, client, units)
	}
	if s.closed.Load() {
		return RateAnswer{}, ErrClosed
	}
	keys := rateKeys(client, p.zones)
	args := make([]string, 0, 2+len(p.args))
	now := ""
	if nowMs > 0 {
		now = strconv.FormatInt(nowMs, 10)
	}
	args = append(append(args, now, strconv.Itoa(units)), p.args...)
	cctx, cancel := s.call(ctx)
	defer cancel()
	vals, err := rateScript.Exec(cctx, s.c, keys, args).ToArray()
	if err == nil && len(vals) != 5 {
		err = errors.New("unexpected reply")
	}
	var n [5]int64
	for i := 0; err == nil && i < 5; i++ {
		n[i], err = vals[i].AsInt64()
	}
	if err != nil {
		s.rate.failed.Add(1)
		return RateAnswer{}, fmt.Errorf("stock: rate limit script: %w", err)
	}
	if n[0] == 0 {
		s.rate.refused.Add(1)
		return RateAnswer{Wait: time.Duration(n[2]) * time.Millisecond, WaitAll: time.Duration(n[3]) * time.Millisecond, Refused: int(n[4])}, nil
	}
	s.rate.passed.Add(1)
	return RateAnswer{Units: int(n[0]), Delay: time.Duration(n[1]) * time.Millisecond, Refused: -1}, nil
}
