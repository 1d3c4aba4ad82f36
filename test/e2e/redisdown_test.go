package e2e

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

const (
	downTimeout  = 200 * time.Millisecond // redis.timeout
	downFailures = 5                      // sale.breaker_failures
	downOpenFor  = 500 * time.Millisecond // sale.breaker_open_for
	downMargin   = 500 * time.Millisecond // scheduling slack on a busy 2-core machine; budget+margin < 1s
)

var downConfig = "redis: {timeout: " + downTimeout.String() + "}\n" +
	"sale: {breaker_failures: " + strconv.Itoa(downFailures) + ", breaker_open_for: " + downOpenFor.String() + ", refresh_interval: 200ms}\n"

// timed is one answer and how long it took.
type timed struct {
	res resp
	err error
	d   time.Duration
}

// buyMany mints a token for each of n new users, then sends their do calls
// from conc goroutines at once and times each do.
func buyMany(t *testing.T, e *edge, j *jwts, prefix string, n, conc int) []timed {
	t.Helper()
	return sendDo(e, j, prefix, mintD(t, e, j, prefix, n), conc)
}

// mintD mints purchase tokens for product d (no Redis call).
func mintD(t *testing.T, e *edge, j *jwts, prefix string, n int) []string {
	t.Helper()
	toks := make([]string, n)
	for i := range toks {
		res, tok, err := e.token(j.get(prefix+strconv.Itoa(i)), "d")
		if err != nil || res.status != 200 {
			t.Fatalf("token: %v %v", res, err)
		}
		toks[i] = tok
	}
	return toks
}

// sendDo sends the do calls of buyMany.
func sendDo(e *edge, j *jwts, prefix string, toks []string, conc int) []timed {
	n := len(toks)
	out := make([]timed, n)
	var wg sync.WaitGroup
	work := make(chan int)
	for range conc {
		wg.Go(func() {
			for i := range work {
				start := time.Now()
				res, err := e.buy(j.get(prefix+strconv.Itoa(i)), "d", toks[i], 1)
				out[i] = timed{res, err, time.Since(start)}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// allDegraded checks that every answer is 503 DEGRADED within max, and
// returns the slowest.
func allDegraded(t *testing.T, what string, answers []timed, max time.Duration) time.Duration {
	t.Helper()
	var slowest time.Duration
	for i, a := range answers {
		slowest = Max(slowest, a.d)
		if a.err != nil || a.res.status != 503 || a.res.code() != "DEGRADED" {
			t.Errorf("%s: answer %d: %v %v, want 503 DEGRADED", what, i, a.res, a.err)
		}
		if a.d >= max {
			t.Errorf("%s: answer %d took %v, want < %v", what, i, a.d, max)
		}
	}
	return slowest
}

func Max(a, b time.Duration) time.Duration { return max(a, b) }

// TestRedisDownDegradesFast: with Redis gone or hung, purchases are
// answered 503 DEGRADED within twice redis.timeout (at most one budget
// queued behind the call in flight, one for their own call), never hang; the breaker
// then answers without calling Redis and closes again once Redis is back.
func TestRedisDownDegradesFast(t *testing.T) {
	t.Run("stopped", func(t *testing.T) {
		const units, before = 50, 10
		r := redistest.New(t)
		e := startEdge(t, r.Addr(), downConfig, activities(sale("d", units, 1)))
		j := newJWTs(t, sessionSecret)
		sold := 0
		for _, a := range buyMany(t, e, j, "before-", before, 1) {
			if a.res.status != 200 {
				t.Fatalf("before the outage: %v %v", a.res, a.err)
			}
			sold++
		}

		downToks, openToks := mintD(t, e, j, "down-", downFailures), mintD(t, e, j, "open-", 200)
		r.Stop()
		stopped := time.Now()
		// Sequentially: each failure counts towards the breaker.
		slowest := allDegraded(t, "redis stopped", sendDo(e, j, "down-", downToks, 1), downTimeout+downMargin)
		t.Logf("redis stopped: %d answers 503 DEGRADED, slowest %v", downFailures, slowest)
		if st := e.metric("flashgate_redis_breaker_state"); st != 1 {
			t.Fatalf("breaker state %v after %d consecutive failures, want 1 (open)", st, downFailures)
		}

		calls0 := e.metric(`flashgate_redis_script_calls_total{what="calls"}`)
		slowest = allDegraded(t, "breaker open", sendDo(e, j, "open-", openToks, 20), downMargin)
		// The breaker lets one probe through per open_for: on a slow
		// machine this phase may outlast it.
		probes := float64(time.Since(stopped) / downOpenFor)
		if calls := e.metric(`flashgate_redis_script_calls_total{what="calls"}`) - calls0; calls > probes {
			t.Errorf("breaker open: %v script calls attempted by 200 attempts in %v, want at most %v (one probe per open_for)",
				calls, time.Since(stopped).Round(time.Millisecond), probes)
		} else {
			t.Logf("breaker open: 200 answers 503 DEGRADED with %v script calls (probes), slowest %v", calls, slowest)
		}

		// Redis comes back on the same port, empty: no stock key, no buyers,
		// no outbox.
		r.Start()
		back := time.Now()
		var afterRestart []timed
		closed := waitFor(downOpenFor+3*time.Second, func() bool {
			afterRestart = append(afterRestart, buyMany(t, e, j, "probe-"+strconv.Itoa(len(afterRestart))+"-", 1, 1)...)
			return e.metric("flashgate_redis_breaker_state") == 0
		})
		if !closed {
			t.Fatalf("breaker still %v %v after Redis came back (open_for %v)", e.metric("flashgate_redis_breaker_state"), time.Since(back), downOpenFor)
		}
		t.Logf("breaker closed %v after Redis came back (open_for %v)", time.Since(back).Round(time.Millisecond), downOpenFor)
		if d := time.Since(stopped); d < downOpenFor {
			t.Errorf("breaker closed %v after the first failure, before open_for (%v)", d, downOpenFor)
		}

		// What does the edge do with a sale whose Redis state is gone?
		// Promise 4: it must not sell the units sold before again.
		t.Run("restarted_empty_no_resurrection", func(t *testing.T) {
			rd := openRedis(t, r.Addr())
			for _, a := range afterRestart {
				if a.res.status == 200 {
					sold++
				}
			}
			var codes = map[string]int{}
			for i := 0; i < 4*units; i += 20 {
				for _, a := range buyMany(t, e, j, "after-"+strconv.Itoa(i)+"-", 20, 20) {
					codes[strconv.Itoa(a.res.status)+" "+a.res.code()]++
					if a.res.status == 200 {
						sold++
					}
				}
				if st, _ := e.status("d"); st == "soldout" {
					break
				}
			}
			t.Logf("after Redis restarted empty: answers %v; Redis stock key now %d, outbox %d; %d units sold in total (%d before the outage)",
				codes, rd.stock("d"), rd.orderCount("d"), sold, before)
			if sold > units {
				t.Errorf("OVERSOLD: %d units answered 200 in total for a sale of %d: the edge re-warmed the sale with its full configured stock after Redis lost its memory (no ledger); promise 4 says sales stay closed until rebuilt from the ledger", sold, units)
			}
		})
	})

	// A hung Redis (SIGSTOP: connections open, nothing answered) is the
	// case the budget is for: every attempt must come back within it.
	t.Run("paused", func(t *testing.T) {
		r := redistest.New(t)
		e := startEdge(t, r.Addr(), downConfig, activities(sale("d", 100, 1)))
		j := newJWTs(t, sessionSecret)
		if a := buyMany(t, e, j, "before-", 1, 1); a[0].res.status != 200 {
			t.Fatalf("before: %v %v", a[0].res, a[0].err)
		}
		r.Pause()
		defer r.Resume()
		answers := buyMany(t, e, j, "hung-", 40, 20)
		slowest := allDegraded(t, "redis hung", answers, downTimeout+downMargin)
		var fastest = time.Hour
		for _, a := range answers {
			fastest = min(fastest, a.d)
		}
		t.Logf("redis hung: 40 concurrent attempts answered 503 DEGRADED in %v..%v (budget %v per call)", fastest.Round(time.Millisecond), slowest.Round(time.Millisecond), downTimeout)
		// The breaker counts failed script calls, not attempts: the 40
		// went as a few coalesced calls (the rest waited out their budget
		// unsent). Calls one at a time open it within breaker_failures.
		for i := 0; i < downFailures && e.metric("flashgate_redis_breaker_state") != 1; i++ {
			allDegraded(t, "redis hung, one at a time", buyMany(t, e, j, "hung1-"+strconv.Itoa(i)+"-", 1, 1), downTimeout+downMargin)
		}
		if st := e.metric("flashgate_redis_breaker_state"); st != 1 {
			t.Errorf("breaker state %v after 40 concurrent and %d sequential timeouts, want 1 (open)", st, downFailures)
		}
		r.Resume()
		// Redis still holds the sale: once the breaker lets a probe
		// through, the sale goes on.
		ok := waitFor(downOpenFor+3*time.Second, func() bool {
			a := buyMany(t, e, j, "resume-"+strconv.FormatInt(time.Now().UnixNano(), 10)+"-", 1, 1)
			return a[0].res.status == 200
		})
		if !ok {
			t.Errorf("no purchase succeeded within %v of Redis resuming", downOpenFor+3*time.Second)
		}
	})
}
