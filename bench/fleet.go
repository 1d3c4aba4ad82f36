package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"flashgate/conf/field"
	"flashgate/internal/redistest"
)

// The fleet scenario: does the sale scale with the number of edges? For
// each N in fleet.edges bench starts a fresh sale — a new 3+3 Redis
// Cluster, kfake, the order consumer in a process of its own and N real
// edges (cmd/proxy) — and plays the same closed-loop load spread across
// the N edges (shopper i to edge i mod N) in two phases: purchases while
// the stock lasts (200 answers per second), then, once every product has
// answered SOLD_OUT, the same load against the sold-out sale (410s per
// second, answered from the edges' memory). Per phase it books the CPU
// of the edges and of the six Redis nodes per 1,000 requests, and after
// both `proxy reconcile`. The points are printed side by side with their
// ratios against N = 1.

// Fleet is the fleet scenario's section (fleet.go).
type Fleet struct {
	Edges      []int         `yaml:"edges"`        // one point per entry: that many edges (default [1, 2, 3])
	SoldOutFor time.Duration `yaml:"sold_out_for"` // the sold-out phase's length (default 5s)
	Settle     time.Duration `yaml:"settle"`       // between the phases, at most this long for the order pipeline to store every order (default 60s)
}

const (
	maxFleetEdges  = 8
	maxFleetPoints = 8
	// maxFleetUsers bounds the sessions bench signs before the first
	// point (all of them, so that it signs none while it measures).
	maxFleetUsers = 500_000
)

// validateFleet checks the fleet section and what the fleet needs of the
// rest of the scenario; it runs after the steps got their defaults.
func (sc *Scenario) validateFleet(errs *field.Errors) {
	fl := sc.Fleet
	if fl == nil {
		return
	}
	if len(fl.Edges) == 0 {
		fl.Edges = []int{1, 2, 3}
	}
	if fl.SoldOutFor == 0 {
		fl.SoldOutFor = 5 * time.Second
	}
	if fl.Settle == 0 {
		fl.Settle = time.Minute
	}
	if len(fl.Edges) > maxFleetPoints {
		errs.Add("fleet.edges", "at most %d points, not %d", maxFleetPoints, len(fl.Edges))
	}
	for i, n := range fl.Edges {
		if n < 1 || n > maxFleetEdges {
			errs.Add(fmt.Sprintf("fleet.edges[%d]", i), "must be 1..%d edges, not %d", maxFleetEdges, n)
		}
	}
	if fl.SoldOutFor < 0 || fl.SoldOutFor > 10*time.Minute {
		errs.Add("fleet.sold_out_for", "must be 0..10m")
	}
	if fl.Settle < 0 || fl.Settle > 10*time.Minute {
		errs.Add("fleet.settle", "must be 0..10m")
	}
	if sc.Failover != nil {
		errs.Add("fleet", "not with failover: a scenario is one or the other")
	}
	if sc.Faults.Redis != nil || sc.Faults.Origin != nil {
		errs.Add("faults", "not with fleet (the edges talk to the cluster and the origin directly)")
	}
	if len(sc.Steps) != 1 || sc.Steps[0].Call != "do" || sc.Steps[0].Prob != 1 {
		errs.Add("steps", "fleet measures purchase answers: steps must be [{call: do}] (bench mints the tokens)")
	}
	if sc.Users > maxFleetUsers {
		errs.Add("users", "at most %d with fleet: every session is signed before the clock starts", maxFleetUsers)
	}
	if sc.Quantity >= 1 {
		if need := sc.Products * sc.Stock / sc.Quantity; sc.Users < need {
			errs.Add("users", "at least products × stock / quantity (%d) with fleet: a fresh shopper for every purchase, or shoppers come back and hit their limit", need)
		}
	}
}

// parseEdgeList reads -edges: "1,2,3".
func parseEdgeList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > maxFleetEdges {
			return nil, fmt.Errorf("-edges %q: %q is not a number of edges 1..%d (want e.g. 1,2,3)", s, part, maxFleetEdges)
		}
		out = append(out, n)
	}
	if len(out) > maxFleetPoints {
		return nil, fmt.Errorf("-edges %q: at most %d points", s, maxFleetPoints)
	}
	return out, nil
}

// cmdFleet runs the fleet scenario (`bench run -s fleet [-edges 1,2,3]`),
// prints the points side by side and writes result.json.
func cmdFleet(ctx context.Context, root string, sc *Scenario, f runFlags, stdout, stderr io.Writer) int {
	if sc.Fleet == nil {
		fmt.Fprintf(stderr, "bench run: -edges is for a scenario with a fleet: section (-s fleet), not %s\n", sc.Name)
		return 2
	}
	if f.edges != "" {
		list, err := parseEdgeList(f.edges)
		if err != nil {
			fmt.Fprintln(stderr, "bench run:", err)
			return 2
		}
		sc.Fleet.Edges = list
	}
	res, err := runFleet(ctx, root, sc, f, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	printFleet(stdout, res)
	if !res.Passed() {
		return 1
	}
	return 0
}

// fleetTargets splits -target / -admin for a fleet on other machines: the
// edges' listeners, comma-separated, and the admin listener of the process
// holding the order store (reconcile, and the wait between the phases).
func fleetTargets(f runFlags, fl *Fleet) ([]string, error) {
	if f.target == "" {
		return nil, nil
	}
	var targets []string
	for _, t := range strings.Split(f.target, ",") {
		if t = strings.TrimSpace(t); t == "" {
			return nil, fmt.Errorf("-target %q: an empty address", f.target)
		}
		targets = append(targets, t)
	}
	if strings.Contains(f.admin, ",") {
		return nil, fmt.Errorf("-admin %q: one admin listener, the one of the process holding the order store", f.admin)
	}
	if f.edges != "" && (len(fl.Edges) != 1 || fl.Edges[0] != len(targets)) {
		return nil, fmt.Errorf("-edges %s with %d -target addresses: running edges make one point of %d (leave -edges out)", f.edges, len(targets), len(targets))
	}
	return targets, nil
}

// runFleet measures every point of the fleet section, each on a sale of
// its own, and writes the results.
func runFleet(ctx context.Context, root string, sc *Scenario, f runFlags, stderr io.Writer) (*FleetResult, error) {
	switch {
	case f.kafka != "bench":
		return nil, errors.New("the fleet's edges share one broker: -kafka bench (the default)")
	case f.pin || f.pprof:
		return nil, errors.New("-pin and -pprof are not for the fleet scenario (several edges, a cluster)")
	}
	targets, err := fleetTargets(f, sc.Fleet)
	if err != nil {
		return nil, err
	}
	if targets != nil {
		sc.Fleet.Edges = []int{len(targets)}
	}
	dir, progress, cleanup, err := runDir(sc.Name, f.keep, f.quiet, stderr)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res := &FleetResult{Scenario: sc.Name, Description: sc.Description, Started: time.Now().UTC(), Config: sc,
		Machine: machineInfo(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Commit: proxyCommit(root, f.proxyRev),
		EdgeGoMaxProcs: f.gomaxprocs}
	res.Caveat = fleetCaveat(res.CPUs, targets != nil)

	var bins map[string]string
	if targets == nil {
		if err := need("the fleet scenario", toolRedis, toolRedisCLI); err != nil {
			return nil, err
		}
		b := newEnv(EnvOptions{Root: root, Dir: dir, ProxyBin: f.proxyBin, ProxyRev: f.proxyRev, Quiet: progress})
		if err := b.build("./cmd/proxy", "./bench/origin"); err != nil {
			return nil, err
		}
		bins = b.bins
		res.Target = "edges started by bench, each point on a fresh 3+3 Redis Cluster"
	} else {
		for _, t := range targets {
			if err := probe(t); err != nil {
				return nil, err
			}
		}
		res.Target = "external edges " + strings.Join(targets, ",")
	}
	users, err := newUsers(sc.Users, benchSessionSecret, benchTokenSecret)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for i := range sc.Users {
		users.Session(i)
	}
	fmt.Fprintf(progress, "bench: %d sessions signed in %.1fs, before any clock starts\n", sc.Users, time.Since(t0).Seconds())

	out := outDir(root, f, sc, res.Started)
	for i, n := range sc.Fleet.Edges {
		var pt *FleetPoint
		if targets != nil {
			pt, err = fleetExternal(ctx, sc, f, targets, users, progress)
		} else {
			pt, err = fleetPoint(ctx, root, sc, f, n, bins, filepath.Join(dir, fmt.Sprintf("point%d", i+1)), users, progress)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			// Keep the points measured so far: the run fails, its
			// figures do not vanish.
			res.Err = fmt.Sprintf("the point of %d edge(s): %v", n, err)
			fmt.Fprintln(progress, "bench:", res.Err)
			break
		}
		sub := filepath.Join(out, fmt.Sprintf("%d-edges%d", i+1, n))
		for _, ph := range []*FleetPhase{&pt.Purchase, pt.SoldOut} {
			if ph != nil && ph.Run != nil {
				ph.Run.Reconcile = pt.Reconcile
				if err := ph.Run.write(filepath.Join(sub, ph.Name)); err != nil {
					return nil, err
				}
			}
		}
		res.Points = append(res.Points, *pt)
		fmt.Fprintf(progress, "bench: %d edge(s): %.0f purchases/s, %.0f sold-out answers/s, reconcile clean=%v\n",
			n, pt.Purchase.PerSecond, pt.SoldOut.perSecond(), pt.Reconcile.Clean)
	}
	res.finish()
	if err := res.write(out); err != nil {
		return nil, err
	}
	res.OutDir = out
	return res, nil
}

// fleetPoint starts a fresh sale with n edges, measures it and reconciles.
func fleetPoint(ctx context.Context, root string, sc *Scenario, f runFlags, n int, bins map[string]string, dir string, users *Users, progress io.Writer) (*FleetPoint, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	env := newEnv(EnvOptions{Root: root, Dir: dir, GoMaxProcs: f.gomaxprocs, InfraCPU: -1, Kafka: "bench",
		Consumer: "separate", ClickHouse: f.clickhouse, Quiet: progress})
	maps.Copy(env.bins, bins)
	defer env.Close()
	t0 := time.Now()
	fmt.Fprintf(progress, "bench: fleet of %d: starting a Redis Cluster (3 masters, 3 replicas), kafka, origin, the order consumer, %d edge(s)\n", n, n)
	redistest.Binary, redistest.CLIBinary = toolPath(toolRedis), toolPath(toolRedisCLI)
	cluster, err := redistest.LaunchCluster(filepath.Join(dir, "redis-cluster"))
	if err != nil {
		return nil, err
	}
	defer cluster.Close() // after env.Close: the edges go first
	if err := env.StartKafka(ctx); err != nil {
		return nil, err
	}
	if f.clickhouse {
		if err := env.StartClickHouse(); err != nil {
			return nil, err
		}
	}
	if err := env.StartOrigin(ctx); err != nil {
		return nil, err
	}
	spec := EdgeSpec{RedisAddr: strings.Join(cluster.Addrs(), ","), OriginAddr: env.OriginAddr, Extra: sc.Edge}
	saleStart := time.Now().Add(-time.Second) // open from the start
	for i := range sc.Products {
		spec.Products = append(spec.Products, Activity{ID: productID(i), Stock: sc.Stock, Limit: sc.Limit,
			Price: sc.Price, Start: saleStart, End: saleStart.Add(2 * time.Hour)})
	}
	set, err := env.StartEdges(ctx, spec, n, true, f.gomaxprocs)
	if err != nil {
		return nil, err
	}
	var redisPids []int
	for _, a := range cluster.Addrs() {
		pid, err := redisPid(a)
		if err != nil {
			return nil, fmt.Errorf("the pid of redis %s: %w", a, err)
		}
		redisPids = append(redisPids, pid)
	}
	fmt.Fprintf(progress, "bench: %d edge(s) %s (GOMAXPROCS=%d) ready after %.1fs\n", n, strings.Join(set.Addrs, " "), f.gomaxprocs, time.Since(t0).Seconds())
	t := &fleetTarget{head: fleetHead(root, f, fmt.Sprintf("%d edges started by bench on a 3+3 Redis Cluster", n)),
		addrs: set.Addrs, admins: set.Admins, ordersAdmin: env.OrdersAdmin, redis: cluster.Addrs(),
		watches: fleetWatches(set.Procs, redisPids, env.Orders, env.Kafka)}
	pt, err := t.measure(ctx, sc, f, n, users, progress)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(progress, "bench: proxy reconcile (waits for the order pipeline to drain)")
	pt.Reconcile = proxyReconcile(ctx, env.bins["proxy"], set.ConsumerConfig)
	pt.Notes = append(pt.Notes, exitNotes(append(set.Procs, env.Orders)...)...)
	env.Close() // the edges before the cluster
	return pt, nil
}

// fleetHead is what every phase's booked run says about its set-up.
func fleetHead(root string, f runFlags, target string) Result {
	return Result{Machine: machineInfo(), GoVersion: runtime.Version(), Commit: proxyCommit(root, f.proxyRev), Target: target,
		EdgeGoMaxProcs: f.gomaxprocs, Kafka: "bench", Consumer: "separate", ClickHouse: f.clickhouse}
}

// fleetExternal measures edges that run elsewhere (-target a,b,c): the
// operator started them on a fresh sale of the scenario's products and
// stock with bench's secrets; bench watches only its own CPU.
func fleetExternal(ctx context.Context, sc *Scenario, f runFlags, targets []string, users *Users, progress io.Writer) (*FleetPoint, error) {
	t := &fleetTarget{head: Result{Machine: machineInfo(), GoVersion: runtime.Version(), Target: "external " + strings.Join(targets, ",")},
		addrs: targets, ordersAdmin: f.admin, watches: fleetWatches(nil, nil, nil, nil)}
	if f.admin != "" {
		t.admins = []string{f.admin}
	}
	pt, err := t.measure(ctx, sc, f, len(targets), users, progress)
	if err != nil {
		return nil, err
	}
	if f.admin != "" {
		pt.Reconcile = reconcileVia(f.admin, "")
	} else {
		pt.Reconcile = Reconciled{Err: "not run: give -admin (the process holding the order store) with -target"}
	}
	return pt, nil
}

// fleetTarget is what one point loads and watches.
type fleetTarget struct {
	head        Result   // what each phase's run says about the set-up
	addrs       []string // the edges' listeners
	admins      []string // their admin listeners (the script counters)
	ordersAdmin string   // the order store's process: stored orders, reconcile
	redis       []string // the cluster's nodes (INFO commandstats); none for external edges
	watches     []*ProcWatch
}

// Names of the watched process groups that the figures read.
const (
	watchEdges = "edges (all)"
	watchRedis = "redis (6 nodes)"
	watchBench = "bench (load generator)"
)

func fleetWatches(edges []*Proc, redisPids []int, orders, kafka *Proc) []*ProcWatch {
	var edgePids []int
	var ws []*ProcWatch
	for _, p := range edges {
		pid := p.Pid()
		edgePids = append(edgePids, pid)
		ws = append(ws, watchProc(p.Name, func() []int { return []int{pid} }))
	}
	if len(edgePids) > 0 {
		ws = append([]*ProcWatch{watchProc(watchEdges, func() []int { return edgePids })}, ws...)
	}
	if len(redisPids) > 0 {
		ws = append(ws, watchProc(watchRedis, func() []int { return redisPids }))
	}
	for _, p := range []*Proc{orders, kafka} {
		if p != nil {
			pid := p.Pid()
			ws = append(ws, watchProc(p.Name, func() []int { return []int{pid} }))
		}
	}
	self := os.Getpid()
	return append(ws, watchProc(watchBench, func() []int { return []int{self} }))
}

// measure plays the two phases against the point's edges.
func (t *fleetTarget) measure(ctx context.Context, sc *Scenario, f runFlags, n int, users *Users, progress io.Writer) (*FleetPoint, error) {
	pt := &FleetPoint{Edges: n}
	waitQuiet(progress, f.quietPct, f.quietWait)
	fmt.Fprintf(progress, "bench: %d edge(s), purchases until every product answered SOLD_OUT (at most %v): %s\n", n, sc.Duration, describeLoad(sc))
	buy, err := t.phase(ctx, sc, users, progress, true)
	if err != nil {
		return nil, err
	}
	pt.Purchase = fleetFigures("purchase", buy.res, buy.load)
	if !buy.soldOut {
		pt.Notes = append(pt.Notes, fmt.Sprintf("the stock did not sell out within %v: no sold-out phase (more duration or less stock)", sc.Duration))
		return pt, nil
	}
	rej := *sc
	rej.Duration = sc.Fleet.SoldOutFor
	fmt.Fprintf(progress, "bench: %d edge(s), the same load on the sold-out sale for %v\n", n, rej.Duration)
	gone, err := t.phase(ctx, &rej, users, progress, false)
	if err != nil {
		return nil, err
	}
	ph := fleetFigures("soldout", gone.res, gone.load)
	pt.SoldOut = &ph
	return pt, nil
}

// phaseRun is one phase played: the run booked as `bench run` books a
// scenario, whether every product answered SOLD_OUT, and the watched
// processes' CPU over the load alone (res.Processes: until the settle
// ended).
type phaseRun struct {
	res     *Result
	soldOut bool
	load    []ProcStat
}

// phase plays sc once: until sc.Duration or, when buying, until every
// product has answered SOLD_OUT. A buying phase then waits until the
// order consumer stored every order it sold, so that the pipeline's
// work for them is counted in it (and not in the phase after).
func (t *fleetTarget) phase(ctx context.Context, sc *Scenario, users *Users, progress io.Writer, buying bool) (phaseRun, error) {
	res := new(Result)
	*res = t.head
	res.Scenario, res.Description, res.Started, res.Config = sc.Name, sc.Description, time.Now().UTC(), sc
	start := time.Now().Add(200 * time.Millisecond)
	rec := newRecorder(start, callNames)
	if sc.Duration <= 10*time.Second {
		rec.slot = 100 * time.Millisecond
	}
	gen := newGenerator(sc, t.addrs, users, rec)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var seen *soldOutSeen
	if buying {
		seen = newSoldOutSeen(sc.Products, stop)
		gen.observe = seen.observe
	}
	metricsBefore := t.edgeMetrics()
	statsBefore := t.redisStats()
	for _, w := range t.watches {
		w.Reset()
	}
	mb0, mt0 := machineTicks()
	go gen.progress(pctx, progress, start, 0)
	gen.Run(pctx, start)
	end := time.Now()
	stop()
	for _, c := range gen.clients {
		c.CloseIdleConnections() // the next phase opens its own
	}
	if ctx.Err() != nil {
		return phaseRun{}, ctx.Err()
	}
	var load []ProcStat
	for _, w := range t.watches {
		load = append(load, w.Stat())
	}
	if mb1, mt1 := machineTicks(); mt1 > mt0 {
		res.MachineBusyPct = 100 * float64(mb1-mb0) / float64(mt1-mt0) * float64(runtime.NumCPU())
	}
	recordLoad(res, rec, gen, users, sc, start, end)
	if buying {
		if err := t.settle(ctx, sc.Fleet.Settle, okAnswers(res)); err != nil {
			res.Notes = append(res.Notes, err.Error())
		}
	}
	for _, w := range t.watches {
		res.Processes = append(res.Processes, w.Stat())
	}
	res.EdgeMetrics = metricsDelta(metricsBefore, t.edgeMetrics())
	if statsBefore != nil {
		res.RedisCommands = statsDelta(statsBefore, t.redisStats())
	}
	return phaseRun{res: res, soldOut: seen != nil && seen.all(), load: load}, nil
}

// edgeMetrics sums the counters of every edge's /metrics.
func (t *fleetTarget) edgeMetrics() map[string]float64 {
	sum := map[string]float64{}
	for _, a := range t.admins {
		for k, v := range edgeMetrics(a) {
			if !strings.HasPrefix(k, "flashgate_http_request_duration_seconds") {
				sum[k] += v
			}
		}
	}
	return sum
}

func metricsDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// redisStats sums INFO commandstats over the cluster's nodes (nil for
// external edges, whose Redis bench does not know).
func (t *fleetTarget) redisStats() map[string]CmdStat {
	if len(t.redis) == 0 {
		return nil
	}
	sum := map[string]CmdStat{}
	for _, a := range t.redis {
		st, err := commandStats(a)
		if err != nil {
			continue
		}
		for k, v := range st {
			s := sum[k]
			s.Calls, s.Usec = s.Calls+v.Calls, s.Usec+v.Usec
			sum[k] = s
		}
	}
	return sum
}

// settle waits until the order consumer has stored at least ok orders
// (every purchase answered 200 is one), at most within.
func (t *fleetTarget) settle(ctx context.Context, within time.Duration, ok int64) error {
	if t.ordersAdmin == "" || ok == 0 {
		return nil
	}
	deadline := time.Now().Add(within)
	var stored float64
	for {
		stored = edgeMetrics(t.ordersAdmin)["flashgate_orders_stored_total"]
		if stored >= float64(ok) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the order consumer had stored %.0f of %d orders after %v: the sold-out phase began with its backlog", stored, ok, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// soldOutSeen calls done once every product has answered SOLD_OUT at
// least once: the sale is over.
type soldOutSeen struct {
	seen []atomic.Bool
	left atomic.Int64
	done func()
}

func newSoldOutSeen(products int, done func()) *soldOutSeen {
	s := &soldOutSeen{seen: make([]atomic.Bool, products), done: done}
	s.left.Store(int64(products))
	return s
}

// observe is the generator's hook: every purchase answer.
func (s *soldOutSeen) observe(product, status int, code string) {
	if status != 410 || code != "SOLD_OUT" || product < 0 || product >= len(s.seen) || s.seen[product].Swap(true) {
		return
	}
	if s.left.Add(-1) == 0 {
		s.done()
	}
}

func (s *soldOutSeen) all() bool { return s.left.Load() == 0 }

// redisPid asks a Redis node for its process id (INFO server).
func redisPid(addr string) (int, error) {
	rc, err := dialRedis(addr)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	v, err := rc.Do("INFO", "server")
	if err != nil {
		return 0, err
	}
	return infoPid(fmt.Sprint(v))
}

func infoPid(info string) (int, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("no process_id in INFO server")
}
