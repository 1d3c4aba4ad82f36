package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/internal/redistest"
)

// The nemesis scenario (`bench run -s nemesis -schedules N -seed S`): per
// schedule a fresh fleet — a 3+3 Redis Cluster, three kfake brokers in
// one child process, ClickHouse, three real edges (the order consumer in
// two of them) — a sale mix running through it, and faults drawn at
// random from the schedule's seed (nemesis_faults.go). The shoppers'
// every call goes into a history (nemesis_load.go); after the load and
// a drain an independent checker (checker.go) decides from the history,
// the orders table, the topic and Redis whether any promise broke, and
// `proxy reconcile` must agree with it. Schedule i runs seed S+i, so
// `-seed S+i -schedules 1` replays it: the same faults, at the same
// times, on the same targets.

// Nemesis is the nemesis scenario's section.
type Nemesis struct {
	Schedules int           `yaml:"schedules"` // schedules a run plays (-schedules)
	Seed      int64         `yaml:"seed"`      // the first schedule's seed (-seed)
	Duration  time.Duration `yaml:"duration"`  // each schedule's load (-duration); faults heal before its last 10 s
	Edges     int           `yaml:"edges"`     // cmd/proxy edges (default 3)
	Consumers int           `yaml:"consumers"` // of them with the order consumer (default 2)
	Brokers   int           `yaml:"brokers"`   // kfake brokers (default 3)
	Shoppers  int           `yaml:"shoppers"`  // shoppers at a time (default 24)
	Faults    int           `yaml:"faults"`    // faults drawn per schedule (default 4; some may not fit)
	Kinds     []string      `yaml:"kinds"`     // the kinds drawn (default all)
	Drain     time.Duration `yaml:"drain"`     // after the load, at most this long for the pipeline to settle (default 60s)
	// PayTimeout is orders.pay_timeout of every sale but the one with 3 s.
	PayTimeout time.Duration `yaml:"pay_timeout"`
	// AdmitPerMinute is the waiting room's rate (p4).
	AdmitPerMinute int `yaml:"admit_per_minute"`
}

func (sc *Scenario) validateNemesis(errs *field.Errors) {
	n := sc.Nemesis
	if n == nil {
		return
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&n.Schedules, 1)
	def(&n.Edges, 3)
	def(&n.Consumers, 2)
	def(&n.Brokers, 3)
	def(&n.Shoppers, 24)
	def(&n.Faults, 4)
	def(&n.AdmitPerMinute, 600)
	if n.Duration == 0 {
		n.Duration = 40 * time.Second
	}
	if n.Drain == 0 {
		n.Drain = time.Minute
	}
	if n.PayTimeout == 0 {
		n.PayTimeout = 10 * time.Second
	}
	if n.Schedules < 1 || n.Schedules > 1000 {
		errs.Add("nemesis.schedules", "must be 1..1000")
	}
	if n.Duration < 20*time.Second || n.Duration > 10*time.Minute {
		errs.Add("nemesis.duration", "must be 20s..10m (faults heal before the last 10 s)")
	}
	if n.Edges < 1 || n.Edges > 4 || n.Consumers < 1 || n.Consumers > n.Edges {
		errs.Add("nemesis.edges", "1..4 edges, 1..edges of them consumers")
	}
	if n.Brokers < 1 || n.Brokers > 5 {
		errs.Add("nemesis.brokers", "must be 1..5")
	}
	if n.Shoppers < 1 || n.Shoppers > 500 {
		errs.Add("nemesis.shoppers", "must be 1..500")
	}
	if n.Faults < 0 || n.Faults > 50 {
		errs.Add("nemesis.faults", "must be 0..50")
	}
	for i, k := range n.Kinds {
		known := false
		for _, fk := range faultKinds {
			known = known || fk.kind == k
		}
		if !known {
			errs.Add(fmt.Sprintf("nemesis.kinds[%d]", i), "unknown fault kind %q", k)
		}
	}
	if sc.Products != 5 {
		errs.Add("products", "the nemesis mix is 5 sales (p4 behind the waiting room, p5 with a 3 s pay timeout)")
	}
}

// chShards is the shards of `-clickhouse cluster`.
const chShards = 2

// nemesisProducts is the sale mix: p1, p2 plain, p3 small (it sells out),
// p4 behind the waiting room, p5 with pay_timeout 3s.
func nemesisProducts(sc *Scenario) []ProductSpec {
	var out []ProductSpec
	for i := range sc.Products {
		p := ProductSpec{ID: productID(i), Stock: int64(sc.Stock), Limit: int64(sc.Limit), OpenMs: -1000,
			PayTimeoutMs: sc.Nemesis.PayTimeout.Milliseconds()}
		switch i {
		case 2:
			p.Stock = max(1, p.Stock/4)
		case 3:
			p.Room, p.AdmitPerMinute = true, sc.Nemesis.AdmitPerMinute
		case 4:
			p.PayTimeoutMs = 3000
		}
		out = append(out, p)
	}
	return out
}

// ScheduleResult is one schedule played and checked.
type ScheduleResult struct {
	Seed      int64        `json:"seed"`
	Planned   []string     `json:"planned"`
	Faults    []FaultEvent `json:"faults"`
	Verdict   *Verdict     `json:"verdict"`
	Reconcile Reconciled   `json:"reconcile"`
	Ops       int          `json:"ops"`
	Err       string       `json:"error,omitempty"`
	Notes     []string     `json:"notes,omitempty"`
	Seconds   float64      `json:"seconds"`
	history   *History     // for the report around a violation
}

// NemesisResult is a whole run.
type NemesisResult struct {
	Scenario  string           `json:"scenario"`
	Started   time.Time        `json:"started"`
	Commit    string           `json:"commit"`
	Machine   string           `json:"machine"`
	Schedules []ScheduleResult `json:"schedules"`
	OutDir    string           `json:"-"`
}

// cmdNemesis runs the nemesis scenario and prints its verdicts.
func cmdNemesis(ctx context.Context, root string, sc *Scenario, f runFlags, stdout, stderr io.Writer) int {
	n := sc.Nemesis
	if f.schedules > 0 {
		n.Schedules = f.schedules
	}
	if f.seedSet {
		n.Seed = f.seed
	}
	if f.duration > 0 {
		if f.duration < 20*time.Second {
			fmt.Fprintln(stderr, "bench run: -duration: at least 20s (faults heal before the last 10 s)")
			return 2
		}
		n.Duration = f.duration
	}
	if f.kinds != "" {
		n.Kinds = strings.Split(f.kinds, ",")
		var errs field.Errors
		sc.validateNemesis(&errs)
		if len(errs) > 0 {
			fmt.Fprintln(stderr, "bench run: -kinds:", errs)
			return 2
		}
	}
	var seeds []int64
	for i := range n.Schedules {
		seeds = append(seeds, n.Seed+int64(i))
	}
	if f.seeds != "" {
		seeds = nil
		for _, x := range strings.Split(f.seeds, ",") {
			v, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
			if err != nil {
				fmt.Fprintf(stderr, "bench run: -seeds %q: %v\n", f.seeds, err)
				return 2
			}
			seeds = append(seeds, v)
		}
	}
	if f.plan {
		for _, seed := range seeds {
			fmt.Fprintf(stdout, "seed %d:", seed)
			for _, p := range drawFaults(seed, n.Faults, n.Duration, n.Edges, n.Consumers, sc.Products, n.Brokers, n.Kinds) {
				fmt.Fprintf(stdout, "  [%s]", strings.Join(strings.Fields(p.String()), " "))
			}
			fmt.Fprintln(stdout)
		}
		return 0
	}
	if f.target != "" || f.pin || f.pprof || f.kafka != "bench" {
		fmt.Fprintln(stderr, "bench run: the nemesis starts its own fleet: no -target, -pin, -pprof or -kafka edge")
		return 2
	}
	dir, progress, bins, cleanup, ok := fleetRunDir(root, "the nemesis scenario", sc, f, stderr)
	if !ok {
		return 1
	}
	defer cleanup()
	res := &NemesisResult{Scenario: sc.Name, Started: time.Now().UTC(), Commit: proxyCommit(root, f.proxyRev), Machine: machineInfo()}
	out := outDir(root, f, sc, res.Started)
	for _, seed := range seeds {
		t0 := time.Now()
		sr := runSchedule(ctx, sc, f, bins, filepath.Join(dir, fmt.Sprintf("s%d", seed)), seed, progress)
		sr.Seconds = time.Since(t0).Seconds()
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "bench: interrupted")
			return 130
		}
		printSchedule(stdout, &sr)
		if sr.history != nil && (len(sr.Verdict.Violations) > 0 || f.keep) {
			// A violation's history stays: `bench check` reads it again.
			path := filepath.Join(out, fmt.Sprintf("history-%d.json", seed))
			if err := os.MkdirAll(out, 0o755); err == nil && writeHistory(path, sr.history) == nil {
				fmt.Fprintf(stdout, "  history: %s\n", path)
			}
		}
		sr.history = nil
		res.Schedules = append(res.Schedules, sr)
	}
	if err := writeNemesis(out, res); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
	}
	s := summarizeNemesis(res.Schedules)
	printNemesisTable(stdout, s)
	fmt.Fprintln(stdout, s.resultLine())
	if s.Violations > 0 || s.Errors > 0 {
		return 1
	}
	return 0
}

// fleetRunDir starts a nemesis or soak run: the tools checked, the run
// directory made, the edge and the origin built. Not ok: the error is
// printed (exit status 1).
func fleetRunDir(root, what string, sc *Scenario, f runFlags, stderr io.Writer) (dir string, progress io.Writer, bins map[string]string, cleanup func(), ok bool) {
	if err := need(what, toolRedis, toolRedisCLI, toolClickHouse); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return "", nil, nil, nil, false
	}
	dir, progress, cleanup, err := runDir(sc.Name, f.keep, f.quiet, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return "", nil, nil, nil, false
	}
	b := newEnv(EnvOptions{Root: root, Dir: dir, ProxyBin: f.proxyBin, ProxyRev: f.proxyRev, Quiet: progress})
	if err := b.build("./cmd/proxy", "./bench/origin"); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		cleanup()
		return "", nil, nil, nil, false
	}
	return dir, progress, b.bins, cleanup, true
}

// runSchedule plays one schedule on a fresh fleet and checks it.
func runSchedule(ctx context.Context, sc *Scenario, f runFlags, bins map[string]string, dir string, seed int64, progress io.Writer) (sr ScheduleResult) {
	n := sc.Nemesis
	sr.Seed = seed
	logf := func(format string, args ...any) {
		fmt.Fprintf(progress, "bench: [seed %d] "+format+"\n", append([]any{seed}, args...)...)
	}
	fail := func(err error) ScheduleResult {
		sr.Err = err.Error()
		logf("schedule failed: %v", err)
		return sr
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	products := nemesisProducts(sc)
	plan := drawFaults(seed, n.Faults, n.Duration, n.Edges, n.Consumers, len(products), n.Brokers, n.Kinds)
	for _, p := range plan {
		sr.Planned = append(sr.Planned, p.String())
	}
	logf("faults drawn: %s", strings.Join(sr.Planned, "; "))

	fl, err := startNemFleet(ctx, sc, f, bins, dir, progress, plan, 2*time.Minute)
	if fl != nil {
		defer fl.close()
	}
	if err != nil {
		return fail(err)
	}
	env, cluster, set, users, links := fl.env, fl.cluster, fl.set, fl.users, fl.links
	products = fl.products
	start := time.Now().Add(200 * time.Millisecond)
	for i := range products {
		products[i].OpenMs = fl.saleStart.Sub(start).Milliseconds()
	}
	load := newNemLoad(start, set.Addrs, set.Admins, users, products)
	nem := &nemesis{env: env, cluster: cluster, set: set, gomaxproc: f.gomaxprocs, start: start, edgeDown: make([]bool, n.Edges), edgeMu: make([]sync.Mutex, n.Edges), links: links,
		log: func(format string, args ...any) { logf(format, args...) }}
	chName := "ClickHouse"
	if f.chCluster {
		chName = fmt.Sprintf("a %d-shard ClickHouse cluster", chShards)
	}
	logf("fleet ready: %d edges (%d with the consumer), Redis Cluster 3+3, %d brokers, %s; load %v, %d shoppers", n.Edges, n.Consumers, n.Brokers, chName, n.Duration, n.Shoppers)

	lctx, stopLoad := context.WithDeadline(ctx, start.Add(n.Duration))
	defer stopLoad()
	var wg sync.WaitGroup
	for i := range n.Shoppers {
		s := &shopper{l: load, id: i, edge: i % n.Edges, rnd: rand.New(rand.NewPCG(uint64(seed), uint64(i)+1)), tickets: map[int]roomPass{}}
		for j := range 6 {
			s.users = append(s.users, i*6+j)
		}
		wg.Go(func() {
			pause(lctx, time.Until(start))
			s.run(lctx)
		})
	}
	sr.Faults = nem.run(ctx, plan)
	wg.Wait()
	loadEnd := time.Since(start).Milliseconds()
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	for _, fe := range sr.Faults {
		if fe.Err != "" {
			sr.Notes = append(sr.Notes, fmt.Sprintf("fault %s %s: %s", fe.Kind, fe.Target, firstLines(fe.Err, 2)))
		}
	}

	// Drain: every unpaid order's deadline passes, the unknown outcomes
	// settle, the pipeline stores what it took.
	logf("load over after %.1fs, %d ops; draining (at most %v)", float64(loadEnd)/1000, len(load.History()), n.Drain)
	settleUntil := time.Now().Add(n.PayTimeout + 2*time.Second)
	var stalled []string
	if err := awaitQuiet(ctx, set.Admins, n.Drain); err != nil {
		// Orders acknowledged to shoppers not stored a whole drain after
		// the load: a stall of its own. Wait once more, so that what the
		// checker then calls lost is lost and not late.
		stalled = append(stalled, err.Error())
		logf("%v; waiting once more", err)
		if err := awaitQuiet(ctx, set.Admins, n.Drain); err != nil {
			sr.Notes = append(sr.Notes, "and again: "+err.Error())
		}
	}
	pause(ctx, time.Until(settleUntil))
	load.resolve(ctx, nem.alive)

	h := &History{Seed: seed, Edges: n.Edges, Products: products, Faults: sr.Faults, LoadEndMs: loadEnd, Stalled: stalled}
	h.Ops = load.History()
	readFacts(ctx, h, env, cluster.MasterOf, products)
	sr.Verdict = Check(h)
	sr.Faults = h.Faults // with their reopen times
	sr.Ops = len(h.Ops)
	logf("proxy reconcile")
	sr.Reconcile = proxyReconcile(ctx, env.bins["proxy"], set.ConsumerConfig)
	CompareReconcile(sr.Verdict, sr.Reconcile, time.Since(start).Milliseconds())
	sr.history = h
	for _, p := range set.Procs {
		if ok, err := p.Exited(); ok {
			sr.Notes = append(sr.Notes, fmt.Sprintf("%s exited (%v): %s", p.Name, err, firstLines(p.Tail(), 3)))
		}
	}
	env.Close()
	return sr
}

// nemFleet is a nemesis fleet, started: the Redis Cluster, the brokers,
// ClickHouse, the origin and the edges, the sale mix and its shoppers'
// user ids.
type nemFleet struct {
	env      *Env
	cluster  *redistest.Cluster
	set      *EdgeSet
	users    *Users
	products []ProductSpec
	links    map[int][]*DelayProxy
	proxies  []*DelayProxy
	// saleStart is when every sale opened (a second before the edges
	// started).
	saleStart time.Time
}

func (fl *nemFleet) close() {
	for _, d := range fl.proxies {
		d.Close()
	}
	if fl.env != nil {
		fl.env.Close()
	}
	if fl.cluster != nil {
		fl.cluster.Close()
	}
}

// startNemFleet starts a fleet for sc's nemesis section in dir (the
// nemesis' schedules and the soak): the edges targeted by the plan's link
// faults reach Redis through delay proxies of their own. roomSession is
// the waiting room's session (an admitted shopper's turn). On an error
// the fleet so far is returned too, for close.
func startNemFleet(ctx context.Context, sc *Scenario, f runFlags, bins map[string]string, dir string, progress io.Writer, plan []plannedFault, roomSession time.Duration) (*nemFleet, error) {
	n := sc.Nemesis
	fl := &nemFleet{products: nemesisProducts(sc)}
	products := fl.products
	var err error
	env := newEnv(EnvOptions{Root: "", Dir: dir, GoMaxProcs: f.gomaxprocs, InfraCPU: -1, Kafka: "bench", Consumer: "edge", ClickHouse: true, Quiet: progress})
	for k, v := range bins {
		env.bins[k] = v
	}
	fl.env = env
	redistest.Binary, redistest.CLIBinary = toolPath(toolRedis), toolPath(toolRedisCLI)
	cluster, err := redistest.LaunchCluster(filepath.Join(dir, "redis-cluster"))
	if err != nil {
		return fl, err
	}
	fl.cluster = cluster
	// The brokers' ports are picked free and bound by the child a moment
	// later: another process may take one in between. Try again then.
	var kerr error
	for range 3 {
		if kerr = env.StartKafkaCluster(ctx, n.Brokers); kerr == nil {
			break
		}
		if env.Kafka != nil {
			env.Kafka.Stop(time.Second)
		}
	}
	if kerr != nil {
		return fl, kerr
	}
	if f.chCluster {
		err = env.StartClickHouseCluster(chShards)
	} else {
		err = env.StartClickHouse()
	}
	if err != nil {
		return fl, err
	}
	if err := env.StartOrigin(ctx); err != nil {
		return fl, err
	}
	saleStart := time.Now().Add(-time.Second)
	spec := EdgeSpec{RedisAddr: strings.Join(cluster.Addrs(), ","), OriginAddr: env.OriginAddr, Extra: map[string]any{
		"payments": map[string]any{"webhook_secret": nemesisWebhookSecret},
		"orders":   map[string]any{"pay_timeout": n.PayTimeout.String()},
	}}
	for k, v := range sc.Edge {
		spec.Extra[k] = v
	}
	for _, p := range products {
		a := Activity{ID: p.ID, Stock: int(p.Stock), Limit: int(p.Limit), Price: sc.Price, Start: saleStart, End: saleStart.Add(2 * time.Hour)}
		if p.PayTimeoutMs == 3000 {
			a.PayTimeout = 3 * time.Second
		}
		if p.Room {
			a.WaitingRoom = map[string]any{"enabled": true, "prequeue_opens": "1m", "admit_per_minute": p.AdmitPerMinute,
				"max_active": 0, "session": roomSession.String(), "order": "fifo", "challenge": map[string]any{"difficulty": 0}}
		}
		spec.Products = append(spec.Products, a)
	}
	// An edge whose Redis link a fault slows or cuts reaches every node
	// through a delay proxy of its own from the start (the test-only
	// -test-redis-dial: the cluster client dials the nodes' announced
	// addresses, which a proxy in front of the seeds would not see).
	links := map[int][]*DelayProxy{}
	for _, p := range plan {
		if (p.Kind != fLinkSlow && p.Kind != fLinkCut) || links[p.Target] != nil {
			continue
		}
		var pairs []string
		for _, a := range cluster.Addrs() {
			d, err := startDelayProxy(fmt.Sprintf("edge%d-redis-%s", p.Target+1, a), a, Fault{})
			if err != nil {
				return fl, err
			}
			fl.proxies = append(fl.proxies, d)
			links[p.Target] = append(links[p.Target], d)
			pairs = append(pairs, a+"="+d.Addr())
		}
		for len(spec.EdgeArgs) <= p.Target {
			spec.EdgeArgs = append(spec.EdgeArgs, nil)
		}
		spec.EdgeArgs[p.Target] = []string{"-test-redis-dial", strings.Join(pairs, ",")}
	}
	set, err := env.StartEdgesWith(ctx, spec, n.Edges, n.Consumers, false, f.gomaxprocs)
	if err != nil {
		return fl, err
	}
	fl.set, fl.saleStart = set, saleStart
	fl.users, err = newUsers(n.Shoppers*6, benchSessionSecret, benchTokenSecret)
	if err != nil {
		return fl, err
	}
	fl.links = links
	return fl, nil
}

// awaitQuiet waits until every edge has no unknown outcome left to
// settle, nothing in the outbox and no consumer lag (its gauges, sampled
// every 2 s: twice in a row), at most within. The checker does not trust
// these: they only say when to look.
func awaitQuiet(ctx context.Context, admins []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	quiet := 0
	var last string
	for quiet < 2 {
		busy := ""
		for _, a := range admins {
			m := metricsText(a)
			if m == "" {
				busy = a + " does not answer /metrics"
				break
			}
			for _, name := range []string{"flashgate_sale_unknown_pending", "flashgate_outbox_pending", "flashgate_orders_consumer_lag"} {
				// An edge without the consumer has no lag gauge.
				if v, ok := metricValue(m, name); ok && v != 0 {
					busy = fmt.Sprintf("%s %s=%v", a, name, v)
				}
			}
		}
		if busy == "" {
			quiet++
		} else {
			quiet, last = 0, busy
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pipeline did not settle within %v (%s)", within, last)
		}
		if !pause(ctx, 2100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

func metricsText(admin string) string {
	return string(fetchURLTimeout("http://"+admin+"/metrics", 3*time.Second))
}

// metricValue sums the samples of one metric in a /metrics text.
func metricValue(text, name string) (float64, bool) {
	var sum float64
	found := false
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[i+1:]), 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// readFacts fills the checker's facts from outside; what cannot be read
// is a violation of its own (ReadErrs).
func readFacts(ctx context.Context, h *History, env *Env, masterOf func(string) string, products []ProductSpec) {
	var err error
	db := conf.Defaults().ClickHouse.Database
	if h.Stored, h.StoredRows, err = readStored(env.chHTTP(), db); err != nil {
		h.ReadErrs = append(h.ReadErrs, "seckill_order: "+err.Error())
	}
	k := conf.Defaults().Kafka
	brokers := strings.Split(env.Brokers, ",")
	if h.Events, err = readTopic(ctx, brokers, k.Topic, 3*time.Second); err != nil {
		h.ReadErrs = append(h.ReadErrs, "topic "+k.Topic+": "+err.Error())
	}
	if dead, err := readTopic(ctx, brokers, k.DLQTopic, 1500*time.Millisecond); err != nil {
		h.ReadErrs = append(h.ReadErrs, "topic "+k.DLQTopic+": "+err.Error())
	} else if len(dead) > 0 {
		h.ReadErrs = append(h.ReadErrs, fmt.Sprintf("%d events in the dead-letter topic %s", len(dead), k.DLQTopic))
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				h.ReadErrs = append(h.ReadErrs, fmt.Sprintf("redis: %v", r))
			}
		}()
		if h.Redis, err = readRedisSales(masterOf, products); err != nil {
			h.ReadErrs = append(h.ReadErrs, "redis: "+err.Error())
		}
	}()
}

func writeHistory(path string, h *History) error {
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func writeNemesis(dir string, r *NemesisResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.OutDir = dir
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644)
}

// printSchedule prints one schedule's verdict; a violation comes with
// the seed, the fault timeline and the operations around it.
func printSchedule(w io.Writer, sr *ScheduleResult) {
	v := sr.Verdict
	if v == nil {
		fmt.Fprintf(w, "schedule seed=%d ERROR %s\n", sr.Seed, sr.Err)
		return
	}
	fmt.Fprintf(w, "schedule seed=%d faults=%d ops=%d violations=%d final_reopen_ms=%d reconcile_clean=%v (%.0fs)\n",
		sr.Seed, len(sr.Faults), sr.Ops, len(v.Violations), v.FinalReopenMs, sr.Reconcile.Clean, sr.Seconds)
	for _, n := range sr.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if len(v.Violations) == 0 {
		return
	}
	fmt.Fprintf(w, "  VIOLATIONS of seed %d (replay: go run ./bench run -s nemesis -seed %d -schedules 1):\n", sr.Seed, sr.Seed)
	fmt.Fprintln(w, "  fault timeline:")
	for _, f := range sr.Faults {
		fmt.Fprintf(w, "    %6.1fs … %6.1fs  %-15s %s %s %s\n", float64(f.AtMs)/1000, float64(f.HealMs)/1000, f.Kind, f.Target, f.Note, f.Err)
	}
	shown := map[string]int{}
	for _, x := range v.Violations {
		fmt.Fprintf(w, "  %-22s at %6.1fs %s %s %s: %s\n", x.Kind, float64(x.AtMs)/1000, x.Product, x.User, x.OrderID, x.Detail)
		if shown[x.Kind]++; shown[x.Kind] > 2 || sr.history == nil {
			continue
		}
		for _, op := range around(sr.history.Ops, x, 12) {
			fmt.Fprintf(w, "      op %5d %6.2fs–%6.2fs edge%d %-8s %s %s %s → %d %s %s %s\n", op.ID, float64(op.StartMs)/1000, float64(op.EndMs)/1000,
				op.Edge, op.Kind, op.Product, op.User, op.OrderID, op.Status, op.Code, op.State, op.Err)
		}
	}
}

// around picks the operations a violation is about: those of its order,
// else of its shopper and product, else all, nearest its time first.
func around(ops []Op, x Violation, n int) []Op {
	var pick []Op
	for _, op := range ops {
		switch {
		case x.OrderID != "" && op.OrderID == x.OrderID,
			x.OrderID == "" && x.User != "" && op.User == x.User && op.Product == x.Product,
			x.OrderID == "" && x.User == "" && op.Kind == opDo && (x.Product == "" || op.Product == x.Product) && abs64(op.StartMs-x.AtMs) < 4000:
			pick = append(pick, op)
		}
	}
	if len(pick) > n {
		sort.SliceStable(pick, func(i, j int) bool { return abs64(pick[i].StartMs-x.AtMs) < abs64(pick[j].StartMs-x.AtMs) })
		pick = pick[:n]
		sort.SliceStable(pick, func(i, j int) bool { return pick[i].StartMs < pick[j].StartMs })
	}
	return pick
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// nemesisSummary is the run's table and RESULT line.
type nemesisSummary struct {
	Schedules, Faults, Violations, Errors int
	Oversold, Lost, Duplicated            int64
	Reopen                                []int64
	ByKind                                map[string]int64 // faults drawn by kind
	ByViolation                           map[string]int64
	Answers                               map[string]int64
}

func summarizeNemesis(list []ScheduleResult) nemesisSummary {
	s := nemesisSummary{ByKind: map[string]int64{}, ByViolation: map[string]int64{}, Answers: map[string]int64{}}
	for _, sr := range list {
		s.Schedules++
		if sr.Verdict == nil {
			s.Errors++
			continue
		}
		for _, f := range sr.Faults {
			s.Faults++
			s.ByKind[f.Kind]++
		}
		v := sr.Verdict
		s.Violations += len(v.Violations)
		for _, x := range v.Violations {
			s.ByViolation[x.Kind]++
		}
		s.Oversold += v.Oversold
		s.Lost += v.Lost
		s.Duplicated += v.Duplicated
		s.Reopen = append(s.Reopen, v.ReopenMs...)
		for k, c := range v.Answers {
			if strings.HasPrefix(k, opDo+" ") || strings.HasPrefix(k, opPay+" ") || strings.HasPrefix(k, opWebhook+" ") {
				s.Answers[k] += c
			}
		}
	}
	sort.Slice(s.Reopen, func(i, j int) bool { return s.Reopen[i] < s.Reopen[j] })
	return s
}

func (s nemesisSummary) resultLine() string {
	return fmt.Sprintf("RESULT scenario=nemesis schedules=%d faults=%d violations=%d reopen_p99_ms=%d oversold=%d lost=%d duplicated=%d",
		s.Schedules, s.Faults, s.Violations+s.Errors, quantile(s.Reopen, 0.99), s.Oversold, s.Lost, s.Duplicated)
}

func printNemesisTable(w io.Writer, s nemesisSummary) {
	fmt.Fprintf(w, "\nnemesis: %d schedules (%d failed to run), %d faults, %d violations\n", s.Schedules, s.Errors, s.Faults, s.Violations)
	fmt.Fprintln(w, "faults drawn:")
	for _, k := range sortedKeys(s.ByKind) {
		fmt.Fprintf(w, "  %-16s %d\n", k, s.ByKind[k])
	}
	if len(s.ByViolation) > 0 {
		fmt.Fprintln(w, "violations:")
		for _, k := range sortedKeys(s.ByViolation) {
			fmt.Fprintf(w, "  %-22s %d\n", k, s.ByViolation[k])
		}
	}
	fmt.Fprintf(w, "reopen after a healed fault (ms): n=%d p50=%d p99=%d max=%d\n", len(s.Reopen), quantile(s.Reopen, 0.5), quantile(s.Reopen, 0.99), quantile(s.Reopen, 1))
	fmt.Fprintln(w, "answers by code (do, pay, webhook):")
	for _, k := range sortedKeys(s.Answers) {
		fmt.Fprintf(w, "  %-32s %d\n", k, s.Answers[k])
	}
}
