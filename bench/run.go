package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"flashgate/internal/yamlmerge"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// chFlag is -clickhouse: a bool flag that also takes "cluster".
type chFlag struct{ on, cluster *bool }

func (c *chFlag) IsBoolFlag() bool { return true }
func (c *chFlag) String() string {
	if c.on == nil || !*c.on {
		return "false"
	}
	if *c.cluster {
		return "cluster"
	}
	return "true"
}
func (c *chFlag) Set(v string) error {
	if v == "cluster" {
		*c.on, *c.cluster = true, true
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want true, false or cluster")
	}
	*c.on, *c.cluster = b, false
	return nil
}

// runFlags are the flags of `bench run`.
type runFlags struct {
	scenario   string
	sets       stringList
	out        string
	gomaxprocs int
	pin        bool
	kafka      string
	clickhouse bool
	// chCluster: -clickhouse cluster, a 2-shard ClickHouse cluster (the
	// nemesis scenario).
	chCluster bool
	consumer  string
	target    string
	admin     string
	proxyBin  string
	proxyRev  string
	keep      bool
	quiet     bool
	pprof     bool
	quietPct  int
	quietWait time.Duration
	// waitReplicas > 0 sets redis.wait_replicas in the edges' config.
	waitReplicas int
	// edges lists the fleet scenario's points ("1,2,3"), over fleet.edges.
	edges string
	// quick applies the scenario's quick: overrides (a short run).
	quick bool
	// The nemesis scenario: schedules to play, the first one's seed (set
	// or not), each schedule's load, the fault kinds drawn.
	schedules int
	seed      int64
	seedSet   bool
	duration  time.Duration
	kinds     string
	plan      bool
	seeds     string // a list of seeds instead of -seed/-schedules
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	fs.StringVar(&f.scenario, "s", "", "scenario: a name in bench/scenarios (normal, burst, oversell, fault, failover, fleet) or a YAML path")
	fs.Var(&f.sets, "set", "override a scenario key, e.g. -set rate=500 -set faults.redis.latency=2ms (repeatable)")
	fs.StringVar(&f.out, "out", "", "directory for result.json and report.html (default bench/results/SCENARIO-TIME)")
	fs.IntVar(&f.gomaxprocs, "gomaxprocs", 1, "GOMAXPROCS of the edge (0: Go's default)")
	fs.BoolVar(&f.pin, "pin", false, "pin the edge to CPU 1 and Redis, Kafka, the origin and bench to CPU 0 (taskset)")
	fs.StringVar(&f.kafka, "kafka", "bench", `"bench": kfake in a process bench starts; "edge": the edge's embedded kfake (kafka.brokers empty)`)
	fs.Var(&chFlag{&f.clickhouse, &f.chCluster}, "clickhouse", "store orders in a clickhouse-server bench starts (Debian clickhouse-server) instead of the edge's embedded store; `-clickhouse cluster` (nemesis): a 2-shard cluster with ZooKeeper")
	fs.StringVar(&f.consumer, "consumer", "edge", `"edge": the order consumer runs inside the edge; "separate": in a second cmd/proxy bench starts (keeps its CPU off the edge)`)
	fs.StringVar(&f.target, "target", "", "load an edge that is already running (host:port) instead of starting one; the scenario's sale must exist there")
	fs.StringVar(&f.admin, "admin", "", "with -target: its admin listener, for reconcile and metrics")
	fs.StringVar(&f.proxyBin, "proxy-bin", "", "a prebuilt cmd/proxy binary instead of building the working tree")
	fs.StringVar(&f.proxyRev, "proxy-rev", "", "build cmd/proxy from this git revision (e.g. HEAD) instead of the working tree")
	fs.BoolVar(&f.keep, "keep", false, "keep the run directory (configs, logs, data)")
	fs.BoolVar(&f.quiet, "q", false, "no progress line")
	fs.BoolVar(&f.pprof, "pprof", false, "run the edge with -pprof and save a CPU profile of the load (cpu.pprof, pprof-top.txt)")
	fs.IntVar(&f.quietPct, "quiet-pct", 15, "before the load, wait until the machine is at most this % busy (0: do not wait)...")
	fs.DurationVar(&f.quietWait, "quiet-wait", 60*time.Second, "...for at most this long")
	fs.IntVar(&f.waitReplicas, "wait-replicas", 0, "set redis.wait_replicas: N in the edges' config (each deduction waits for N replicas; for -s failover); 0 leaves it out")
	fs.StringVar(&f.edges, "edges", "", "-s fleet: the points, edges per point, e.g. 1,2,3 (default the scenario's fleet.edges); with -target, the edges are the targets")
	fs.BoolVar(&f.quick, "quick", false, "a short run: apply the scenario's quick: overrides (before any -set)")
	fs.IntVar(&f.schedules, "schedules", 0, "-s nemesis: fault schedules to play, each on a fresh fleet (default the scenario's nemesis.schedules)")
	fs.Func("seed", "-s nemesis: the first schedule's seed; schedule i plays seed+i (-seed S -schedules 1 replays S)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		f.seed, f.seedSet = n, true
		return err
	})
	fs.DurationVar(&f.duration, "duration", 0, "-s nemesis: each schedule's load (at least 20s; faults heal before its last 10 s)")
	fs.StringVar(&f.seeds, "seeds", "", "-s nemesis: the schedules' seeds, comma-separated (instead of -seed and -schedules)")
	fs.BoolVar(&f.plan, "plan", false, "-s nemesis: print each schedule's drawn faults and start nothing")
	fs.StringVar(&f.kinds, "kinds", "", "-s nemesis: the fault kinds drawn, comma-separated (default all)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// `-clickhouse cluster`: a bool flag's value is the next word here,
	// and parsing stopped at it.
	if f.clickhouse && fs.NArg() > 0 && fs.Arg(0) == "cluster" {
		f.chCluster = true
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
	}
	if f.scenario == "" && fs.NArg() > 0 {
		f.scenario = fs.Arg(0)
	}
	if f.scenario == "" {
		fmt.Fprintln(stderr, "bench run: -s SCENARIO is required (bench list shows them)")
		return 2
	}
	if f.consumer != "edge" && f.consumer != "separate" {
		fmt.Fprintf(stderr, "bench run: -consumer %q: want edge or separate\n", f.consumer)
		return 2
	}
	if f.kafka != "bench" && f.kafka != "edge" {
		fmt.Fprintf(stderr, "bench run: -kafka %q: want bench or edge\n", f.kafka)
		return 2
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	sc, err := loadScenario(resolveScenario(root, f.scenario), f.sets)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		if strings.Contains(err.Error(), "no such file") {
			fmt.Fprintf(stderr, "bench: the scenarios are %s (bench list)\n", strings.Join(listScenarios(root), ", "))
		}
		return 2
	}
	if f.quick {
		if len(sc.Quick) == 0 {
			fmt.Fprintf(stderr, "bench run: -quick: scenario %s has no quick: section\n", sc.Name)
			return 2
		}
		if sc, err = loadScenario(resolveScenario(root, f.scenario), append(sc.quickSets(), f.sets...)); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 2
		}
	}
	if f.waitReplicas < 0 {
		fmt.Fprintf(stderr, "bench run: -wait-replicas %d: want 0 or more\n", f.waitReplicas)
		return 2
	}
	if f.waitReplicas > 0 {
		sc.setWaitReplicas(f.waitReplicas)
	}
	ctx, stop := signalContext()
	defer stop()
	if sc.Soak != nil {
		return cmdSoak(ctx, root, sc, f, stdout, stderr)
	}
	if sc.Nemesis != nil {
		return cmdNemesis(ctx, root, sc, f, stdout, stderr)
	}
	if f.chCluster {
		fmt.Fprintln(stderr, "bench run: -clickhouse cluster is for -s nemesis and -s soak")
		return 2
	}
	if f.schedules != 0 || f.seedSet || f.duration != 0 || f.kinds != "" || f.plan || f.seeds != "" {
		fmt.Fprintln(stderr, "bench run: -schedules, -seed, -seeds, -duration, -kinds and -plan are for -s nemesis")
		return 2
	}
	if sc.Fleet != nil || f.edges != "" {
		return cmdFleet(ctx, root, sc, f, stdout, stderr)
	}
	if sc.RouteRoom != nil {
		return cmdRouteRoom(ctx, root, sc, f, stdout, stderr)
	}
	run := runScenario
	if sc.Failover != nil {
		run = runFailover
	}
	if sc.WaitingRoom != nil {
		run = runRoom
	}
	res, err := run(ctx, root, sc, f, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	printReport(stdout, res)
	if !res.Passed() {
		return 1
	}
	return 0
}

// runScenario starts what the scenario needs, plays it, reconciles, tears
// everything down and writes the result files.
func runScenario(ctx context.Context, root string, sc *Scenario, f runFlags, stderr io.Writer) (*Result, error) {
	dir, progress, cleanup, err := runDir(sc.Name, f.keep, f.quiet, stderr)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if f.pin {
		if runtime.NumCPU() < 2 {
			return nil, errors.New("-pin needs 2 CPUs")
		}
		if err := need("-pin", toolTaskset); err != nil {
			return nil, err
		}
		if err := pinSelf(0); err != nil {
			return nil, fmt.Errorf("pin bench to CPU 0: %w", err)
		}
	}
	env := newEnv(EnvOptions{Root: root, Dir: dir, GoMaxProcs: f.gomaxprocs, Pin: f.pin, ServerCPU: 1, LoadCPU: 0, InfraCPU: 0,
		Kafka: f.kafka, Consumer: f.consumer, ClickHouse: f.clickhouse, ProxyBin: f.proxyBin, ProxyRev: f.proxyRev, Pprof: f.pprof, Quiet: progress})
	defer env.Close()

	res := &Result{Scenario: sc.Name, Description: sc.Description, Started: time.Now().UTC(), Config: sc,
		Machine: machineInfo(), GoVersion: runtime.Version(), Commit: proxyCommit(root, f.proxyRev),
		EdgeGoMaxProcs: f.gomaxprocs, Pinned: f.pin, Kafka: f.kafka, Consumer: f.consumer, ClickHouse: f.clickhouse}
	addr, admin := f.target, f.admin
	ordersAdmin := admin
	var saleStart time.Time
	t0 := time.Now()
	if addr != "" {
		if err := probe(addr); err != nil {
			return nil, err
		}
		waitQuiet(progress, f.quietPct, f.quietWait)
		res.Target = "external " + addr
		saleStart = time.Now().Add(sc.SaleStart)
	} else {
		if err := need("a run", toolRedis); err != nil {
			return nil, err
		}
		if err := env.build("./cmd/proxy", "./bench/origin"); err != nil {
			return nil, err
		}
		fmt.Fprintln(progress, "bench: starting redis-server, kafka, origin, edge")
		if err := env.StartRedis(ctx); err != nil {
			return nil, err
		}
		if f.kafka == "bench" {
			if err := env.StartKafka(ctx); err != nil {
				return nil, err
			}
		}
		if f.clickhouse {
			if err := env.StartClickHouse(); err != nil {
				return nil, err
			}
		}
		if err := env.StartOrigin(ctx); err != nil {
			return nil, err
		}
		spec := EdgeSpec{RedisAddr: env.RedisAddr, OriginAddr: env.OriginAddr, Extra: sc.Edge}
		if fr := sc.Faults.Redis; fr != nil {
			d, err := startDelayProxy("redis", env.RedisAddr, *fr)
			if err != nil {
				return nil, err
			}
			env.Delays = append(env.Delays, d)
			spec.RedisAddr = d.Addr()
		}
		if fo := sc.Faults.Origin; fo != nil {
			d, err := startDelayProxy("origin", env.OriginAddr, *fo)
			if err != nil {
				return nil, err
			}
			env.Delays = append(env.Delays, d)
			spec.OriginAddr = d.Addr()
		}
		waitQuiet(progress, f.quietPct, f.quietWait)
		// The sale opens sale_start after the load starts; the load starts
		// once the edge is up (allow it a few seconds).
		saleStart = time.Now().Add(-time.Second)
		if sc.SaleStart > 0 {
			saleStart = time.Now().Add(4*time.Second + sc.SaleStart)
		}
		for i := range sc.Products {
			spec.Products = append(spec.Products, Activity{ID: productID(i), Stock: sc.Stock, Limit: sc.Limit,
				Price: sc.Price, Start: saleStart, End: saleStart.Add(2 * time.Hour)})
		}
		if err := env.WriteEdgeConfig(spec); err != nil {
			return nil, err
		}
		if err := env.StartEdge(ctx, productID(0)); err != nil {
			return nil, err
		}
		addr, admin = env.EdgeAddr, env.AdminAddr
		ordersAdmin = env.OrdersAdmin
		res.Target = "edge started by bench"
		fmt.Fprintf(progress, "bench: edge %s (admin %s, GOMAXPROCS=%d) ready after %.1fs; redis %s; kafka %s\n",
			addr, admin, f.gomaxprocs, time.Since(t0).Seconds(), env.RedisAddr, orDefault(env.Brokers, "embedded in the edge"))
	}

	users, err := newUsers(sc.Users, benchSessionSecret, benchTokenSecret)
	if err != nil {
		return nil, err
	}
	// Sessions of the shoppers who arrive at once are signed before the
	// clock starts, as their browsers would hold them already.
	for i := range min(sc.Burst, sc.Users) {
		users.Session(i)
	}
	start := time.Now().Add(200 * time.Millisecond)
	if sc.SaleStart > 0 {
		if s := saleStart.Add(-sc.SaleStart); s.After(start) {
			start = s
		} else {
			fmt.Fprintf(progress, "bench: the edge took long to start: the sale opens %.1fs after the load starts (not %v)\n",
				saleStart.Sub(start).Seconds(), sc.SaleStart)
		}
	}

	rec := newRecorder(start, callNames)
	if sc.Duration <= 10*time.Second {
		rec.slot = 100 * time.Millisecond // a short run gets a finer time series
	}
	gen := newGenerator(sc, []string{addr}, users, rec)
	if sc.Preconnect {
		t := time.Now()
		if err := gen.Preconnect(ctx); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "bench: %d connections open in %.1fs\n", sc.Connections, time.Since(t).Seconds())
		if s := time.Now().Add(200 * time.Millisecond); s.After(start) {
			start = s
			rec.start = s
		}
	}
	// Snapshots before the load.
	var watches []*ProcWatch
	if env.Edge != nil {
		for _, p := range []*Proc{env.Edge, env.Redis, env.Kafka, env.Orders, env.Origin} {
			if p != nil {
				pid := p.Pid()
				watches = append(watches, watchProc(p.Name, func() []int { return []int{pid} }))
			}
		}
	}
	self := os.Getpid()
	watches = append(watches, watchProc("bench (load generator)", func() []int { return []int{self} }))
	var statsBefore map[string]CmdStat
	if env.RedisAddr != "" {
		statsBefore, _ = commandStats(env.RedisAddr)
	}
	var metricsBefore map[string]float64
	if admin != "" {
		metricsBefore = edgeMetrics(admin)
	}
	mb0, mt0 := machineTicks()

	planned := int64(0)
	if sc.Mode == "open" {
		planned = NewPacer(sc.Rate, sc.Burst, sc.Duration, sc.Tick).All()
	}
	fmt.Fprintf(progress, "bench: %s: %s\n", sc.Name, describeLoad(sc))
	pctx, stopProgress := context.WithCancel(ctx)
	go gen.progress(pctx, progress, start, planned)
	for _, w := range watches {
		w.Reset()
	}
	var profile chan []byte
	if env.PprofAddr != "" {
		profile = make(chan []byte, 1)
		secs := int(math.Ceil(time.Until(start).Seconds() + sc.Duration.Seconds() + 1))
		go func() { profile <- fetchProfile(env.PprofAddr, secs) }()
	}
	gen.Run(ctx, start)
	stopProgress()
	loadEnd := time.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	// After the load.
	for _, w := range watches {
		res.Processes = append(res.Processes, w.Stat())
	}
	mb1, mt1 := machineTicks()
	if mt1 > mt0 {
		res.MachineBusyPct = 100 * float64(mb1-mb0) / float64(mt1-mt0) * float64(runtime.NumCPU())
	}
	if env.RedisAddr != "" {
		if after, err := commandStats(env.RedisAddr); err == nil {
			res.RedisCommands = statsDelta(statsBefore, after)
		}
	}
	if admin != "" {
		after := edgeMetrics(admin)
		res.EdgeMetrics = map[string]float64{}
		for k, v := range after {
			res.EdgeMetrics[k] = v - metricsBefore[k]
		}
		res.ServerLatency = serverLatency(res.EdgeMetrics)
		for k := range res.EdgeMetrics {
			if strings.HasPrefix(k, "flashgate_http_request_duration_seconds") {
				delete(res.EdgeMetrics, k)
			}
		}
	}
	for _, d := range env.Delays {
		res.Faults = append(res.Faults, FaultStat{Name: d.Name, Connections: d.conns.Load(), Chunks: d.chunks.Load(), Stalls: d.stalls.Load()})
	}
	recordLoad(res, rec, gen, users, sc, start, loadEnd)

	// Reconcile: the edge's GET /admin/reconcile waits for the order
	// pipeline to drain, then checks every product.
	if ordersAdmin != "" {
		fmt.Fprintln(progress, "bench: reconciling (GET /admin/reconcile: waits for the order pipeline to drain)")
		res.Reconcile = reconcileVia(ordersAdmin, "")
	} else {
		res.Reconcile = Reconciled{Err: "not run: give -admin with -target"}
	}
	if env.Edge != nil {
		if ok, err := env.Edge.Exited(); ok {
			res.Notes = append(res.Notes, fmt.Sprintf("the edge exited during the run (%v); its log ends: %s", err, env.Edge.Tail()))
		}
	}
	var prof, block []byte
	if profile != nil {
		prof = <-profile
		block = fetchURL(fmt.Sprintf("http://%s/debug/pprof/block", env.PprofAddr))
	}
	env.Close()

	out := outDir(root, f, sc, res.Started)
	if len(prof) > 0 {
		res.Profile = saveProfile(out, env.bins["proxy"], prof)
	}
	if len(block) > 0 {
		saveProfileAs(out, env.bins["proxy"], "block", block)
	}
	if err := res.write(out); err != nil {
		return nil, err
	}
	res.OutDir = out
	return res, nil
}

// setWaitReplicas merges redis.wait_replicas: n into the scenario's edge
// section, over what the scenario set.
func (sc *Scenario) setWaitReplicas(n int) {
	if sc.Edge == nil {
		sc.Edge = map[string]any{}
	}
	yamlmerge.Into(sc.Edge, map[string]any{"redis": map[string]any{"wait_replicas": n}})
}

// recordLoad books what the generator did from start until end (or the
// last answer, if later): the endpoints' figures, the shoppers, and per
// product the orders and units answered 200.
func recordLoad(res *Result, rec *Recorder, gen *Generator, users *Users, sc *Scenario, start, end time.Time) {
	window := end.Sub(start).Seconds()
	if last := lastCompletion(rec); !last.IsZero() {
		window = last.Sub(start).Seconds()
	}
	res.Seconds = window
	res.Endpoints, res.Total, res.SendLag = rec.results(window)
	res.Arrived, res.Unfinished = gen.arrived.Load(), gen.active.Load()
	res.SessionsSigned = users.signed.Load()
	for i := range gen.sales {
		s := &gen.sales[i]
		ps := ProductSale{Product: productID(i), Stock: int64(sc.Stock), Orders: s.orders.Load(), Units: s.units.Load(), Unknown: s.pendingUnknown.Load()}
		ps.OverStock = max(0, ps.Units-ps.Stock)
		res.Sales = append(res.Sales, ps)
	}
}

func lastCompletion(rec *Recorder) time.Time {
	var last int64
	for _, e := range rec.endpoints {
		e.mu.Lock()
		last = max(last, e.last)
		e.mu.Unlock()
	}
	if last == 0 {
		return time.Time{}
	}
	return time.Unix(0, last)
}

func describeLoad(sc *Scenario) string {
	var steps []string
	for _, s := range sc.Steps {
		x := s.Call
		if s.Repeat > 1 {
			x += fmt.Sprintf("×%d/%v", s.Repeat, s.Every)
		}
		if s.Prob < 1 {
			x += fmt.Sprintf("(%.0f%%)", 100*s.Prob)
		}
		steps = append(steps, x)
	}
	load := ""
	if sc.Mode == "open" {
		if sc.Burst > 0 {
			load = fmt.Sprintf("%d shoppers at once", sc.Burst)
		}
		if sc.Rate > 0 {
			if load != "" {
				load += ", then "
			}
			load += fmt.Sprintf("%.0f shoppers/s for %v", sc.Rate, sc.Duration)
		}
		load = "open loop, " + load
	} else {
		load = fmt.Sprintf("closed loop, %d shoppers at a time for %v", sc.Connections, sc.Duration)
	}
	return fmt.Sprintf("%s; %d connections; steps %s; %d products × %d stock, limit %d",
		load, sc.Connections, strings.Join(steps, " → "), sc.Products, sc.Stock, sc.Limit)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// fetchProfile takes a CPU profile of the edge over secs seconds.
func fetchProfile(addr string, secs int) []byte {
	return fetchURLTimeout(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), time.Duration(secs+30)*time.Second)
}

func fetchURL(url string) []byte { return fetchURLTimeout(url, 30*time.Second) }

func fetchURLTimeout(url string, timeout time.Duration) []byte {
	c := &http.Client{Timeout: timeout}
	r, err := c.Get(url)
	if err != nil {
		return nil
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 {
		return nil
	}
	return b
}

// saveProfile writes cpu.pprof and pprof-top.txt (go tool pprof -top) and
// returns the top lines for the report.
func saveProfile(dir, bin string, prof []byte) string {
	return saveProfileAs(dir, bin, "cpu", prof)
}

func saveProfileAs(dir, bin, name string, prof []byte) string {
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, name+".pprof")
	if err := os.WriteFile(path, prof, 0o644); err != nil {
		return ""
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=40", bin, path).CombinedOutput()
	if err != nil {
		return "go tool pprof: " + err.Error()
	}
	top := "pprof-top.txt"
	if name != "cpu" {
		top = name + "-top.txt"
	}
	os.WriteFile(filepath.Join(dir, top), out, 0o644)
	return string(out)
}
