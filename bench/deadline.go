package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/orders/stock"
)

// bench deadlines measures the pay-deadline sweep (issue 16) on the real
// binary: what releasing costs and how punctual it is, with one edge and
// with two sweeping the same deadlines. For each number of edges, two
// phases, each on fresh servers (redis-server, kfake, the edge's embedded
// order store or ClickHouse):
//
//   - live: shoppers buy at a steady rate with a short pay_timeout and
//     nobody pays, so deadlines fall due at that rate while the edges run;
//     the precision is each release's time (the order's `closed`, Redis
//     TIME in the release script) minus its deadline (`payby`).
//   - backlog: N orders are bought with a long pay_timeout, the edges are
//     stopped, every deadline passes, the edges start again and find N
//     overdue: the cost is N over the time from the first release to the
//     last (releases/s).
//
// Both read the orders in Redis through orders/stock's key names and parser,
// like the failover scenario; the edge itself is only driven over HTTP.

// deadlineFlags are `bench deadlines`'s flags.
type deadlineFlags struct {
	edges          string
	orders         int
	liveOrders     int
	liveRate       float64
	liveTimeout    time.Duration
	backlogTimeout time.Duration
	workers        int
	gomaxprocs     int
	clickhouse     bool
	proxyBin       string
	out            string
	keep, quiet    bool
}

// DeadlineResult is result.json of `bench deadlines`.
type DeadlineResult struct {
	Started   time.Time       `json:"started"`
	Commit    string          `json:"commit"`
	Machine   string          `json:"machine"`
	GoVersion string          `json:"go_version"`
	Store     string          `json:"store"`
	Points    []DeadlinePoint `json:"points"`
}

// DeadlinePoint is one number of edges.
type DeadlinePoint struct {
	Edges int           `json:"edges"`
	Live  DeadlinePhase `json:"live"`
	// Backlog: ReleasesPerSec is the cost figure.
	Backlog DeadlinePhase `json:"backlog"`
}

// DeadlinePhase is what one phase measured.
type DeadlinePhase struct {
	Orders     int     `json:"orders"`      // bought (answered 200)
	BuyErrors  int     `json:"buy_errors"`  // purchases not answered 200
	BuySeconds float64 `json:"buy_seconds"` // first purchase to last answer
	Released   int     `json:"released"`    // orders found expired
	Unreleased int     `json:"unreleased"`  // still unpaid when bench gave up waiting
	// SweepSeconds is the first release to the last; ReleasesPerSec is
	// Released over it.
	SweepSeconds   float64 `json:"sweep_seconds"`
	ReleasesPerSec float64 `json:"releases_per_sec"`
	// The lateness of the releases (release time minus deadline), ms.
	LateP50Ms float64 `json:"late_p50_ms"`
	LateP99Ms float64 `json:"late_p99_ms"`
	LateMaxMs float64 `json:"late_max_ms"`
	// DrainSeconds (backlog): from the edges answering again to the last
	// release.
	DrainSeconds float64    `json:"drain_seconds,omitempty"`
	Reconcile    Reconciled `json:"reconcile"`
	Err          string     `json:"error,omitempty"`
}

func cmdDeadlines(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench deadlines", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f deadlineFlags
	fs.StringVar(&f.edges, "edges", "1,2", "the points: edges sweeping the same deadlines, e.g. 1,2")
	fs.IntVar(&f.orders, "orders", 20000, "backlog: orders overdue at once when the edges start")
	fs.IntVar(&f.liveOrders, "live-orders", 6000, "live: orders bought at -live-rate, none paid")
	fs.Float64Var(&f.liveRate, "live-rate", 300, "live: purchases (so deadlines) per second")
	fs.DurationVar(&f.liveTimeout, "live-timeout", 2*time.Second, "live: the sale's pay_timeout")
	fs.DurationVar(&f.backlogTimeout, "backlog-timeout", 90*time.Second, "backlog: the sale's pay_timeout (the N orders must be bought within it)")
	fs.IntVar(&f.workers, "workers", 64, "concurrent purchases")
	fs.IntVar(&f.gomaxprocs, "gomaxprocs", 1, "GOMAXPROCS of each edge (0: Go's default)")
	fs.BoolVar(&f.clickhouse, "clickhouse", false, "store orders in a clickhouse-server bench starts instead of the edge's embedded store")
	fs.StringVar(&f.proxyBin, "proxy-bin", "", "a prebuilt cmd/proxy binary instead of building the working tree")
	fs.StringVar(&f.out, "out", "", "directory for result.json (default bench/results/deadlines-TIME)")
	fs.BoolVar(&f.keep, "keep", false, "keep the run directories (configs, logs, data)")
	fs.BoolVar(&f.quiet, "q", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	points, err := parseEdgePoints(f.edges)
	if err != nil {
		fmt.Fprintln(stderr, "bench deadlines: -edges:", err)
		return 2
	}
	switch {
	case f.orders < 1 || f.liveOrders < 1:
		fmt.Fprintln(stderr, "bench deadlines: -orders and -live-orders must be at least 1")
		return 2
	case f.liveRate <= 0 || f.workers < 1:
		fmt.Fprintln(stderr, "bench deadlines: -live-rate and -workers must be positive")
		return 2
	case f.liveTimeout < time.Second || f.backlogTimeout < time.Second:
		fmt.Fprintln(stderr, "bench deadlines: -live-timeout and -backlog-timeout must be at least 1s (the edge's own bound)")
		return 2
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	ctx, stop := signalContext()
	defer stop()
	progress := stderr
	if f.quiet {
		progress = io.Discard
	}
	res := &DeadlineResult{Started: time.Now().UTC(), Commit: proxyCommit(root, ""), Machine: machineInfo(),
		GoVersion: runtime.Version(), Store: "the edge's embedded order store"}
	if f.clickhouse {
		res.Store = "clickhouse-server"
	}
	for _, n := range points {
		pt := DeadlinePoint{Edges: n}
		pt.Live = runDeadlinePhase(ctx, root, f, n, false, progress)
		pt.Backlog = runDeadlinePhase(ctx, root, f, n, true, progress)
		res.Points = append(res.Points, pt)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "bench deadlines:", ctx.Err())
			return 130
		}
	}
	out := f.out
	if out == "" {
		out = filepath.Join(root, "bench", "results", "deadlines-"+res.Started.Format("20060102-150405"))
	}
	if err := os.MkdirAll(out, 0o755); err == nil {
		b, _ := json.MarshalIndent(res, "", "  ")
		err = os.WriteFile(filepath.Join(out, "result.json"), b, 0o644)
		if err != nil {
			fmt.Fprintln(stderr, "bench deadlines:", err)
		}
	}
	printDeadlines(stdout, res)
	fmt.Fprintln(stdout, "result:", filepath.Join(out, "result.json"))
	if !res.passed() {
		return 1
	}
	return 0
}

// parseEdgePoints reads "1,2".
func parseEdgePoints(s string) ([]int, error) {
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 4 {
			return nil, fmt.Errorf("%q: want edges of 1..4, comma-separated", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// passed: every phase ran, released everything and reconciled clean.
func (r *DeadlineResult) passed() bool {
	for _, p := range r.Points {
		for _, ph := range []DeadlinePhase{p.Live, p.Backlog} {
			if ph.Err != "" || ph.Unreleased > 0 || !ph.Reconcile.Clean {
				return false
			}
		}
	}
	return len(r.Points) > 0
}

// runDeadlinePhase runs one phase on fresh servers; an error is recorded
// in the phase.
func runDeadlinePhase(ctx context.Context, root string, f deadlineFlags, edges int, backlog bool, progress io.Writer) DeadlinePhase {
	var ph DeadlinePhase
	name := phaseName(backlog)
	if err := deadlinePhase(ctx, root, f, edges, backlog, progress, &ph); err != nil {
		ph.Err = err.Error()
		fmt.Fprintf(progress, "bench deadlines: %d edge(s), %s: %v\n", edges, name, err)
	}
	return ph
}

func phaseName(backlog bool) string {
	if backlog {
		return "backlog"
	}
	return "live"
}

func deadlinePhase(ctx context.Context, root string, f deadlineFlags, edges int, backlog bool, progress io.Writer, ph *DeadlinePhase) error {
	if err := need("bench deadlines", toolRedis); err != nil {
		return err
	}
	dir, _, cleanup, err := runDir("deadlines", f.keep, false, progress)
	if err != nil {
		return err
	}
	defer cleanup()
	env := newEnv(EnvOptions{Root: root, Dir: dir, GoMaxProcs: f.gomaxprocs, InfraCPU: -1, Kafka: "bench",
		ClickHouse: f.clickhouse, ProxyBin: f.proxyBin, Quiet: progress})
	defer env.Close()
	if err := env.build("./cmd/proxy", "./bench/origin"); err != nil {
		return err
	}
	if err := env.StartRedis(ctx); err != nil {
		return err
	}
	if err := env.StartKafka(ctx); err != nil {
		return err
	}
	if f.clickhouse {
		if err := env.StartClickHouse(); err != nil {
			return err
		}
	}
	if err := env.StartOrigin(ctx); err != nil {
		return err
	}
	orders, timeout, product := f.liveOrders, f.liveTimeout, "dl"
	if backlog {
		orders, timeout, product = f.orders, f.backlogTimeout, "db"
	}
	now := time.Now()
	spec := EdgeSpec{RedisAddr: env.RedisAddr, OriginAddr: env.OriginAddr,
		Products: []Activity{{ID: product, Stock: orders, Limit: 1, Price: "9.90", Start: now.Add(-time.Minute), End: now.Add(6 * time.Hour)}},
		Extra:    map[string]any{"orders": map[string]any{"pay_timeout": timeout.String()}}}
	set, err := env.StartEdges(ctx, spec, edges, false, f.gomaxprocs)
	if err != nil {
		return err
	}
	users, err := newUsers(orders, benchSessionSecret, benchTokenSecret)
	if err != nil {
		return err
	}
	rc, err := dialRedis(env.RedisAddr)
	if err != nil {
		return err
	}
	defer rc.Close()

	rate := f.liveRate
	if backlog {
		rate = 0 // as fast as the edges take them
	}
	fmt.Fprintf(progress, "bench deadlines: %d edge(s), %s: buying %d orders (pay_timeout %v)\n", edges, phaseName(backlog), orders, timeout)
	t0 := time.Now()
	ids, failed := buyOrders(ctx, set.Addrs, users, product, orders, rate, f.workers)
	ph.Orders, ph.BuyErrors, ph.BuySeconds = len(ids), failed, time.Since(t0).Seconds()
	if len(ids) == 0 {
		return errors.New("no purchase answered 200")
	}
	due := stock.DueKey(product)
	var ready time.Time
	if backlog {
		if time.Since(t0) > timeout-2*time.Second {
			return fmt.Errorf("buying took %.1fs, too close to -backlog-timeout %v: the deadlines fell due while the edges ran", time.Since(t0).Seconds(), timeout)
		}
		// Every deadline in the due set (the consumer marks the orders
		// stored, which adds them), then no edge running while they pass.
		if err := pollUntil(ctx, timeout/2, func() (bool, error) {
			n, err := rc.Do("ZCARD", due)
			return n == int64(len(ids)), err
		}); err != nil {
			return fmt.Errorf("the due set never held the %d orders: %w", len(ids), err)
		}
		for _, p := range set.Procs {
			p.Stop(10 * time.Second)
		}
		last, err := rc.Do("ZRANGE", due, "-1", "-1", "WITHSCORES")
		if err != nil {
			return err
		}
		arr, _ := last.([]any)
		if len(arr) != 2 {
			return fmt.Errorf("ZRANGE %s: %v", due, last)
		}
		score, _ := arr[1].(string)
		lastDue, _ := strconv.ParseFloat(score, 64)
		wait := time.Until(time.UnixMilli(int64(lastDue)).Add(200 * time.Millisecond))
		fmt.Fprintf(progress, "bench deadlines: edges stopped; every deadline passes in %.1fs, then %d edge(s) start on %d overdue orders\n", wait.Seconds(), edges, len(ids))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if set, err = env.StartEdges(ctx, spec, edges, false, f.gomaxprocs); err != nil {
			return err
		}
		ready = time.Now()
	}
	// Wait for the deadlines (a generous bound: the phase fails, with its
	// figure, when the sweep does not keep up).
	within := timeout + 2*time.Minute
	if !backlog {
		within = timeout + time.Minute
	}
	var closed []int64
	var late []float64
	err = pollUntil(ctx, within, func() (bool, error) {
		var err error
		closed, late, ph.Unreleased, err = deadlineStates(rc, product, ids)
		return ph.Unreleased == 0, err
	})
	if err != nil && ph.Unreleased == 0 {
		return err
	}
	ph.Released = len(closed)
	d := summarizeDeadlines(closed, late)
	ph.SweepSeconds, ph.ReleasesPerSec, ph.LateP50Ms, ph.LateP99Ms, ph.LateMaxMs = d.sweepS, d.perSec, d.p50, d.p99, d.max
	if backlog && len(closed) > 0 {
		ph.DrainSeconds = time.UnixMilli(d.lastMs).Sub(ready).Seconds()
	}
	ph.Reconcile = proxyReconcile(ctx, env.bins["proxy"], set.ConsumerConfig)
	fmt.Fprintf(progress, "bench deadlines: %d edge(s), %s: %d released in %.2fs (%.0f/s), late p50 %.0f ms p99 %.0f ms; %d unreleased; reconcile clean %v\n",
		edges, phaseName(backlog), ph.Released, ph.SweepSeconds, ph.ReleasesPerSec, ph.LateP50Ms, ph.LateP99Ms, ph.Unreleased, ph.Reconcile.Clean)
	return nil
}

// buyOrders buys one unit for each of n shoppers (minted tokens, so one
// call each), spread over the edges, at rate a second (0: unpaced), and
// returns the order ids of the 200s and how many were not.
func buyOrders(ctx context.Context, addrs []string, users *Users, product string, n int, rate float64, workers int) ([]int64, int) {
	clients := make([]*fasthttp.HostClient, len(addrs))
	for i, a := range addrs {
		clients[i] = &fasthttp.HostClient{Addr: a, MaxConns: workers, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	}
	var next atomic.Int64
	var mu sync.Mutex
	var ids []int64
	failed := 0
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			var tok []byte
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if rate > 0 {
					if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
						time.Sleep(d)
					}
				}
				user := users.ID(i)
				tok = users.Token(tok[:0], user, product, edgeTokenTTL)
				req.Reset()
				req.Header.SetMethod("POST")
				req.SetRequestURI("http://" + addrs[i%len(addrs)] + "/api/seckill/do")
				req.Header.Set("Authorization", "Bearer "+users.Session(i))
				req.Header.SetContentType("application/json")
				req.SetBodyString(`{"productId":"` + product + `","token":"` + string(tok) + `","quantity":1}`)
				err := clients[i%len(addrs)].Do(req, res)
				var id int64
				if err == nil && res.StatusCode() == 200 {
					id, err = strconv.ParseInt(jsonField(res.Body(), "orderId"), 10, 64)
				}
				mu.Lock()
				if err == nil && id > 0 {
					ids = append(ids, id)
				} else {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids, failed
}

// jsonField is "key":"value" of a flat JSON answer.
func jsonField(b []byte, key string) string {
	s := string(b)
	k := `"` + key + `":"`
	i := strings.Index(s, k)
	if i < 0 {
		return ""
	}
	s = s[i+len(k):]
	if j := strings.IndexByte(s, '"'); j >= 0 {
		return s[:j]
	}
	return ""
}

// deadlineStates reads every order's state, deadline and release time:
// the release times and lateness (ms) of the expired ones, and how many are
// still unpaid.
func deadlineStates(rc *redisConn, product string, ids []int64) (closed []int64, late []float64, unreleased int, err error) {
	for _, id := range ids {
		o, err := readOrder(rc, product, id)
		if err != nil {
			return nil, nil, 0, err
		}
		if o.State != stock.StateExpired {
			unreleased++
			continue
		}
		closed = append(closed, o.ClosedMs)
		late = append(late, float64(o.ClosedMs-o.PayByMs))
	}
	return closed, late, unreleased, nil
}

func str(v any) string { s, _ := v.(string); return s }

// readOrder reads an order in any of orders/stock's layouts: a field of
// its order bucket hash (ledger "b"), the string (GET), or an older edge's
// hash (the GET answers WRONGTYPE).
func readOrder(rc *redisConn, product string, id int64) (stock.OrderInfo, error) {
	if v, err := rc.Do("HGET", stock.OrderBucketKey(product, id), strconv.FormatInt(id, 10)); err != nil {
		return stock.OrderInfo{}, fmt.Errorf("HGET order %d: %w", id, err)
	} else if s := str(v); s != "" {
		o, _ := stock.ParseOrder(product, id, s)
		return o, nil
	}
	key := stock.OrderKey(product, id)
	v, err := rc.Do("GET", key)
	if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
		v, err = rc.Do("HMGET", key, "state", "payby", "closed")
		f, _ := v.([]any)
		if err != nil || len(f) != 3 {
			return stock.OrderInfo{}, fmt.Errorf("HMGET order %d: %v %v", id, v, err)
		}
		o := stock.OrderInfo{State: str(f[0])}
		o.PayByMs, _ = strconv.ParseInt(str(f[1]), 10, 64)
		o.ClosedMs, _ = strconv.ParseInt(str(f[2]), 10, 64)
		return o, nil
	}
	if err != nil {
		return stock.OrderInfo{}, fmt.Errorf("GET order %d: %w", id, err)
	}
	o, _ := stock.ParseOrder(product, id, str(v)) // nil: no such order, State ""
	return o, nil
}

// pollUntil calls f every 100 ms until it reports done, fails, or within
// passes.
func pollUntil(ctx context.Context, within time.Duration, f func() (bool, error)) error {
	end := time.Now().Add(within)
	for {
		done, err := f()
		switch {
		case err != nil:
			return err
		case done:
			return nil
		case time.Now().After(end):
			return fmt.Errorf("not within %v", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// deadlineSummary is a phase's figures from its releases.
type deadlineSummary struct {
	sweepS, perSec float64
	p50, p99, max  float64
	lastMs         int64
}

// summarizeDeadlines: the span of the release times and the rate over it
// (a single release: its own millisecond), and the lateness percentiles
// (nearest rank).
func summarizeDeadlines(closed []int64, late []float64) deadlineSummary {
	var d deadlineSummary
	if len(closed) == 0 {
		return d
	}
	lo, hi := closed[0], closed[0]
	for _, c := range closed {
		lo, hi = min(lo, c), max(hi, c)
	}
	d.lastMs = hi
	d.sweepS = float64(hi-lo+1) / 1000
	d.perSec = float64(len(closed)) / d.sweepS
	s := slices.Clone(late)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(len(s)-1, i))]
	}
	d.p50, d.p99, d.max = rank(0.50), rank(0.99), s[len(s)-1]
	return d
}

// printDeadlines writes the table and a RESULT line per point.
func printDeadlines(w io.Writer, r *DeadlineResult) {
	fmt.Fprintf(w, "pay deadlines: %s, %s, %s\n", r.Machine, r.GoVersion, r.Store)
	fmt.Fprintf(w, "%-6s %-8s %8s %10s %12s %10s %10s %10s %9s\n", "edges", "phase", "orders", "sweep_s", "releases/s", "late_p50", "late_p99", "late_max", "reconcile")
	for _, p := range r.Points {
		for _, row := range []struct {
			name string
			ph   DeadlinePhase
		}{{"live", p.Live}, {"backlog", p.Backlog}} {
			ph := row.ph
			if ph.Err != "" {
				fmt.Fprintf(w, "%-6d %-8s error: %s\n", p.Edges, row.name, ph.Err)
				continue
			}
			fmt.Fprintf(w, "%-6d %-8s %8d %10.2f %12.0f %8.0fms %8.0fms %8.0fms %9v\n", p.Edges, row.name, ph.Released,
				ph.SweepSeconds, ph.ReleasesPerSec, ph.LateP50Ms, ph.LateP99Ms, ph.LateMaxMs, ph.Reconcile.Clean)
		}
		fmt.Fprintf(w, "RESULT scenario=deadlines edges=%d live_releases=%d live_late_p50_ms=%.0f live_late_p99_ms=%.0f backlog_releases=%d backlog_releases_per_s=%.0f backlog_drain_s=%.2f unreleased=%d\n",
			p.Edges, p.Live.Released, p.Live.LateP50Ms, p.Live.LateP99Ms, p.Backlog.Released, p.Backlog.ReleasesPerSec,
			p.Backlog.DrainSeconds, p.Live.Unreleased+p.Backlog.Unreleased)
	}
}
