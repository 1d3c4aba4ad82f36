package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
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
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"flashgate/orders/stock"
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

func nginxVersion() string {
	out, err := exec.Command(toolPath(toolNginx), "-v").CombinedOutput()
	if err != nil {
		return "nginx ?"
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: "))
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

// The files of the repository compare reads, relative to its root
// (TestRepoFilesExist keeps them true when the tree moves).
var (
	nginxPeerConf     = filepath.Join("bench", "peers", "nginx-edge.conf")
	openrestyPeerConf = filepath.Join("bench", "peers", "openresty-seckill.conf")
	// deductScript is the edge's own deduction script, which the OpenResty
	// peer runs too: the same work per attempt.
	deductScript = filepath.Join("orders", "stock", "lua", "deduct.lua")
)

// startNginx runs bench/peers/nginx-edge.conf the way compare-nginx.sh
// does: the page as flashgate serves it (same bytes and headers), the
// proxied paths to the same origin, limit_req + limit_conn never rejecting.
func (c *comparer) startNginx(ctx context.Context, root string) error {
	env := c.env
	www := filepath.Join(c.dir, "www")
	os.MkdirAll(www, 0o755)
	os.MkdirAll(filepath.Join(c.dir, "tmp"), 0o755)
	resp, err := http.Get("http://" + env.EdgeAddr + "/seckill/p1")
	if err != nil {
		return err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("flashgate answered %d for /seckill/p1", resp.StatusCode)
	}
	if err := os.WriteFile(filepath.Join(www, "index.html"), page, 0o644); err != nil {
		return err
	}
	csp, cc := resp.Header.Get("Content-Security-Policy"), resp.Header.Get("Cache-Control")
	if csp == "" || cc == "" {
		return errors.New("flashgate's page lacks Content-Security-Policy or Cache-Control")
	}
	c.page, c.pageCSP, c.pageCC = page, csp, cc
	if c.ngAddr, err = freeAddr(); err != nil {
		return err
	}
	tmpl, err := os.ReadFile(filepath.Join(root, nginxPeerConf))
	if err != nil {
		return err
	}
	conf := strings.NewReplacer("__DIR__", c.dir, "__ROOT__", www, "__LISTEN__", c.ngAddr, "__ORIGIN__", env.OriginAddr,
		"__CSP__", csp, "__PAGE_CACHE_CONTROL__", cc, "__SENDFILE__", "off").Replace(string(tmpl))
	conf = strings.ReplaceAll(conf, "\n__L__", "\n") // LIMITS=1: limit_req and limit_conn on
	path := filepath.Join(c.dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	if c.nginx, err = c.startNginxConf(ctx, "nginx", path, c.ngAddr); err != nil {
		return err
	}
	// Same answers before measuring.
	for _, chk := range []struct{ name, addr string }{{"flashgate", env.EdgeAddr}, {"nginx", c.ngAddr}} {
		r, err := http.Get("http://" + chk.addr + "/seckill/p1")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || string(b) != string(page) {
			return fmt.Errorf("%s: /seckill/p1 answered %d with a different body", chk.name, r.StatusCode)
		}
		r, err = http.Get("http://" + chk.addr + "/items/p1")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || r.Header.Get("X-Origin") != "flashgate-bench" {
			return fmt.Errorf("%s: /items/p1 did not come from the origin (%d)", chk.name, r.StatusCode)
		}
	}
	c.setup = append(c.setup, "nginx: bench/peers/nginx-edge.conf, 1 worker, the page as flashgate serves it (same bytes and headers, open_file_cache, sendfile off), proxy_pass with upstream keepalive, limit_req + limit_conn never rejecting, no access log")
	return nil
}

func (c *comparer) startNginxConf(ctx context.Context, name, path, addr string) (*Proc, error) {
	ng := toolPath(toolNginx)
	errLog := filepath.Join(c.dir, name+"-error.log")
	if out, err := exec.Command(ng, "-t", "-q", "-p", c.dir, "-c", path, "-e", errLog).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx rejected %s: %s", path, out)
	}
	p, err := c.env.procs.Start(name, c.env.cpu(1), nil, ng, "-p", c.dir, "-c", path, "-e", errLog)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, p, name, 10*time.Second, tcpReady(addr)); err != nil {
		return nil, err
	}
	if n := len(childPids(p.Pid())); n != 1 {
		return nil, fmt.Errorf("%s: expected one worker, found %d", name, n)
	}
	return p, nil
}

// startOpenResty runs bench/peers/openresty-seckill.conf against the run's
// Redis with the deduction script loaded and its own products warmed: "or"
// (stock to spare, for attempts) and "so" (the edge's sold-out product: the
// first call sets the peer's sold-out flag, and the script writes nothing).
func (c *comparer) startOpenResty(ctx context.Context, root string) error {
	env := c.env
	lua, err := os.ReadFile(filepath.Join(root, deductScript))
	if err != nil {
		return err
	}
	rc, err := dialRedis(env.RedisAddr)
	if err != nil {
		return err
	}
	defer rc.Close()
	v, err := rc.Do("SCRIPT", "LOAD", string(lua))
	if err != nil {
		return err
	}
	c.sha = fmt.Sprint(v)
	// The script checks the server's run id against the meta's (the
	// fence, see orders/stock/fence.go), as the edge's sales have it: the
	// peers do the same work, on a sale verified on this server.
	info, err := rc.Do("INFO", "server")
	if err != nil {
		return err
	}
	_, rest, _ := strings.Cut(fmt.Sprint(info), "run_id:")
	runID, _, _ := strings.Cut(rest, "\r")
	for _, cmd := range [][]string{
		{"SET", stock.StockKey("or"), "1000000000"},
		{"HSET", stock.MetaKey("or"), "initial", "1000000000", "limit", "1", "end", "0", "runid", runID},
		{"SET", stock.StockKey(rbProduct), "1000000000000000"},
		{"HSET", stock.MetaKey(rbProduct), "end", "0", "runid", runID},
	} {
		if _, err := rc.Do(cmd...); err != nil {
			return err
		}
	}
	if c.orAddr, err = freeAddr(); err != nil {
		return err
	}
	host, port, _ := strings.Cut(env.RedisAddr, ":")
	tmpl, err := os.ReadFile(filepath.Join(root, openrestyPeerConf))
	if err != nil {
		return err
	}
	conf := strings.NewReplacer("__DIR__", c.dir, "__LISTEN__", c.orAddr, "__REDIS_HOST__", host, "__REDIS_PORT__", port,
		"__SHA__", c.sha, "__GRACE_MS__", "604800000", "__ORDER_TTL_MS__", "604800000", "__LIMIT__", "1",
		"__PRICE__", "9900", "__TOKEN_TTL_MS__", "600000", "__NODE__", "99",
		"__DEDUCT_CALL__", openrestyDeductCall()).Replace(string(tmpl))
	path := filepath.Join(c.dir, "openresty.conf")
	os.MkdirAll(filepath.Join(c.dir, "tmp"), 0o755) // its temp paths, shared with the nginx peer's
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	if c.or, err = c.startNginxConf(ctx, "openresty", path, c.orAddr); err != nil {
		return err
	}
	// Check its answers: a purchase, then the sold-out flag for "so".
	cl := &fasthttp.Client{}
	try := func(product string) (int, string) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		i := int(c.next.Add(1))
		req.SetRequestURI("http://" + c.orAddr + "/api/seckill/do")
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer "+c.users.SignFresh(i))
		req.SetBodyString(`{"productId":"` + product + `","token":"` + string(c.users.Token(nil, c.users.ID(i), product, time.Hour)) + `","quantity":1}`)
		if err := cl.DoTimeout(req, resp, 5*time.Second); err != nil {
			return 0, err.Error()
		}
		return resp.StatusCode(), string(resp.Body())
	}
	if st, body := try("or"); st != 200 {
		return fmt.Errorf("openresty peer: a purchase answered %d %s (log %s)", st, body, filepath.Join(c.dir, "openresty-error.log"))
	}
	for range 2 {
		if st, body := try("so"); st != 410 {
			return fmt.Errorf("openresty peer: sold-out product answered %d %s", st, body)
		}
	}
	c.setup = append(c.setup, "openresty: bench/peers/openresty-seckill.conf (Debian nginx + libnginx-mod-http-lua + lua-nginx-redis), 1 worker, lua_shared_dict sold-out flag, EVALSHA of orders/stock/lua/deduct.lua on the same Redis, cosocket keepalive")
	return nil
}

func (c *comparer) ngPids() []int   { return procTree(c.nginx) }
func (c *comparer) orPids() []int   { return procTree(c.or) }
func (c *comparer) edgePids() []int { return []int{c.env.Edge.Pid()} }
func (c *comparer) barePids() []int { return []int{c.bare.Pid()} }

func procTree(p *Proc) []int {
	if p == nil {
		return nil
	}
	return append([]int{p.Pid()}, childPids(p.Pid())...)
}

// settle waits (at most 30 s) until the order consumer and Kafka are idle:
// the backlog of a purchase round is consumed before the next round starts
// and is counted in the round that made it.
func (c *comparer) settle() {
	var pids []int
	for _, p := range []*Proc{c.env.Orders, c.env.Kafka} {
		if p != nil {
			pids = append(pids, p.Pid())
		}
	}
	if c.env.Orders == nil {
		pids = append(pids, c.env.Edge.Pid()) // the consumer runs in the edge
	}
	deadline := time.Now().Add(60 * time.Second)
	quiet := 0
	for time.Now().Before(deadline) && quiet < 2 {
		t0 := sumTicks(pids)
		time.Sleep(500 * time.Millisecond)
		lag, ok := edgeMetrics(c.env.OrdersAdmin)["flashgate_orders_consumer_lag"]
		if sumTicks(pids)-t0 <= 3 && (!ok || lag <= 0) { // <= 6% of a CPU and nothing left to store
			quiet++
		} else {
			quiet = 0
		}
	}
}

// procTicks is the CPU ticks of each process bench started, by name.
func (c *comparer) procTicks() map[string]int64 {
	out := map[string]int64{}
	c.env.procs.mu.Lock()
	list := c.env.procs.list
	c.env.procs.mu.Unlock()
	for _, p := range list {
		if ok, _ := p.Exited(); !ok {
			out[p.Name] = sumTicks(procTree(p))
		}
	}
	return out
}

// ourPids are every process bench started (for "other%").
func (c *comparer) ourPids() []int {
	var pids []int
	c.env.procs.mu.Lock()
	for _, p := range c.env.procs.list {
		if ok, _ := p.Exited(); !ok {
			pids = append(pids, procTree(p)...)
		}
	}
	c.env.procs.mu.Unlock()
	return append(pids, os.Getpid())
}

func sumTicks(pids []int) int64 {
	var t int64
	for _, p := range pids {
		t += cpuTicks(p)
	}
	return t
}

// waitQuiet waits until the machine (our servers idle) is at most
// quietPct % busy over a second, or quietWait passed.
func (c *comparer) waitQuiet() { waitQuiet(c.log, c.f.quietPct, c.f.quietWait) }

// waitQuiet waits until the machine is at most pct % busy over a second
// (other jobs on a shared 2-core box swamp the figures), or wait passed.
func waitQuiet(log io.Writer, pct int, wait time.Duration) {
	if pct <= 0 || pct >= 100 {
		return
	}
	deadline := time.Now().Add(wait)
	t0 := time.Now()
	for {
		b0, m0 := machineTicks()
		time.Sleep(time.Second)
		b1, m1 := machineTicks()
		busy := 100 * float64(b1-b0) / float64(max(1, m1-m0))
		if busy <= float64(pct) {
			if w := time.Since(t0); w > 2*time.Second {
				fmt.Fprintf(log, "   (waited %.0fs for other jobs on the machine)\n", w.Seconds())
			}
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(log, "   (machine still %.0f%% busy after %v; measuring anyway)\n", busy, wait)
			return
		}
	}
}

// measure runs load (which returns its sample and the load tool's own CPU
// seconds) with the server's and the machine's CPU counted around it.
// After the load, the per-process figures wait for the order pipeline to
// catch up (the consumer's backlog is part of what an attempt costs).
func (c *comparer) measure(server string, pids func() []int, load func() (Sample, float64, error)) (Sample, error) {
	c.waitQuiet()
	rs0, _ := commandStats(c.env.RedisAddr)
	sp := pids()
	ours0 := sumTicks(c.ourPids())
	self0 := cpuTicks(os.Getpid())
	pt0 := c.procTicks()
	s0 := sumTicks(sp)
	mb0, mt0 := machineTicks()
	var prof chan []byte
	if done, ok := c.profiled[c.target]; c.env.PprofAddr != "" && server == "flashgate" && ok && !done {
		c.profiled[c.target] = true
		prof = make(chan []byte, 1)
		go func() { prof <- fetchProfile(c.env.PprofAddr, int(math.Max(1, c.f.duration.Seconds()-0.5))) }()
	}
	t0 := time.Now()
	s, toolCPU, err := load()
	if prof != nil {
		if p := <-prof; len(p) > 0 {
			top := saveProfileAs(c.out, c.env.bins["proxy"], "pprof-"+c.target, p)
			c.logf("   (edge CPU profile of this round: %s/pprof-%s.pprof, -top.txt)", c.out, c.target)
			_ = top
		}
	}
	el := time.Since(t0).Seconds()
	mb1, mt1 := machineTicks()
	s1 := sumTicks(sp)
	ours1 := sumTicks(c.ourPids())
	self1 := cpuTicks(os.Getpid())
	if err != nil {
		return s, err
	}
	c.settle()
	pt1 := c.procTicks()
	if rs1, err := commandStats(c.env.RedisAddr); err == nil && s.Requests > 0 {
		s.RedisPerReq = map[string]float64{}
		for k, v := range statsDelta(rs0, rs1) {
			if k != "info" {
				s.RedisPerReq[k] = float64(v.Calls) / float64(s.Requests)
			}
		}
	}
	if s.Requests > 0 {
		s.PerProc = map[string]float64{}
		for name, t := range pt1 {
			if d := t - pt0[name]; d > 0 {
				s.PerProc[name] = 1e6 * float64(d) / clkTck / float64(s.Requests)
			}
		}
	}
	if s.Requests > 0 {
		// Everything bench started but its own generator: the server,
		// Redis, Kafka, the order consumer, the origin.
		s.SysPerReq = 1e6 * float64((ours1-ours0)-(self1-self0)) / clkTck / float64(s.Requests)
	}
	s.Server = server
	srv := float64(s1-s0) / clkTck
	s.CPUPct = 100 * srv / el
	if s.Requests > 0 {
		s.CPUPerReq = 1e6 * srv / float64(s.Requests)
	}
	other := float64(mb1-mb0)/clkTck - float64(ours1-ours0)/clkTck - toolCPU
	s.OtherPct = max(0, 100*other/el)
	if s.Requests > 0 {
		s.GenPerReq = 1e6 * toolCPU / float64(s.Requests)
	}
	if mt1 > mt0 {
		s.MachinePct = 100 * float64(mb1-mb0) / float64(mt1-mt0)
	}
	return s, nil
}

func (c *comparer) wrkSample(url, script string, expect int) func() (Sample, float64, error) {
	return func() (Sample, float64, error) {
		out, toolCPU, err := runWrk(c.env.cpu(0), c.f.threads, c.f.conns, c.f.duration, script, url)
		if err != nil {
			return Sample{}, toolCPU, err
		}
		s, non2xx, err := parseWrk(out)
		s.Tool = fmt.Sprintf("wrk -t%d -c%d -d%s", c.f.threads, c.f.conns, wrkDuration(c.f.duration))
		if expect == 200 {
			s.Errors += non2xx
		} else if non2xx != s.Requests {
			s.Errors += s.Requests - non2xx // answers that were not the expected rejection
		}
		return s, toolCPU, err
	}
}

// wrkPair measures flashgate and a peer on the same path with the same wrk
// command, alternating, round by round.
func (c *comparer) wrkPair(cmp *Comparison, path, script, peerAddr string, peerPids func() []int) error {
	return c.wrkPairAt(cmp, path, script, 200, c.env.EdgeAddr, peerAddr, peerPids)
}

func (c *comparer) wrkPairAt(cmp *Comparison, path, script string, expect int, aAddr, bAddr string, bPids func() []int) error {
	return c.wrkPairURLs(cmp, "http://"+aAddr+path, "http://"+bAddr+path, script, expect, c.edgePids, bPids, true)
}

// wrkPairURLs is wrkPairAt for any two URLs and servers; profile asks for
// the -pprof round, which only the main edge has.
func (c *comparer) wrkPairURLs(cmp *Comparison, aURL, bURL, script string, expect int, aPids, bPids func() []int, profile bool) error {
	for _, u := range []string{aURL, bURL} {
		runWrk(c.env.cpu(0), c.f.threads, c.f.conns, c.f.warmup, script, u)
	}
	if profile && c.env.PprofAddr != "" {
		// A profile in a round of its own, not counted: profiling costs
		// the edge a few per cent.
		c.profiled[c.target] = false
		c.measure(cmp.A, aPids, c.wrkSample(aURL, script, expect))
	}
	printRoundHeader(c.log)
	for r := 1; r <= c.f.rounds; r++ {
		var a, b Sample
		var err error
		for attempt := 0; attempt <= c.f.redo; attempt++ {
			if a, err = c.measure(cmp.A, aPids, c.wrkSample(aURL, script, expect)); err != nil {
				return err
			}
			if b, err = c.measure(cmp.B, bPids, c.wrkSample(bURL, script, expect)); err != nil {
				return err
			}
			dirty := a.OtherPct > c.f.dirtyPct || b.OtherPct > c.f.dirtyPct
			if dirty && attempt < c.f.redo {
				b.Note = "other load: round redone"
			}
			printRound(c.log, r, a, b)
			printPerProc(c.log, a)
			printPerProc(c.log, b)
			if !dirty || attempt == c.f.redo {
				cmp.Dirty = append(cmp.Dirty, dirty)
				break
			}
		}
		cmp.Rounds = append(cmp.Rounds, [2]Sample{a, b})
	}
	return nil
}

// soldOutScript writes wrk's script of sold-out purchase attempts.
func (c *comparer) soldOutScript() (string, error) {
	script := filepath.Join(c.dir, "soldout.lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.headers[\"Authorization\"] = \"Bearer %s\"\nwrk.body = '%s'\n",
		c.users.Session(2), c.soldOutBody())
	return script, os.WriteFile(script, []byte(lua), 0o644)
}

func (c *comparer) soldout(cmp *Comparison) error {
	script, err := c.soldOutScript()
	if err != nil {
		return err
	}
	if err := c.wrkPairAt(cmp, "/api/seckill/do", script, 410, c.env.EdgeAddr, c.bareAdr, c.barePids); err != nil {
		return err
	}
	if c.or != nil {
		// For the record: the OpenResty pattern's own sold-out answer.
		s, err := c.measure("openresty", c.orPids, c.wrkSample("http://"+c.orAddr+"/api/seckill/do", script, 410))
		if err == nil {
			s.Note = "for reference: the OpenResty pattern's lua_shared_dict sold-out answer"
			printRound(c.log, 0, s, Sample{})
		}
	}
	return nil
}

// attempts: every request is a fresh shopper with a fresh token on a
// product with stock to spare, so every attempt deducts. flashgate and the
// OpenResty pattern get the same requests from bench's closed-loop
// generator; redis-benchmark calls the same script on the same Redis.
func (c *comparer) attempts(ctx context.Context, skip map[string]string, done func(r, o *Comparison)) error {
	var tr, to = compareTargets[1], compareTargets[2]
	cr := &Comparison{Name: tr.name, What: tr.what, A: tr.a, B: tr.b, Goal: tr.goal, Skipped: skip[tr.name]}
	co := &Comparison{Name: to.name, What: to.what, A: to.a, B: to.b, Goal: to.goal, Skipped: skip[to.name]}
	done(cr, co)
	c.target = "attempts"
	fmt.Fprintf(c.log, "\n-- attempts: every request a fresh shopper and token, stock to spare: every attempt deducts (bench closed loop, %d connections; redis-benchmark -c %d)\n",
		c.f.attemptConns, c.f.rbClients)
	gen := func(addr, product string, d time.Duration) func() (Sample, float64, error) {
		// Enough for the fastest rate seen so far (or 30k/s), capped.
		rate := 30000.0
		for _, r := range c.attemptRate {
			rate = max(rate, r)
		}
		reqs := c.prepare(product, min(int(1.5*rate*d.Seconds()), 1_000_000))
		return func() (Sample, float64, error) {
			self0 := cpuTicks(os.Getpid())
			s := c.attemptLoad(ctx, addr, product, reqs, d)
			return s, float64(cpuTicks(os.Getpid())-self0) / clkTck, nil
		}
	}
	// Warm-up.
	gen(c.env.EdgeAddr, "pa", c.f.warmup)()
	if c.or != nil {
		gen(c.orAddr, "or", c.f.warmup)()
	}
	if c.env.PprofAddr != "" {
		// A profile in a round of its own, not counted: profiling costs
		// the edge a few per cent.
		c.profiled[c.target] = false
		c.measure("flashgate", c.edgePids, gen(c.env.EdgeAddr, "pa", c.f.duration))
	}
	printRoundHeader(c.log)
	for r := 1; r <= c.f.rounds; r++ {
		var a, b, rb Sample
		for attempt := 0; attempt <= c.f.redo; attempt++ {
			var err error
			if a, err = c.measure("flashgate", c.edgePids, gen(c.env.EdgeAddr, "pa", c.f.duration)); err != nil {
				return err
			}
			printRound(c.log, r, a, Sample{})
			printPerProc(c.log, a)
			dirty := a.OtherPct > c.f.dirtyPct
			if co.Skipped == "" {
				if b, err = c.measure("openresty", c.orPids, gen(c.orAddr, "or", c.f.duration)); err != nil {
					return err
				}
				printRound(c.log, r, b, Sample{})
				printPerProc(c.log, b)
				dirty = dirty || b.OtherPct > c.f.dirtyPct
			}
			if cr.Skipped == "" {
				if rb, err = c.measure("redis-benchmark", func() []int { return []int{c.env.Redis.Pid()} }, c.redisBenchmark); err != nil {
					return err
				}
				printRound(c.log, r, rb, Sample{})
				dirty = dirty || rb.OtherPct > c.f.dirtyPct
			}
			c.trimPeerKeys()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !dirty || attempt == c.f.redo {
				co.Dirty = append(co.Dirty, dirty)
				cr.Dirty = append(cr.Dirty, dirty)
				break
			}
			c.logf("   (other load above %.0f%% of a CPU: round redone)", c.f.dirtyPct)
		}
		if co.Skipped == "" {
			co.Rounds = append(co.Rounds, [2]Sample{a, b})
		}
		if cr.Skipped == "" {
			cr.Rounds = append(cr.Rounds, [2]Sample{a, rb})
		}
	}
	for _, cmp := range []*Comparison{cr, co} {
		if cmp.Skipped == "" {
			cmp.finish()
		}
	}
	return nil
}

// trimPeerKeys drops the outbox streams the peers filled (nobody relays
// them), so every round starts alike.
func (c *comparer) trimPeerKeys() {
	rc, err := dialRedis(c.env.RedisAddr)
	if err != nil {
		return
	}
	defer rc.Close()
	rc.Do("DEL", stock.OutboxKey("or"), stock.OutboxKey(rbProduct))
}

// attemptReq is one prepared purchase: a fresh shopper's session and a
// fresh token. Preparing them before the clock starts keeps the signing
// (two HMACs, ~3 µs) off the generator's CPU while it measures.
type attemptReq struct {
	auth string
	body []byte
}

func (c *comparer) prepare(product string, n int) []attemptReq {
	out := make([]attemptReq, n)
	var wg sync.WaitGroup
	parts := max(1, runtime.GOMAXPROCS(0))
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := p; k < n; k += parts {
				out[k] = c.attemptFor(product)
			}
		}()
	}
	wg.Wait()
	return out
}

func (c *comparer) attemptFor(product string) attemptReq {
	i := int(c.next.Add(1))
	user := c.users.ID(i)
	tok := c.users.Token(nil, user, product, 10*time.Minute)
	body := make([]byte, 0, 100)
	body = append(body, `{"productId":"`...)
	body = append(body, product...)
	body = append(body, `","token":"`...)
	body = append(body, tok...)
	body = append(body, `","quantity":1}`...)
	return attemptReq{auth: "Bearer " + c.users.SignFresh(i), body: body}
}

// attemptLoad runs the closed-loop purchase generator for d against addr,
// with requests prepared beforehand (sized from the rate seen last).
func (c *comparer) attemptLoad(ctx context.Context, addr, product string, reqs []attemptReq, d time.Duration) Sample {
	conns := c.f.attemptConns
	var taken atomic.Int64
	var extra atomic.Int64
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: conns, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, NoDefaultUserAgentHeader: true}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	hist := newHist(3)
	codes := map[string]int64{}
	var errs int64
	var wg sync.WaitGroup
	t0 := time.Now()
	end := t0.Add(d)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var req fasthttp.Request
			var resp fasthttp.Response
			h := newHist(3)
			my := map[string]int64{}
			var myErr int64
			uri := []byte("http://" + addr + "/api/seckill/do")
			for time.Now().Before(end) && ctx.Err() == nil {
				var a attemptReq
				if k := taken.Add(1) - 1; k < int64(len(reqs)) {
					a = reqs[k]
				} else {
					a = c.attemptFor(product)
					extra.Add(1)
				}
				req.Reset()
				req.SetRequestURIBytes(uri)
				req.Header.SetMethod("POST")
				req.Header.SetContentType("application/json")
				req.Header.Set("Authorization", a.auth)
				req.SetBodyRaw(a.body)
				s := time.Now()
				err := hc.DoTimeout(&req, &resp, 10*time.Second)
				h.RecordValue(max(1, time.Since(s).Microseconds()))
				switch {
				case err != nil:
					myErr++
					my[errorCode(err)]++
				case resp.StatusCode() == 200:
					my["OK"]++
				default:
					my[orDefault(jsonStr(resp.Body(), "code"), httpCodeName(resp.StatusCode()))]++
				}
			}
			mu.Lock()
			hist.Merge(h)
			for k, v := range my {
				codes[k] += v
			}
			errs += myErr
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	s := Sample{Tool: fmt.Sprintf("bench closed loop, %d connections", conns), Requests: hist.TotalCount(), Codes: codes}
	// Purchases made per second: a 503 or any other refusal is not one.
	s.RPS = float64(codes["OK"]) / el
	s.P50, s.P99 = float64(hist.ValueAtQuantile(50))/1000, float64(hist.ValueAtQuantile(99))/1000
	s.Errors = s.Requests - codes["OK"] // every attempt should deduct
	if x := extra.Load(); x > 0 {
		s.Note = fmt.Sprintf("%d requests signed during the measurement (prepared %d); ", x, len(reqs))
	}
	if s.Errors > 0 {
		s.Note += "answers: " + codesString(codes)
	}
	c.attemptRate[addr] = s.RPS
	return s
}

// redisBenchmark is orders/stock/testdata/redis-benchmark.sh's call, on the run's
// Redis: EVALSHA deduct.lua with one attempt of a random shopper, order
// and token per call, stock to spare.
func (c *comparer) redisBenchmark() (Sample, float64, error) {
	host, port, _ := strings.Cut(c.env.RedisAddr, ":")
	// Size -n for about the measurement time at the rate seen last.
	n := int(c.rbRate * c.f.duration.Seconds())
	if n <= 0 {
		n = 200000
	}
	keys, argv := redisBenchmarkCall()
	args := []string{"-h", host, "-p", port, "-n", strconv.Itoa(n), "-c", strconv.Itoa(c.f.rbClients), "-r", "100000000", "-q",
		"EVALSHA", c.sha, strconv.Itoa(len(keys))}
	args = append(append(args, keys...), argv...)
	bin := toolPath(toolRedisBench)
	if cpu := c.env.cpu(0); cpu >= 0 {
		args = append([]string{"-c", strconv.Itoa(cpu), bin}, args...)
		bin = "taskset"
	}
	if c.f.pin {
		// Redis's ceiling: a CPU of its own (the servers' CPU, idle now),
		// redis-benchmark on the other one. It floats again afterwards.
		setAffinity(c.env.Redis.Pid(), 1)
		defer setAffinity(c.env.Redis.Pid(), -1)
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	var toolCPU float64
	if cmd.ProcessState != nil {
		toolCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return Sample{}, toolCPU, fmt.Errorf("redis-benchmark: %v: %s", err, out)
	}
	rps, p50, err := parseRedisBenchmark(string(out))
	if err != nil {
		return Sample{}, toolCPU, err
	}
	c.rbRate = rps
	return Sample{Tool: fmt.Sprintf("redis-benchmark -c %d -n %d EVALSHA", c.f.rbClients, n), Requests: int64(n), RPS: rps, P50: p50}, toolCPU, nil
}

func (cmp *Comparison) finish() {
	cmp.Ratios, cmp.CPURatios = nil, nil
	var clean, cleanCPU []float64
	for i, r := range cmp.Rounds {
		dirty := i < len(cmp.Dirty) && cmp.Dirty[i]
		if r[1].RPS > 0 {
			cmp.Ratios = append(cmp.Ratios, r[0].RPS/r[1].RPS)
			if !dirty {
				clean = append(clean, r[0].RPS/r[1].RPS)
			}
		}
		if r[1].CPUPerReq > 0 {
			cmp.CPURatios = append(cmp.CPURatios, r[0].CPUPerReq/r[1].CPUPerReq)
			if !dirty {
				cleanCPU = append(cleanCPU, r[0].CPUPerReq/r[1].CPUPerReq)
			}
		}
	}
	if len(clean) == 0 {
		clean, cleanCPU = cmp.Ratios, cmp.CPURatios
	}
	cmp.Median, cmp.CPUMedian = median(clean), median(cleanCPU)
	cmp.Met = len(clean) > 0 && cmp.Median >= cmp.Goal
}

// medianRPS is the median requests/s of side k over the rounds the ratio
// median uses.
func (cmp *Comparison) medianRPS(k int) float64 {
	var all, clean []float64
	for i, r := range cmp.Rounds {
		all = append(all, r[k].RPS)
		if !(i < len(cmp.Dirty) && cmp.Dirty[i]) {
			clean = append(clean, r[k].RPS)
		}
	}
	if len(clean) == 0 {
		return median(all)
	}
	return median(clean)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printRoundHeader(w io.Writer) {
	fmt.Fprintf(w, "%-6s %-16s %12s %9s %9s %7s %9s %9s %7s %7s  %s\n", "round", "server", "requests/s", "p50 ms", "p99 ms", "cpu%", "cpu-us/r", "sys-us/r", "other%", "errors", "note")
}

func printRound(w io.Writer, r int, a, b Sample) {
	for _, s := range []Sample{a, b} {
		if s.Server == "" {
			continue
		}
		rs := strconv.Itoa(r)
		if r == 0 {
			rs = "-"
		}
		fmt.Fprintf(w, "%-6s %-16s %12.0f %9.3f %9.3f %7.1f %9.2f %9.2f %7.1f %7d  %s\n", rs, s.Server, s.RPS, s.P50, s.P99, s.CPUPct, s.CPUPerReq, s.SysPerReq, s.OtherPct, s.Errors, s.Note)
	}
}

func printCompare(w io.Writer, res *CompareResult) {
	fmt.Fprintf(w, "\n== bench compare: %s, %s, %s, commit %s, %s\n", res.Machine, res.Started.Format("2006-01-02 15:04 UTC"), res.GoVersion, res.Commit, res.Nginx)
	for _, s := range res.Setup {
		fmt.Fprintln(w, "   "+s)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tflashgate req/s\tpeer\tpeer req/s\tratio (median)\tper round\tgoal\tverdict\tCPU/req ratio")
	for _, cmp := range res.Comparisons {
		if cmp.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t%s\t-\t-\t-\t>= %g\tSKIPPED\t-\n", cmp.Name, cmp.B, cmp.Goal)
			continue
		}
		var rounds []string
		for i := range cmp.Rounds {
			if i < len(cmp.Ratios) {
				x := fmt.Sprintf("%.2f", cmp.Ratios[i])
				if i < len(cmp.Dirty) && cmp.Dirty[i] {
					x = "(" + x + ")"
				}
				rounds = append(rounds, x)
			}
		}
		verdict, goal := "met", fmt.Sprintf(">= %g", cmp.Goal)
		if !cmp.Met {
			verdict = "MISSED"
		}
		if cmp.Goal == 0 {
			verdict, goal = "A/B", "-" // ab-*: B/A, no goal
		}
		cpu := "-"
		if cmp.CPUMedian > 0 {
			cpu = fmt.Sprintf("%.2f", cmp.CPUMedian)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.0f\t%.2f\t%s\t%s\t%s\t%s\n", cmp.Name, cmp.medianRPS(0), cmp.B, cmp.medianRPS(1), cmp.Median,
			strings.Join(rounds, " "), goal, verdict, cpu)
	}
	tw.Flush()
	for _, cmp := range res.Comparisons {
		if cmp.Skipped != "" {
			fmt.Fprintf(w, "skipped %s: %s\n", cmp.Name, cmp.Skipped)
		}
	}
	printCPUTable(w, res.CPUPerPurchase)
	fmt.Fprintln(w, "(requests/s: medians over rounds; ratio: flashgate/peer per round, median of the clean ones; (x): a round with other load above -dirty-pct, left out; CPU/req: the server processes' CPU per request, flashgate/peer, lower is better; the burst P999 target comes from `bench run -s burst`)")
	fmt.Fprintln(w)
	if res.Reconcile.Text != "" {
		fmt.Fprint(w, res.Reconcile.Text)
	}
	if res.Reconcile.Err != "" {
		fmt.Fprintln(w, "reconcile:", res.Reconcile.Err)
	}
}

// compareResultLine is the last line of `bench compare`: the figures of
// flashgate's purchase attempts (bench's closed loop) and reconcile.
func compareResultLine(res *CompareResult) string {
	var s Sample
	for _, cmp := range res.Comparisons {
		if strings.HasPrefix(cmp.Name, "attempts") && len(cmp.Rounds) > 0 {
			s = cmp.Rounds[len(cmp.Rounds)-1][0]
			break
		}
	}
	rc := res.Reconcile
	return fmt.Sprintf("RESULT scenario=compare rps=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=NA errors=%d oversold=%d lost=%d duplicated=%d",
		s.RPS, s.P50, s.P99, s.Errors, rc.Oversold, rc.Lost, rc.Duplicated)
}

func codesString(m map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// printPerProc shows where the CPU of one request went, per process.
func printPerProc(w io.Writer, s Sample) {
	if len(s.PerProc) == 0 {
		return
	}
	names := make([]string, 0, len(s.PerProc))
	for k := range s.PerProc {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return s.PerProc[names[i]] > s.PerProc[names[j]] })
	var parts []string
	for _, n := range names {
		if s.PerProc[n] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, s.PerProc[n]))
		}
	}
	fmt.Fprintf(w, "       CPU µs per request by process: %s; the load generator %.1f; all CPUs %.0f %% busy\n", strings.Join(parts, ", "), s.GenPerReq, s.MachinePct)
	if len(s.RedisPerReq) > 0 {
		names = names[:0]
		for k := range s.RedisPerReq {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool { return s.RedisPerReq[names[i]] > s.RedisPerReq[names[j]] })
		parts = parts[:0]
		for _, n := range names {
			if s.RedisPerReq[n] >= 0.005 {
				parts = append(parts, fmt.Sprintf("%s %.3f", n, s.RedisPerReq[n]))
			}
		}
		fmt.Fprintf(w, "       Redis commands per request (calls inside scripts included): %s\n", strings.Join(parts, ", "))
	}
}

// rbProduct is the product redis-benchmark's calls buy (stock to spare).
const rbProduct = "b"

// redisBenchmarkCall is deduct.lua's call for redis-benchmark, from
// stock.DeductCall: one attempt of a random shopper, order and token per
// call (redis-benchmark replaces each __rand_int__ with a random number).
func redisBenchmarkCall() (keys, args []string) {
	return stock.DeductCall(rbProduct, "604800000", "604800000", "1", stock.ScriptAttempt{
		User: "user__rand_int__", Qty: "1", Limit: "1000000", OrderID: "__rand_int__", PriceCents: "1999",
		NowMs: "1700000000000", TokenTTLMs: "600000", Node: "1", PayByMs: "0", TokenNonce: "__rand_int__"})
}

// openrestyDeductCall is the OpenResty peer's deduct.lua call after the
// SHA: numkeys, KEYS and ARGV as Lua expressions over the handler's locals
// and cfg, from stock.DeductCall with @lua@ placeholders.
func openrestyDeductCall() string {
	keys, args := stock.DeductCall("@product@", "@cfg.grace_ms@", "@cfg.order_ttl_ms@", "1", stock.ScriptAttempt{
		User: "@user@", Qty: "@qty@", Limit: "@cfg.limit@", OrderID: "@oid@", PriceCents: "@cfg.price@",
		NowMs: "@now_ms@", TokenTTLMs: "@cfg.token_ttl_ms@", Node: "@cfg.node@", PayByMs: "0", TokenNonce: "@token@"})
	parts := []string{strconv.Itoa(len(keys))}
	for _, v := range append(keys, args...) {
		parts = append(parts, luaExpr(v))
	}
	return strings.Join(parts, ", ")
}

// luaExpr writes s as a Lua expression: its text quoted, each @name@ in it
// the Lua expression name, joined with "..".
func luaExpr(s string) string {
	var out []string
	for i, piece := range strings.Split(s, "@") {
		switch {
		case i%2 == 1:
			out = append(out, piece)
		case piece != "":
			out = append(out, strconv.Quote(piece))
		}
	}
	return strings.Join(out, " .. ")
}
