package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"
)

// compareFlags are the flags of `bench compare`.
type compareFlags struct {
	duration, warmup time.Duration
	rounds           int
	conns, threads   int
	attemptConns     int
	pin              bool
	targets          string
	out              string
	keep             bool
	proxyBin         string
	proxyRev         string
	quietPct         int
	quietWait        time.Duration
	dirtyPct         float64
	redo             int
	rbClients        int
	consumer         string
	pprof            bool
	edgeYAML         string
	edgeB            string // a second edge build for A/B rounds (compare_cpu.go)
}

// Goals: flashgate / peer, per round, median over rounds. Issue #5 set the
// first ones; issue #17 raised the sold-out, purchase, page and proxy goals
// to what these are now (0.8, 0.6, 1.5, 1.0 and 0.9 before).
var compareTargets = []struct {
	name, what, a, b string
	goal             float64
}{
	{"soldout", "sold-out rejection (410) through the full chain vs a bare fasthttp server answering the same 410", "flashgate", "barefasthttp", 1.0},
	{"attempts-redis", "purchase attempts (each deducts) vs redis-benchmark EVALSHA of the same script on the same Redis", "flashgate", "redis-benchmark", 0.8},
	{"attempts-openresty", "purchase attempts (each deducts) vs the OpenResty pattern (nginx+Lua EVALSHA, same script, same Redis)", "flashgate", "openresty", 2.0},
	{"page", "the sale page GET /seckill/p1 vs nginx serving the same bytes", "flashgate", "nginx", 1.05},
	{"proxy", "a proxied path GET /items/p1 vs nginx proxy_pass to the same origin", "flashgate", "nginx", 1.0},
	// Issue #13: flashgate's own HTTPS listener against nginx with the
	// same certificate. Go's handshake and record layer against OpenSSL's.
	{"tls-handshake", "full TLS handshakes/s: GET /seckill/p1 over HTTPS, a new connection and a full handshake each (Connection: close), vs nginx with the same certificate", "flashgate", "nginx", 0.8},
	{"tls-keepalive", "the sale page GET /seckill/p1 over HTTPS on kept-alive connections vs nginx with the same certificate", "flashgate", "nginx", 0.9},
	// Issue #17: a route's microcache against nginx proxy_cache (compare_cache.go).
	{"cache", "a cached path GET /cached/page (route cache, ttl 1s) vs nginx proxy_cache with the same settings on the same origin", "flashgate", "nginx", 1.0},
}

// Comparison is one target's rounds and verdict.
type Comparison struct {
	Name      string      `json:"name"`
	What      string      `json:"what"`
	A         string      `json:"a"`
	B         string      `json:"b"`
	Goal      float64     `json:"goal"`
	Rounds    [][2]Sample `json:"rounds"`
	Dirty     []bool      `json:"dirty_rounds"` // other load above -dirty-pct even after the redo: left out of the median when a clean round exists
	Ratios    []float64   `json:"ratios"`       // requests/s A/B per round
	CPURatios []float64   `json:"cpu_ratios"`   // CPU per request A/B per round (servers only)
	Median    float64     `json:"median"`
	CPUMedian float64     `json:"cpu_median"`
	Met       bool        `json:"met"`
	Skipped   string      `json:"skipped,omitempty"`
}

// CompareResult is compare.json.
type CompareResult struct {
	Started     time.Time     `json:"started"`
	Machine     string        `json:"machine"`
	GoVersion   string        `json:"go"`
	Commit      string        `json:"commit"`
	Nginx       string        `json:"nginx"`
	Setup       []string      `json:"setup"`
	Comparisons []*Comparison `json:"comparisons"`
	Reconcile   Reconciled    `json:"reconcile"`
	ResultLine  string        `json:"result_line"`
	// CPUPerPurchase is the purchase targets' CPU per purchase by process.
	CPUPerPurchase []CPURow `json:"cpu_per_purchase"`
}

func cmdCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f compareFlags
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "measurement time per server per round")
	fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "warm-up per server before a target's rounds")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds, each A then B (alternating)")
	fs.IntVar(&f.conns, "c", 64, "wrk connections (-c)")
	fs.IntVar(&f.threads, "t", 1, "wrk threads (-t)")
	fs.IntVar(&f.attemptConns, "attempt-conns", 512, "connections of bench's closed-loop generator for purchase attempts (both servers)")
	fs.IntVar(&f.rbClients, "rb-clients", 50, "redis-benchmark -c")
	fs.BoolVar(&f.pin, "pin", true, "pin servers under test to CPU 1, load generators and the origin to CPU 0 (Redis, Kafka float)")
	fs.StringVar(&f.targets, "targets", "soldout,page,proxy,tls,cache,attempts", "which comparisons (soldout, page, proxy, tls, cache, attempts)")
	fs.StringVar(&f.out, "out", "", "directory for compare.json (default bench/results/compare-TIME)")
	fs.BoolVar(&f.keep, "keep", false, "keep the run directory (configs, logs)")
	fs.StringVar(&f.proxyRev, "proxy-rev", "", "build cmd/proxy from this git revision (e.g. HEAD) instead of the working tree")
	fs.StringVar(&f.proxyBin, "proxy-bin", "", "a prebuilt cmd/proxy binary instead of building the working tree")
	fs.IntVar(&f.quietPct, "quiet-pct", 10, "before each measurement wait until the machine is at most this % busy...")
	fs.DurationVar(&f.quietWait, "quiet-wait", 30*time.Second, "...for at most this long")
	fs.Float64Var(&f.dirtyPct, "dirty-pct", 25, "redo a round when other processes used more than this % of one CPU during it")
	fs.IntVar(&f.redo, "redo", 1, "redo a dirty round at most this many times")
	fs.BoolVar(&f.pprof, "pprof", false, "run the edge with -pprof and save a CPU profile of its first round of each target (pprof-TARGET.pprof, -top.txt)")
	fs.StringVar(&f.edgeYAML, "edge", "", "a YAML file merged over the edge config bench writes (maps merge, lists replace), to compare a config change")
	fs.StringVar(&f.edgeB, "edge-b", "", "a second cmd/proxy binary: A/B rounds against the edge (ab-TARGET comparisons, alternating A B, B A; ratios B/A)")
	fs.StringVar(&f.consumer, "consumer", "separate", `order consumer: "separate" (a second cmd/proxy, off the edge's CPU) or "edge"`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	ctx, stop := signalContext()
	defer stop()
	res, err := runCompare(ctx, root, f, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench compare:", err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	fmt.Fprintln(stdout, res.ResultLine)
	if !res.Reconcile.Clean {
		return 1
	}
	return 0
}

// comparer holds a compare run's servers.
type comparer struct {
	f           compareFlags
	env         *Env
	log         io.Writer
	dir         string
	nginx       *Proc // page + proxy peer
	ngAddr      string
	or          *Proc // OpenResty pattern
	orAddr      string
	bare        *Proc
	bareAdr     string
	page        []byte // the sale page as flashgate serves it, and two of its headers
	pageCSP     string
	pageCC      string
	tlsEdge     *Proc // flashgate with listen.tls (a second edge on the same Redis and Kafka)
	tlsAddr     string
	tlsAdmin    string
	tlsNginx    *Proc // nginx with the same certificate
	tlsNgAddr   string
	tlsCA       *x509.CertPool
	users       *Users
	next        atomic.Int64 // next shopper id for purchase attempts
	sha         string
	rbRate      float64            // redis-benchmark's last rate, to size its -n
	attemptRate map[string]float64 // the generator's last rate per server, to size what it prepares
	out         string             // results directory
	target      string             // the comparison being measured (profile names)
	profiled    map[string]bool
	setup       []string
	edgeB       *Proc // -edge-b: the B build of the edge (compare_cpu.go)
	edgeBAddr   string
}

func (c *comparer) logf(format string, args ...any) { fmt.Fprintf(c.log, format+"\n", args...) }

func runCompare(ctx context.Context, root string, f compareFlags, stdout, stderr io.Writer) (*CompareResult, error) {
	want := map[string]bool{}
	for _, t := range strings.Split(f.targets, ",") {
		t = strings.TrimSpace(t)
		switch t {
		case "soldout", "attempts", "page", "proxy", "tls", "cache":
			want[t] = true
		case "":
		default:
			return nil, fmt.Errorf("-targets: unknown %q (soldout, attempts, page, proxy, tls, cache)", t)
		}
	}
	if err := need("bench compare", toolRedis, toolWrk); err != nil {
		return nil, err
	}
	if f.pin {
		if runtime.NumCPU() < 2 {
			f.pin = false
			fmt.Fprintln(stderr, "bench compare: one CPU: not pinning")
		} else if err := need("-pin", toolTaskset); err != nil {
			return nil, err
		} else if err := pinSelf(0); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "flashgate-compare-")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755)
	if f.keep {
		fmt.Fprintln(stderr, "bench compare: run directory", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	env := newEnv(EnvOptions{Root: root, Dir: dir, GoMaxProcs: 1, Pin: f.pin, ServerCPU: 1, LoadCPU: 0, InfraCPU: -1,
		Kafka: "bench", Consumer: f.consumer, ProxyBin: f.proxyBin, ProxyRev: f.proxyRev, Quiet: stderr})
	defer env.Close()
	c := &comparer{f: f, env: env, log: stderr, dir: dir, attemptRate: map[string]float64{}, profiled: map[string]bool{}}
	res := &CompareResult{Started: time.Now().UTC(), Machine: machineInfo(), GoVersion: runtime.Version(), Commit: proxyCommit(root, f.proxyRev)}
	c.out = f.out
	if c.out == "" {
		c.out = filepath.Join(root, "bench", "results", "compare-"+res.Started.Format("20060102-150405"))
	}
	env.opt.Pprof = f.pprof

	// Peers whose packages are missing are skipped with the package named.
	skip := map[string]string{}
	if err := need("the nginx peer", toolNginx); err != nil {
		skip["page"], skip["proxy"] = err.Error(), err.Error()
		skip["tls-handshake"], skip["tls-keepalive"], skip["cache"] = err.Error(), err.Error(), err.Error()
	}
	if err := need("the OpenResty peer", toolNginx, toolNginxNDK, toolNginxLua, toolLuaRedis); err != nil {
		skip["attempts-openresty"] = err.Error()
	}
	if err := need("the redis-benchmark peer", toolRedisBench); err != nil {
		skip["attempts-redis"] = err.Error()
	}
	for _, s := range skip {
		fmt.Fprintln(stderr, "bench compare: skipped:", s)
	}

	if err := env.build("./cmd/proxy", "./bench/origin", "./bench/peers/barefasthttp"); err != nil {
		return nil, err
	}
	if err := c.start(ctx, root, skip, want); err != nil {
		return nil, err
	}
	res.Setup = c.setup
	res.Nginx = nginxVersion()
	fmt.Fprintf(stderr, "== %s; %s; flashgate GOMAXPROCS=1 vs nginx/OpenResty 1 worker, fasthttp GOMAXPROCS=1\n", res.Machine, res.Nginx)
	if f.pin {
		fmt.Fprintln(stderr, "== pinned: servers under test on CPU 1; wrk, bench's generator, redis-benchmark and the origin on CPU 0; Redis, Kafka and the order consumer float")
	}

	run := func(name string, fn func(cmp *Comparison) error) error {
		var t = compareTargets[0]
		for _, x := range compareTargets {
			if x.name == name {
				t = x
			}
		}
		cmp := &Comparison{Name: t.name, What: t.what, A: t.a, B: t.b, Goal: t.goal}
		if what, ok := abTargetInfo(name); ok {
			cmp.Name, cmp.What, cmp.A, cmp.B, cmp.Goal = name, what, "flashgate-b", "flashgate", 0
		}
		res.Comparisons = append(res.Comparisons, cmp)
		if s, ok := skip[name]; ok {
			cmp.Skipped = s
			return nil
		}
		fmt.Fprintf(stderr, "\n-- %s: %s\n", name, cmp.What)
		c.target = name
		if err := fn(cmp); err != nil {
			return err
		}
		cmp.finish()
		return ctx.Err()
	}
	if want["soldout"] {
		if err := run("soldout", c.soldout); err != nil {
			return nil, err
		}
	}
	if want["page"] {
		if err := run("page", func(cmp *Comparison) error { return c.wrkPair(cmp, "/seckill/p1", "", c.ngAddr, c.ngPids) }); err != nil {
			return nil, err
		}
	}
	if want["proxy"] {
		if err := run("proxy", func(cmp *Comparison) error { return c.wrkPair(cmp, "/items/p1", "", c.ngAddr, c.ngPids) }); err != nil {
			return nil, err
		}
	}
	if want["tls"] {
		if err := run("tls-handshake", c.tlsHandshakes); err != nil {
			return nil, err
		}
		if err := run("tls-keepalive", func(cmp *Comparison) error {
			return c.wrkPairURLs(cmp, "https://"+c.tlsAddr+"/seckill/p1", "https://"+c.tlsNgAddr+"/seckill/p1", "", 200, c.tlsEdgePids, c.tlsNgPids, false)
		}); err != nil {
			return nil, err
		}
	}

	if want["cache"] {
		if err := run("cache", func(cmp *Comparison) error { return c.cache(ctx, root, cmp) }); err != nil {
			return nil, err
		}
	}

	// Purchases last: they leave a million keys in Redis and a backlog
	// for the consumer, which must not weigh on the other targets.
	if want["attempts"] {
		var ar, ao *Comparison
		err := c.attempts(ctx, skip, func(r, o *Comparison) { ar, ao = r, o })
		if ar != nil {
			res.Comparisons = append(res.Comparisons, ar, ao)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.abTargets(ctx, want, run); err != nil {
		return nil, err
	}
	fmt.Fprintln(stderr, "\nbench compare: reconciling (GET /admin/reconcile)")
	res.Reconcile = reconcileVia(env.OrdersAdmin, "")
	env.Close()

	res.CPUPerPurchase = sortedRows(cpuTable(res.Comparisons))
	printCompare(stdout, res)
	out := c.out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	res.ResultLine = compareResultLine(res)
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "compare.json"), b, 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "compare.json: %s\n", filepath.Join(out, "compare.json"))
	return res, nil
}

// start brings up Redis, Kafka, the origin, the edge and the peers.
func (c *comparer) start(ctx context.Context, root string, skip map[string]string, want map[string]bool) error {
	env := c.env
	if err := env.StartRedis(ctx); err != nil {
		return err
	}
	if err := env.StartKafka(ctx); err != nil {
		return err
	}
	if err := env.StartOrigin(ctx); err != nil {
		return err
	}
	now := time.Now().Add(-time.Second)
	end := now.Add(3 * time.Hour)
	spec := EdgeSpec{RedisAddr: env.RedisAddr, OriginAddr: env.OriginAddr, ScopeAll: true, Products: []Activity{
		{ID: "p1", Stock: 1000, Limit: 1, Price: "99.00", Start: now, End: end},
		{ID: "so", Stock: 1, Limit: 1, Price: "99.00", Start: now, End: end},
		{ID: "pa", Stock: 1_000_000_000, Limit: 1, Price: "99.00", Start: now, End: end},
	}}
	if c.f.edgeYAML != "" {
		b, err := os.ReadFile(c.f.edgeYAML)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(b, &spec.Extra); err != nil {
			return fmt.Errorf("-edge %s: %v", c.f.edgeYAML, err)
		}
		c.setup = append(c.setup, "edge config merged from "+c.f.edgeYAML)
	}
	if err := env.WriteEdgeConfig(spec); err != nil {
		return err
	}
	if err := env.StartEdge(ctx, "p1"); err != nil {
		return err
	}
	c.setup = append(c.setup, "flashgate: cmd/proxy GOMAXPROCS=1, the whole filter chain (access, ip_limit and conn_limit on every path at limits that never reject, sale_window, sold_out, session, user_limit, purchase_token), Redis "+env.RedisAddr+", kfake in its own process, order consumer "+env.opt.Consumer)
	var err error
	if c.users, err = newUsers(10_000_000, benchSessionSecret, benchTokenSecret); err != nil {
		return err
	}
	c.next.Store(1000)

	// Sell "so" out: one purchase, then the edge's flag answers 410.
	if err := c.sellOut(); err != nil {
		return err
	}
	if err := c.startEdgeB(ctx, spec); err != nil {
		return err
	}

	// Only the peers the chosen targets compare against.
	if want["soldout"] {
		// The bare fasthttp ceiling.
		if c.bareAdr, err = freeAddr(); err != nil {
			return err
		}
		if c.bare, err = env.procs.Start("barefasthttp", env.cpu(1), []string{"GOMAXPROCS=1"}, env.bins["barefasthttp"], "-addr", c.bareAdr); err != nil {
			return err
		}
		if err := waitFor(ctx, c.bare, "barefasthttp", 10*time.Second, tcpReady(c.bareAdr)); err != nil {
			return err
		}
	}
	if _, ok := skip["page"]; !ok && (want["page"] || want["proxy"] || want["tls"]) {
		if err := c.startNginx(ctx, root); err != nil {
			return err
		}
	}
	if _, ok := skip["tls-handshake"]; !ok && want["tls"] {
		if err := c.startTLS(ctx, root, spec); err != nil {
			return err
		}
	}
	if _, ok := skip["attempts-openresty"]; !ok && want["attempts"] {
		if err := c.startOpenResty(ctx, root); err != nil {
			return err
		}
	}
	if _, ok := skip["attempts-redis"]; !ok && want["attempts"] {
		if err := c.loadDeductPeers(root); err != nil {
			return err
		}
	}
	return nil
}

// sellOut buys the one unit of "so" through the edge and checks the next
// attempt is answered 410 (by the edge's sold-out flag).
func (c *comparer) sellOut() error {
	cl := &fasthttp.Client{}
	post := func(path, jwt, body string) (int, []byte, error) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + c.env.EdgeAddr + path)
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer "+jwt)
		req.SetBodyString(body)
		err := cl.DoTimeout(req, resp, 5*time.Second)
		return resp.StatusCode(), append([]byte(nil), resp.Body()...), err
	}
	jwt := c.users.Session(1)
	st, body, err := post("/api/seckill/token", jwt, `{"productId":"so"}`)
	if err != nil || st != 200 {
		return fmt.Errorf("token for so: %d %s %v", st, body, err)
	}
	tok := jsonStr(body, "token")
	st, body, err = post("/api/seckill/do", jwt, `{"productId":"so","token":"`+tok+`","quantity":1}`)
	if err != nil || st != 200 {
		return fmt.Errorf("buying so: %d %s %v", st, body, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, body, err = post("/api/seckill/do", c.users.Session(2), c.soldOutBody())
		if err == nil && st == 410 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("so is not answered 410 after it sold out: %d %s %v", st, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *comparer) soldOutBody() string {
	tok := c.users.Token(nil, c.users.ID(2), "so", time.Hour)
	return `{"productId":"so","token":"` + string(tok) + `","quantity":1}`
}
