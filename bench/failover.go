package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"flashgate/internal/redistest"
	"flashgate/orders/stock"
)

// The failover scenario: the sale runs on a Redis Cluster (3 masters, 3
// replicas) behind several edges, and at failover.at the master holding
// p1 — the product most shoppers want — fails over onto a replica that
// lags it. The new master holds an older p1: more stock than was sold,
// fewer buyers, a shorter outbox. The run records what the shoppers were
// told second by second, how long each product was closed, what sold
// before and after, and ends with `proxy reconcile`: the promise is that
// nothing was oversold.

// The answer classes of the failover timeline.
const (
	tlOK         = iota // 200: an order
	tlLimit             // 409 LIMIT_REACHED
	tlSoldOut           // 410 SOLD_OUT
	tlDegraded          // 503 DEGRADED: Redis failed or the breaker is open
	tlRecovering        // 503 RECOVERING: the sale is closed for a rebuild
	tlOther             // any other answer
	tlError             // no answer
	numTimelineCodes
)

var timelineNames = [numTimelineCodes]string{"200", "409", "410", "503 DEGRADED", "503 RECOVERING", "other", "no answer"}

func timelineCode(status int, code string) int {
	switch {
	case status == 0:
		return tlError
	case status == 200:
		return tlOK
	case status == 409:
		return tlLimit
	case status == 410:
		return tlSoldOut
	case status == 503 && code == "DEGRADED":
		return tlDegraded
	case status == 503 && code == "RECOVERING":
		return tlRecovering
	}
	return tlOther
}

// The phases of a failover run.
const (
	phaseBefore = iota // the cluster as created
	phaseDuring        // replica frozen, master filled and killed, promotion awaited
	phaseAfter         // the replica is the master
	numPhases
)

// timeline counts the purchase answers per second and product, and the
// units sold in each phase.
type timeline struct {
	start    time.Time
	products int
	quantity int64
	phase    atomic.Int32

	mu         sync.Mutex
	secs       [][][numTimelineCodes]int64 // [second][product]
	units      [][numPhases]int64          // [product]
	recovering []time.Duration             // [product]: some edge's flashgate_sale_recovering was 1
}

func newTimeline(start time.Time, products, quantity int) *timeline {
	return &timeline{start: start, products: products, quantity: int64(quantity),
		units: make([][numPhases]int64, products), recovering: make([]time.Duration, products)}
}

// add books one purchase answer (the generator's observe hook).
func (tl *timeline) add(product, status int, code string) {
	tl.addAt(time.Now(), product, status, code)
}

func (tl *timeline) addAt(now time.Time, product, status int, code string) {
	c := timelineCode(status, code)
	sec := max(0, int(now.Sub(tl.start)/time.Second))
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for len(tl.secs) <= sec {
		tl.secs = append(tl.secs, make([][numTimelineCodes]int64, tl.products))
	}
	tl.secs[sec][product][c]++
	if c == tlOK {
		tl.units[product][tl.phase.Load()] += tl.quantity
	}
}

// sampleRecovering reads every edge's flashgate_sale_recovering gauges each
// interval until ctx ends, and counts the time each product was closed for
// a rebuild on at least one edge.
func (tl *timeline) sampleRecovering(ctx context.Context, admins []string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		closed := map[string]bool{}
		for _, a := range admins {
			for p := range recoveringProducts(fetchURLTimeout("http://"+a+"/metrics", interval)) {
				closed[p] = true
			}
		}
		tl.mu.Lock()
		for i := range tl.products {
			if closed[productID(i)] {
				tl.recovering[i] += interval
			}
		}
		tl.mu.Unlock()
	}
}

// recoveringProducts are the products whose flashgate_sale_recovering
// gauge is 1 in an edge's /metrics text.
func recoveringProducts(metrics []byte) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(string(metrics), "\n") {
		rest, ok := strings.CutPrefix(line, "flashgate_sale_recovering{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil || v < 1 {
			continue
		}
		for _, l := range strings.Split(labels, ",") {
			if p, ok := strings.CutPrefix(l, `product="`); ok {
				out[strings.TrimSuffix(p, `"`)] = true
			}
		}
	}
	return out
}

// FailoverResult is what a failover run saw, in result.json and the report.
type FailoverResult struct {
	Product      string                   `json:"product"` // the hot product, whose master failed over
	Edges        int                      `json:"edges"`
	WaitReplicas int                      `json:"wait_replicas"` // redis.wait_replicas of the edges (0: not set)
	OldMaster    string                   `json:"old_master"`
	Replica      string                   `json:"replica"`
	NewMaster    string                   `json:"new_master"`
	StartedS     float64                  `json:"started_s"`  // since the load started: the replica frozen
	PromotedS    float64                  `json:"promoted_s"` // the replica promoted and the cluster settled
	Err          string                   `json:"error,omitempty"`
	Classes      [numTimelineCodes]string `json:"classes"` // the columns of each timeline second
	Timeline     []TimelineSecond         `json:"timeline"`
	Products     []FailoverProduct        `json:"products"`
	Totals       map[string]int64         `json:"totals"` // purchase answers by class over the run
}

// TimelineSecond is one second of purchase answers: all products, and the
// hot one alone.
type TimelineSecond struct {
	T     int                     `json:"t"` // seconds since the load started
	All   [numTimelineCodes]int64 `json:"all"`
	Hot   [numTimelineCodes]int64 `json:"hot"`
	Phase string                  `json:"phase"`
}

// FailoverProduct is one product's sale through the failover.
type FailoverProduct struct {
	Product     string  `json:"product"`
	Stock       int64   `json:"stock"`
	UnitsBefore int64   `json:"units_before"` // answered 200 before the failover began
	UnitsDuring int64   `json:"units_during"` // while it ran
	UnitsAfter  int64   `json:"units_after"`  // after the promotion
	ClosedS     int     `json:"closed_s"`     // seconds in which its purchases got nothing but 503s or no answer
	Recovering  int64   `json:"recovering"`   // its 503 RECOVERING answers
	RecoveringS float64 `json:"recovering_s"` // seconds some edge's flashgate_sale_recovering gauge was 1
}

func (tl *timeline) result(fo *FailoverResult, stockPer int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fo.Totals = map[string]int64{}
	fo.Classes = timelineNames
	phaseAt := func(sec int) string {
		t := float64(sec)
		switch {
		case fo.StartedS == 0 || t+1 <= fo.StartedS:
			return "before"
		case fo.PromotedS == 0 || t < fo.PromotedS:
			return "failover"
		}
		return "after"
	}
	for sec, perProduct := range tl.secs {
		ts := TimelineSecond{T: sec, Phase: phaseAt(sec)}
		for p, codes := range perProduct {
			for c, n := range codes {
				ts.All[c] += n
				if p == 0 {
					ts.Hot[c] += n
				}
			}
		}
		for c, n := range ts.All {
			fo.Totals[timelineNames[c]] += n
		}
		fo.Timeline = append(fo.Timeline, ts)
	}
	for p := range tl.products {
		fp := FailoverProduct{Product: productID(p), Stock: int64(stockPer),
			UnitsBefore: tl.units[p][phaseBefore], UnitsDuring: tl.units[p][phaseDuring], UnitsAfter: tl.units[p][phaseAfter],
			RecoveringS: tl.recovering[p].Seconds()}
		for _, perProduct := range tl.secs {
			c := perProduct[p]
			fp.Recovering += c[tlRecovering]
			if closedSecond(c) {
				fp.ClosedS++
			}
		}
		fo.Products = append(fo.Products, fp)
	}
}

// closedSecond: purchases were made and none got a verdict of the sale
// (sold, limit, sold out): all 503 or no answer.
func closedSecond(c [numTimelineCodes]int64) bool {
	var n int64
	for _, v := range c {
		n += v
	}
	return n > 0 && c[tlOK]+c[tlLimit]+c[tlSoldOut] == 0
}

// try runs f, turning the panic of a cluster kit method (outside a test it
// panics with an error) into an error.
func try(f func() string) (s string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return f(), nil
}

// runFailover is runScenario for a scenario with a failover: section.
func runFailover(ctx context.Context, root string, sc *Scenario, f runFlags, stderr io.Writer) (*Result, error) {
	switch {
	case f.target != "":
		return nil, errors.New("the failover scenario starts its own cluster and edges: leave -target out")
	case f.kafka != "bench":
		return nil, errors.New("the failover scenario's edges share one broker: -kafka bench (the default)")
	case f.pin || f.pprof:
		return nil, errors.New("-pin and -pprof are not for the failover scenario (several edges, a cluster)")
	}
	fo := sc.Failover
	dir, progress, cleanup, err := runDir(sc.Name, f.keep, f.quiet, stderr)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := need("the failover scenario", toolRedis, toolRedisCLI); err != nil {
		return nil, err
	}
	env := newEnv(EnvOptions{Root: root, Dir: dir, GoMaxProcs: f.gomaxprocs, InfraCPU: -1,
		Kafka: f.kafka, Consumer: f.consumer, ClickHouse: f.clickhouse, ProxyBin: f.proxyBin, ProxyRev: f.proxyRev, Quiet: progress})
	defer env.Close()
	res := &Result{Scenario: sc.Name, Description: sc.Description, Started: time.Now().UTC(), Config: sc,
		Machine: machineInfo(), GoVersion: runtime.Version(), Commit: proxyCommit(root, f.proxyRev),
		EdgeGoMaxProcs: f.gomaxprocs, Kafka: f.kafka, Consumer: f.consumer, ClickHouse: f.clickhouse,
		Failover: &FailoverResult{Product: productID(0), Edges: fo.Edges, WaitReplicas: f.waitReplicas}}
	t0 := time.Now()
	if err := env.build("./cmd/proxy", "./bench/origin"); err != nil {
		return nil, err
	}
	fmt.Fprintln(progress, "bench: starting a Redis Cluster (3 masters, 3 replicas), kafka, origin, edges")
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
	waitQuiet(progress, f.quietPct, f.quietWait)
	saleStart := time.Now().Add(-time.Second)
	if sc.SaleStart > 0 {
		saleStart = time.Now().Add(8*time.Second + sc.SaleStart)
	}
	spec := EdgeSpec{RedisAddr: strings.Join(cluster.Addrs(), ","), OriginAddr: env.OriginAddr, Extra: sc.Edge}
	for i := range sc.Products {
		spec.Products = append(spec.Products, Activity{ID: productID(i), Stock: sc.Stock, Limit: sc.Limit,
			Price: sc.Price, Start: saleStart, End: saleStart.Add(2 * time.Hour)})
	}

	// The order consumer runs in the first edge (or on its own with
	// -consumer separate): one order store, which reconcile reads.
	set, err := env.StartEdges(ctx, spec, fo.Edges, f.consumer == "separate", f.gomaxprocs)
	if err != nil {
		return nil, err
	}
	edges, addrs, admins, consumerConfig := set.Procs, set.Addrs, set.Admins, set.ConsumerConfig
	res.Target = fmt.Sprintf("%d edges started by bench on a Redis Cluster", fo.Edges)
	fmt.Fprintf(progress, "bench: %d edges %s (GOMAXPROCS=%d) ready after %.1fs; cluster %s; kafka %s\n",
		fo.Edges, strings.Join(addrs, " "), f.gomaxprocs, time.Since(t0).Seconds(), spec.RedisAddr, env.Brokers)

	users, err := newUsers(sc.Users, benchSessionSecret, benchTokenSecret)
	if err != nil {
		return nil, err
	}
	start := time.Now().Add(200 * time.Millisecond)
	if s := saleStart.Add(-sc.SaleStart); sc.SaleStart > 0 && s.After(start) {
		start = s
	}
	rec := newRecorder(start, callNames)
	tl := newTimeline(start, sc.Products, sc.Quantity)
	gen := newGenerator(sc, addrs, users, rec)
	gen.observe = tl.add

	var watches []*ProcWatch
	for _, p := range append(edges, env.Kafka, env.Orders, env.Origin) {
		if p != nil {
			pid := p.Pid()
			watches = append(watches, watchProc(p.Name, func() []int { return []int{pid} }))
		}
	}
	self := os.Getpid()
	watches = append(watches, watchProc("bench (load generator)", func() []int { return []int{self} }))
	mb0, mt0 := machineTicks()

	planned := int64(0)
	if sc.Mode == "open" {
		planned = NewPacer(sc.Rate, sc.Burst, sc.Duration, sc.Tick).All()
	}
	fmt.Fprintf(progress, "bench: %s: %s; p1's master fails over at %v\n", sc.Name, describeLoad(sc), fo.At)
	pctx, stopProgress := context.WithCancel(ctx)
	go gen.progress(pctx, progress, start, planned)
	go tl.sampleRecovering(pctx, admins, 250*time.Millisecond)
	for _, w := range watches {
		w.Reset()
	}
	failedOver := make(chan struct{})
	go func() {
		defer close(failedOver)
		failover(pctx, cluster, tl, res.Failover, start, fo, progress)
	}()
	gen.Run(ctx, start)
	<-failedOver
	stopProgress()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	for _, w := range watches {
		res.Processes = append(res.Processes, w.Stat())
	}
	if mb1, mt1 := machineTicks(); mt1 > mt0 {
		res.MachineBusyPct = 100 * float64(mb1-mb0) / float64(mt1-mt0) * float64(runtime.NumCPU())
	}
	recordLoad(res, rec, gen, users, sc, start, time.Now())
	tl.result(res.Failover, sc.Stock)

	fmt.Fprintln(progress, "bench: proxy reconcile (waits for the order pipeline to drain)")
	res.Reconcile = proxyReconcile(ctx, env.bins["proxy"], consumerConfig)
	res.Notes = append(res.Notes, exitNotes(edges...)...)
	env.Close()

	out := outDir(root, f, sc, res.Started)
	if err := res.write(out); err != nil {
		return nil, err
	}
	res.OutDir = out
	return res, nil
}

// failover waits until fo.At after start, then fails p1's master over onto
// its lagging replica and records when and onto what.
func failover(ctx context.Context, cluster *redistest.Cluster, tl *timeline, r *FailoverResult, start time.Time, fo *Failover, progress io.Writer) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(start.Add(fo.At))):
	}
	key := stock.StockKey(r.Product)
	var err error
	if r.OldMaster, err = try(func() string { return cluster.MasterOf(key) }); err == nil {
		r.Replica, err = try(func() string { return cluster.ReplicaOf(r.OldMaster) })
	}
	if err != nil {
		r.Err = err.Error()
		fmt.Fprintf(progress, "bench: failover not started: %v\n", err)
		return
	}
	tl.phase.Store(phaseDuring)
	r.StartedS = time.Since(start).Seconds()
	fmt.Fprintf(progress, "bench: failover: %s's master %s, replica %s frozen, filling the master, then kill -9\n", r.Product, r.OldMaster, r.Replica)
	r.NewMaster, err = try(func() string { return cluster.LagFailover(key, fo.Timeout) })
	r.PromotedS = time.Since(start).Seconds()
	tl.phase.Store(phaseAfter)
	if err != nil {
		r.Err = err.Error()
		fmt.Fprintf(progress, "bench: failover failed: %v\n", err)
		return
	}
	fmt.Fprintf(progress, "bench: failover: %s promoted after %.1fs\n", r.NewMaster, r.PromotedS-r.StartedS)
}

// proxyReconcile runs `proxy reconcile -c config` (the config of the edge
// holding the order store) and reads its verdict.
func proxyReconcile(ctx context.Context, bin, config string) Reconciled {
	rec := Reconciled{Ran: true}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, "reconcile", "-c", config).CombinedOutput()
	rec.Text = string(out)
	m := reconcileLine.FindStringSubmatch(rec.Text)
	if m == nil {
		rec.Err = fmt.Sprintf("proxy reconcile: %v, and no RECONCILE line", err)
		return rec
	}
	rec.Products, _ = strconv.Atoi(m[1])
	rec.Oversold, _ = strconv.ParseInt(m[2], 10, 64)
	rec.Lost, _ = strconv.ParseInt(m[3], 10, 64)
	rec.Duplicated, _ = strconv.ParseInt(m[4], 10, 64)
	rec.Clean = err == nil && rec.Oversold == 0 && rec.Lost == 0 && rec.Duplicated == 0
	if err != nil {
		rec.Err = "proxy reconcile: " + err.Error() + " (a mismatch)"
	}
	return rec
}
