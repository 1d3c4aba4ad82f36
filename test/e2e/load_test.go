package e2e

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

var (
	loadAttempts = flag.Int("e2e.attempts", 200_000, "purchase attempts (token + do) of TestNoOversellUnderLoad")
	loadBuyers   = flag.Int("e2e.buyers", 2000, "concurrent buyers of TestNoOversellUnderLoad")
)

// purchase is one 200 answer.
type purchase struct {
	product, user, order string
	qty                  int
}

// loadResult is what the buyers saw.
type loadResult struct {
	ok       []purchase
	answers  map[string]int // "410 SOLD_OUT" -> count
	errors   int            // transport errors
	attempts int
	elapsed  time.Duration
	// lastOK is when the last 200 came, and lastOKAt how many attempts had
	// been started by then: the rate while stock remained.
	lastOK   time.Duration
	lastOKAt int64
}

// runLoad has `buyers` goroutines make `attempts` purchase attempts in total
// (token then do) for random products and users user-<n>, n in [0, users).
func runLoad(t *testing.T, e *edge, j *jwts, products []string, attempts, buyers, users int, qty func(*rand.Rand) int) loadResult {
	t.Helper()
	var next atomic.Int64
	var lastOK, lastOKAt atomic.Int64
	var mu sync.Mutex
	res := loadResult{answers: map[string]int{}, attempts: attempts}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			var ok []purchase
			answers := map[string]int{}
			errs := 0
			for {
				n := next.Add(1)
				if n > int64(attempts) {
					break
				}
				user := "user-" + strconv.Itoa(rng.IntN(users))
				p := products[rng.IntN(len(products))]
				q := qty(rng)
				r, err := e.attempt(j.get(user), p, q)
				if err != nil {
					errs++
					continue
				}
				if r.status == 200 {
					ok = append(ok, purchase{product: p, user: user, order: jsonStr(r.body, "orderId"), qty: q})
					if d := int64(time.Since(start)); d > lastOK.Load() {
						lastOK.Store(d) // racy max; only for the log
						lastOKAt.Store(n)
					}
					if jsonStr(r.body, "status") != "pending" || jsonStr(r.body, "productId") != p {
						answers["200 malformed: "+string(r.body)]++
					}
					continue
				}
				answers[strconv.Itoa(r.status)+" "+r.code()]++
			}
			mu.Lock()
			res.ok = append(res.ok, ok...)
			for k, v := range answers {
				res.answers[k] += v
			}
			res.errors += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.lastOK, res.lastOKAt = time.Duration(lastOK.Load()), lastOKAt.Load()
	return res
}

func (r loadResult) log(t *testing.T) {
	t.Helper()
	keys := make([]string, 0, len(r.answers))
	for k := range r.answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := fmt.Sprintf("200 OK=%d", len(r.ok))
	for _, k := range keys {
		s += fmt.Sprintf(", %s=%d", k, r.answers[k])
	}
	t.Logf("%d attempts in %v: %.0f attempts/s; %s; transport errors=%d; last 200 after %v (%d attempts, %.0f attempts/s while stock remained)",
		r.attempts, r.elapsed.Round(time.Millisecond), float64(r.attempts)/r.elapsed.Seconds(), s, r.errors,
		r.lastOK.Round(time.Millisecond), r.lastOKAt, float64(r.lastOKAt)/r.lastOK.Seconds())
}

// checkLoad asserts the promises of a sale after the load: exactly the stock
// sold (in units), stock keys 0, nobody above the limit (in Redis and in
// what the buyers were told), one outbox entry per 200 answer and no other,
// unique order ids.
func checkLoad(t *testing.T, rd *rdb, products []string, stockEach int64, limit int, res loadResult) {
	t.Helper()
	for k, n := range res.answers {
		switch k {
		case "410 SOLD_OUT", "409 LIMIT_REACHED":
		default:
			t.Errorf("unexpected answer %q ×%d", k, n)
		}
	}
	if res.errors > 0 {
		t.Errorf("%d transport errors", res.errors)
	}
	var units int64
	unitsBy := map[string]int64{}
	perUser := map[string]int{} // product/user -> units told 200
	orders := map[string]bool{}
	for _, p := range res.ok {
		units += int64(p.qty)
		unitsBy[p.product] += int64(p.qty)
		perUser[p.product+"/"+p.user] += p.qty
		if p.order == "" || orders[p.order] {
			t.Errorf("order id %q missing or not unique", p.order)
		}
		orders[p.order] = true
	}
	if want := stockEach * int64(len(products)); units != want {
		t.Errorf("units sold (200 answers) = %d, want exactly %d", units, want)
	}
	for k, n := range perUser {
		if n > limit {
			t.Errorf("%s was told 200 for %d units, limit %d", k, n, limit)
		}
	}
	var outboxTotal int64
	for _, p := range products {
		if s := rd.stock(p); s != 0 {
			t.Errorf("stock of %s = %d, want 0", p, s)
		}
		if unitsBy[p] != stockEach {
			t.Errorf("%s: %d units sold, want %d", p, unitsBy[p], stockEach)
		}
		n := rd.orderCount(p)
		outboxTotal += n
		ids, ounits := rd.orders(p)
		if int64(len(ids)) != n || ounits != stockEach {
			t.Errorf("%s: outbox holds %d entries (%d units), want %d units", p, len(ids), ounits, stockEach)
		}
		for _, id := range ids {
			if !orders[id] {
				t.Errorf("%s: outbox entry for order %s that no shopper was told about", p, id)
			}
		}
		var bought int64
		for u, c := range rd.buyers(p) {
			bought += c
			if c > int64(limit) {
				t.Errorf("%s: buyer %s holds %d units in Redis, limit %d", p, u, c, limit)
			}
			if c != int64(perUser[p+"/"+u]) {
				t.Errorf("%s: buyer %s holds %d units in Redis, was told 200 for %d", p, u, c, perUser[p+"/"+u])
			}
		}
		if bought != stockEach {
			t.Errorf("%s: buyers' counts sum to %d, want %d", p, bought, stockEach)
		}
	}
	if outboxTotal != int64(len(res.ok)) {
		t.Errorf("outbox entries = %d, 200 answers = %d", outboxTotal, len(res.ok))
	}
}

// TestNoOversellUnderLoad: 10 products × 1,000 units, 2,000 concurrent
// buyers drawn from a million user ids, 200,000 attempts over real HTTP.
func TestNoOversellUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	const stockEach = 1000
	products := make([]string, 10)
	var acts []string
	for i := range products {
		products[i] = fmt.Sprintf("load%d", i)
	}
	run := func(t *testing.T, attempts, users, limit int, qty func(*rand.Rand) int) {
		r := redistest.New(t)
		acts = acts[:0]
		for _, p := range products {
			acts = append(acts, sale(p, stockEach, limit))
		}
		// A generous Redis budget: a 503 would be an unknown outcome, and
		// this test counts exact outcomes (TestRedisDownDegradesFast tests
		// the budget).
		e := startEdge(t, r.Addr(), "redis: {timeout: 2s}", activities(acts...))
		j := newJWTs(t, sessionSecret)
		res := runLoad(t, e, j, products, attempts, *loadBuyers, users, qty)
		res.log(t)
		checkLoad(t, openRedis(t, r.Addr()), products, stockEach, limit, res)
		checkResults(t, e, j, res.ok[:min(len(res.ok), 200)])
	}
	t.Run("qty1_limit1", func(t *testing.T) {
		run(t, *loadAttempts, 1_000_000, 1, func(*rand.Rand) int { return 1 })
	})
	t.Run("qty1to3_limit5", func(t *testing.T) {
		run(t, *loadAttempts, 1_000_000, 5, func(r *rand.Rand) int { return 1 + r.IntN(3) })
	})
	// With a million ids the limit is rarely tested; 1,500 shoppers (so
	// each product has more would-be buyers than units) make every shopper
	// race its own concurrent attempts. The stock is gone after ~6,000
	// attempts, so 50,000 attempts are plenty.
	t.Run("1500users_qty1to3_limit3", func(t *testing.T) {
		run(t, min(*loadAttempts, 50_000), 1500, 3, func(r *rand.Rand) int { return 1 + r.IntN(3) })
	})
}

// checkResults polls /api/seckill/result for some of the orders: each is
// its buyer's, pending, with its product and quantity; another shopper
// cannot see it.
func checkResults(t *testing.T, e *edge, j *jwts, sample []purchase) {
	t.Helper()
	for _, p := range sample {
		path := "/api/seckill/result?orderId=" + p.order + "&productId=" + p.product
		r := e.must("GET", path, j.get(p.user), nil)
		if r.status != 200 || jsonStr(r.body, "status") != "pending" || jsonStr(r.body, "orderId") != p.order ||
			jsonNum(r.body, "quantity") != strconv.Itoa(p.qty) {
			t.Errorf("result of %s (%s bought %d of %s): %v", p.order, p.user, p.qty, p.product, r)
		}
		if r := e.must("GET", path, j.get("someone-else"), nil); r.status != 404 {
			t.Errorf("another shopper's view of order %s: %v, want 404", p.order, r)
		}
	}
}
