package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/internal/chtest"
	"flashgate/internal/yamlmerge"
)

// EnvOptions say what a run starts.
type EnvOptions struct {
	Root       string // module root
	Dir        string // run directory: configs, logs, data
	GoMaxProcs int    // the edge's GOMAXPROCS (0: the Go default)
	Pin        bool   // the servers under test on ServerCPU, load and infrastructure on LoadCPU / InfraCPU
	ServerCPU  int    // with Pin: the edge and its peers (default 1)
	LoadCPU    int    // with Pin: load generators and the origin (default 0)
	InfraCPU   int    // with Pin: Redis, Kafka, a separate order consumer (-1: not pinned)
	Consumer   string // "edge": the order consumer runs in the edge; "separate": in a second cmd/proxy
	Kafka      string // "bench": a kfake process bench starts; "edge": embedded in the edge
	ClickHouse bool   // a clickhouse-server as the order store (else the edge's embedded one)
	ProxyBin   string // a prebuilt cmd/proxy; "" builds one
	ProxyRev   string // build cmd/proxy from this git revision (git archive), not the working tree
	Pprof      bool   // run the edge with -pprof: a profiler listener at PprofAddr
	Quiet      io.Writer
}

// Env is everything one run started.
type Env struct {
	opt   EnvOptions
	procs *Procs

	Redis, Kafka, Origin, Edge *Proc
	Orders                     *Proc  // the separate order consumer (a second cmd/proxy), if any
	RedisAddr, Brokers         string // Brokers: comma-separated
	KafkaControl               string // StartKafkaCluster's control listener
	OriginAddr                 string
	EdgeAddr, AdminAddr        string
	OrdersAdmin                string // admin listener of the process holding the order store
	EdgeConfig, OrdersConfig   string
	PprofAddr                  string
	ch                         *chtest.Server
	chc                        *chtest.Cluster // -clickhouse cluster: the order store instead of ch
	Delays                     []*DelayProxy
	bins                       map[string]string
}

func (e *Env) cpu(which int) int {
	if !e.opt.Pin {
		return -1
	}
	return which
}

func newEnv(opt EnvOptions) *Env {
	if opt.Quiet == nil {
		opt.Quiet = io.Discard
	}
	if opt.Consumer == "" {
		opt.Consumer = "edge"
	}
	return &Env{opt: opt, procs: newProcs(opt.Dir), bins: map[string]string{}}
}

// Close stops everything, last started first. It may be called again.
func (e *Env) Close() {
	e.procs.StopAll()
	for _, d := range e.Delays {
		d.Close()
	}
	e.Delays = nil
	if e.ch != nil {
		e.ch.Close()
		e.ch = nil
	}
	if e.chc != nil {
		e.chc.Close()
		e.chc = nil
	}
}

func (e *Env) logf(format string, args ...any) { fmt.Fprintf(e.opt.Quiet, format+"\n", args...) }

// build compiles the Go programs a run needs into the run directory.
func (e *Env) build(pkgs ...string) error {
	var todo []string
	for _, p := range pkgs {
		name := filepath.Base(p)
		if name == "proxy" && e.opt.ProxyBin != "" {
			e.bins[name] = e.opt.ProxyBin
			continue
		}
		if name == "proxy" && e.opt.ProxyRev != "" {
			if _, ok := e.bins[name]; !ok {
				if err := e.buildRev(e.opt.ProxyRev); err != nil {
					return err
				}
			}
			continue
		}
		if _, ok := e.bins[name]; !ok {
			todo = append(todo, p)
			e.bins[name] = filepath.Join(e.opt.Dir, "bin", name)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	t0 := time.Now()
	args := append([]string{"build", "-o", filepath.Join(e.opt.Dir, "bin") + "/"}, todo...)
	cmd := exec.Command("go", args...)
	cmd.Dir = e.opt.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(todo, " "), err, out)
	}
	e.logf("built %s in %.1fs", strings.Join(todo, " "), time.Since(t0).Seconds())
	return nil
}

// buildRev builds cmd/proxy from a git revision: others may be half-way
// through edits in the working tree.
func (e *Env) buildRev(rev string) error {
	src := filepath.Join(e.opt.Dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	cmd := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", e.opt.Root, rev, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", rev, err, out)
	}
	bin := filepath.Join(e.opt.Dir, "bin", "proxy")
	cmd = exec.Command("go", "build", "-o", bin, "./cmd/proxy")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/proxy at %s: %v\n%s", rev, err, out)
	}
	e.bins["proxy"] = bin
	e.logf("built ./cmd/proxy from %s", rev)
	return nil
}

// StartRedis starts redis-server (Debian) on a free port, no persistence.
func (e *Env) StartRedis(ctx context.Context) error {
	if err := need("the run's Redis", toolRedis); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(e.opt.Dir, "redis")
	os.MkdirAll(dir, 0o755)
	e.RedisAddr = "127.0.0.1:" + strconv.Itoa(port)
	e.Redis, err = e.procs.Start("redis", e.cpu(e.opt.InfraCPU), nil, toolPath(toolRedis),
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no")
	if err != nil {
		return err
	}
	return waitFor(ctx, e.Redis, "redis-server", 10*time.Second, func() error {
		rc, err := dialRedis(e.RedisAddr)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = rc.Do("PING")
		return err
	})
}

// StartKafka starts kfake as a child process (this binary, `bench kfake`).
func (e *Env) StartKafka(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	e.Brokers = "127.0.0.1:" + strconv.Itoa(port)
	e.Kafka, err = e.procs.Start("kafka", e.cpu(e.opt.InfraCPU), []string{"GOMAXPROCS=1"}, self, "kfake", "-port", strconv.Itoa(port))
	if err != nil {
		return err
	}
	return waitFor(ctx, e.Kafka, "kfake", 15*time.Second, tcpReady(e.Brokers))
}

// StartKafkaCluster starts n kfake brokers in one child process (`bench
// kfake -ports …`), with a control listener at KafkaControl that takes one
// broker away and brings it back (POST /stop?node=N, /start?node=N).
func (e *Env) StartKafkaCluster(ctx context.Context, n int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var ports []string
	var addrs []string
	for range n {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports = append(ports, strconv.Itoa(p))
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	if e.KafkaControl, err = freeAddr(); err != nil {
		return err
	}
	e.Brokers = strings.Join(addrs, ",")
	e.Kafka, err = e.procs.Start("kafka", e.cpu(e.opt.InfraCPU), []string{"GOMAXPROCS=1"}, self, "kfake",
		"-ports", strings.Join(ports, ","), "-control", e.KafkaControl)
	if err != nil {
		return err
	}
	return waitFor(ctx, e.Kafka, "kfake", 15*time.Second, func() error {
		for _, a := range append(addrs, e.KafkaControl) {
			if err := tcpReady(a)(); err != nil {
				return err
			}
		}
		return nil
	})
}

// StartClickHouse starts clickhouse-server (Debian) as the order store.
func (e *Env) StartClickHouse() error {
	if err := need("-clickhouse", toolClickHouse); err != nil {
		return err
	}
	dir := filepath.Join(e.opt.Dir, "clickhouse")
	os.MkdirAll(dir, 0o755)
	var err error
	e.ch, err = chtest.Launch(dir)
	return err
}

// StartClickHouseCluster starts a ClickHouse cluster of shards shards of
// one server each and a ZooKeeper (chtest.LaunchCluster, as the e2e
// cluster tests) as the order store: the edges write through its
// Distributed table (clickhouse.cluster).
func (e *Env) StartClickHouseCluster(shards int) error {
	if err := need("-clickhouse cluster", toolClickHouse); err != nil {
		return err
	}
	dir := filepath.Join(e.opt.Dir, "clickhouse-cluster")
	os.MkdirAll(dir, 0o755)
	var err error
	e.chc, err = chtest.LaunchCluster(dir, chtest.ClusterSpec{Shards: shards})
	return err
}

// chHTTP is the HTTP address of a ClickHouse server holding the orders
// table: the one server, or the first member of the cluster (its
// seckill_order is the Distributed table over every shard).
func (e *Env) chHTTP() string {
	if e.chc != nil {
		return e.chc.Node(0).HTTPAddr()
	}
	return e.ch.HTTPAddr()
}

// StartOrigin starts bench/origin, the stand-in for the origin pools.
func (e *Env) StartOrigin(ctx context.Context) error {
	if err := e.build("./bench/origin"); err != nil {
		return err
	}
	var err error
	if e.OriginAddr, err = freeAddr(); err != nil {
		return err
	}
	e.Origin, err = e.procs.Start("origin", e.cpu(e.opt.LoadCPU), []string{"GOMAXPROCS=1"}, e.bins["origin"], "-addr", e.OriginAddr)
	if err != nil {
		return err
	}
	return waitFor(ctx, e.Origin, "bench origin", 10*time.Second, tcpReady(e.OriginAddr))
}

// EdgeSpec is what the edge config is made of.
type EdgeSpec struct {
	RedisAddr  string // maybe a delay proxy
	OriginAddr string // maybe a delay proxy
	Products   []Activity
	ScopeAll   bool           // ip_limit and conn_limit on every request (the nginx comparison)
	Extra      map[string]any // merged last (a scenario's edge:)
	EdgeArgs   [][]string     // edge i's command-line arguments after -c FILE (StartEdgesWith), e.g. the test-only -test-redis-dial
}

// Activity is one sale in the edge config.
type Activity struct {
	ID         string
	Stock      int
	Limit      int
	Price      string
	Start, End time.Time
	// WaitingRoom is the sale's waiting_room: section (nil: none).
	WaitingRoom map[string]any
	// PayTimeout is the sale's pay_timeout (0: the config's default).
	PayTimeout time.Duration
}

// edgeBase is the edge bench runs: loopback listeners, the whole sale
// chain as edge.yaml ships it, limits high enough that a load from one
// address is never rate limited (as in e2e), fixed secrets bench shares.
// edgeTokenTTL is edgeBase's sale.token_ttl: tokens bench mints itself
// (the "do" step without a "token" step) live as long as the edge's.
const edgeTokenTTL = 10 * time.Minute

const edgeBase = `
node_id: 1
listen:
  shutdown_timeout: 5s
  max_conns_per_ip: 0
log:
  level: warn
  format: text
  access_sample: 0
reload:
  watch: false
filters:
  - type: access
    scope: all
    rules: ["allow all"]
  - type: ip_limit
    rate: 1000000r/s
    burst: 1000000
    nodelay: true
  - type: conn_limit
    max: 1000000
  - type: sale_window
  - type: sold_out
  - type: session
  - type: user_limit
    limits:
      - rate: 100000r/s
        burst: 100000
        nodelay: true
  - type: purchase_token
redis:
  timeout: 200ms
auth:
  demo_login: false
sale:
  token_ttl: 10m # edgeTokenTTL
  refresh_interval: 1s
orders:
  consumer: true
upstreams:
  pools:
    - name: origin
      balance: round_robin
      connect_timeout: 1s
      read_timeout: 1s
      write_timeout: 1s
      max_conns: 1024
      max_retries: 1
  routes:
    - prefix: /
      pool: origin
`

// WriteEdgeConfig renders the edge's config (and, with a separate order
// consumer, the consumer's) and checks it like `proxy -t`.
func (e *Env) WriteEdgeConfig(spec EdgeSpec) error {
	var err error
	separate := e.opt.Consumer == "separate"
	e.EdgeConfig, e.EdgeAddr, e.AdminAddr, err = e.writeConfig(spec, "edge", 1, !separate)
	if err != nil {
		return err
	}
	e.OrdersAdmin = e.AdminAddr
	if separate {
		var addr string
		e.OrdersConfig, addr, e.OrdersAdmin, err = e.writeConfig(spec, "orders", 2, true)
		_ = addr
	}
	return err
}

func (e *Env) writeConfig(spec EdgeSpec, name string, node int, consumer bool) (path, addr, admin string, err error) {
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(edgeBase), &doc); err != nil {
		return "", "", "", err
	}
	if addr, err = freeAddr(); err != nil {
		return
	}
	if admin, err = freeAddr(); err != nil {
		return
	}
	var acts []any
	for _, a := range spec.Products {
		act := map[string]any{
			"product_id": a.ID, "name": "Bench " + a.ID, "price": a.Price, "stock": a.Stock, "limit": a.Limit,
			"start": a.Start.UTC().Format(time.RFC3339Nano), "end": a.End.UTC().Format(time.RFC3339Nano),
		}
		if a.WaitingRoom != nil {
			act["waiting_room"] = a.WaitingRoom
		}
		if a.PayTimeout > 0 {
			act["pay_timeout"] = a.PayTimeout.String()
		}
		acts = append(acts, act)
	}
	set := map[string]any{
		"node_id":    node,
		"listen":     map[string]any{"addr": addr},
		"admin":      map[string]any{"addr": admin},
		"orders":     map[string]any{"consumer": consumer},
		"redis":      map[string]any{"addr": spec.RedisAddr},
		"auth":       map[string]any{"secrets": []any{benchSessionSecret}},
		"sale":       map[string]any{"token_secret": benchTokenSecret},
		"data_dir":   filepath.Join(e.opt.Dir, "data-"+name),
		"activities": acts,
	}
	if e.opt.Kafka == "bench" {
		var brokers []any
		for _, b := range strings.Split(e.Brokers, ",") {
			brokers = append(brokers, b)
		}
		set["kafka"] = map[string]any{"brokers": brokers}
	}
	if e.ch != nil {
		set["clickhouse"] = map[string]any{"addr": e.ch.Addr()}
	}
	if e.chc != nil {
		set["clickhouse"] = map[string]any{"addr": e.chc.Addr(), "cluster": e.chc.Name()}
	}
	yamlmerge.Into(doc, set)
	if spec.OriginAddr != "" {
		pools := doc["upstreams"].(map[string]any)["pools"].([]any)
		pools[0].(map[string]any)["servers"] = []any{spec.OriginAddr}
	}
	if spec.ScopeAll {
		for _, f := range doc["filters"].([]any) {
			m := f.(map[string]any)
			if m["type"] == "ip_limit" || m["type"] == "conn_limit" {
				m["scope"] = "all"
			}
		}
	}
	if spec.Extra != nil {
		yamlmerge.Into(doc, spec.Extra)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return
	}
	path = filepath.Join(e.opt.Dir, name+".yaml")
	if err = os.WriteFile(path, out, 0o644); err != nil {
		return
	}
	// The edge under test judges its own config, exactly as an operator's
	// `proxy -t` would: bench talks to the edge only as a client does.
	if err = e.build("./cmd/proxy"); err != nil {
		return
	}
	if msg, terr := exec.Command(e.bins["proxy"], "-t", "-c", path).CombinedOutput(); terr != nil {
		err = fmt.Errorf("the edge config bench wrote is invalid (check the scenario's edge: section):\n%s", msg)
	}
	return path, addr, admin, err
}

// StartEdge builds and starts cmd/proxy on the config, and waits until it
// is ready and its first sale answers.
func (e *Env) StartEdge(ctx context.Context, firstProduct string) error {
	if err := e.build("./cmd/proxy"); err != nil {
		return err
	}
	var env []string
	if e.opt.GoMaxProcs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(e.opt.GoMaxProcs))
	}
	var err error
	if e.OrdersConfig != "" {
		// The order consumer on its own: a second cmd/proxy with
		// orders.consumer true, whose listeners get no load.
		e.Orders, err = e.procs.Start("orders", e.cpu(e.opt.InfraCPU), []string{"GOMAXPROCS=1"}, e.bins["proxy"], "-c", e.OrdersConfig)
		if err != nil {
			return err
		}
		if err := e.waitEdge(ctx, e.Orders, e.OrdersAdmin, "", ""); err != nil {
			return err
		}
	}
	args := []string{"-c", e.EdgeConfig}
	if e.opt.Pprof {
		if e.PprofAddr, err = freeAddr(); err != nil {
			return err
		}
		args = append(args, "-pprof", e.PprofAddr, "-block-rate", "100000")
	}
	e.Edge, err = e.procs.Start("edge", e.cpu(e.opt.ServerCPU), env, e.bins["proxy"], args...)
	if err != nil {
		return err
	}
	return e.waitEdge(ctx, e.Edge, e.AdminAddr, e.EdgeAddr, firstProduct)
}

func (e *Env) waitEdge(ctx context.Context, p *Proc, admin, addr, firstProduct string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	return waitFor(ctx, p, p.Name+" (cmd/proxy)", 60*time.Second, func() error {
		r, err := c.Get("http://" + admin + "/readyz")
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			return fmt.Errorf("readyz %d", r.StatusCode)
		}
		if firstProduct == "" {
			return nil
		}
		r, err = c.Get("http://" + addr + "/api/seckill/status?productId=" + firstProduct)
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			return fmt.Errorf("status of %s: %d", firstProduct, r.StatusCode)
		}
		return nil
	})
}

// Reconciled is the reconcile verdict of a run.
type Reconciled struct {
	Ran        bool   `json:"ran"`
	Products   int    `json:"products"`
	Oversold   int64  `json:"oversold"`
	Lost       int64  `json:"lost"`
	Duplicated int64  `json:"duplicated"`
	Clean      bool   `json:"clean"`
	Text       string `json:"text"`
	Err        string `json:"error,omitempty"`
}

var reconcileLine = regexp.MustCompile(`RECONCILE products=(\d+) oversold=(\d+) lost=(\d+) duplicated=(\d+)`)

// reconcileVia asks an edge's GET /admin/reconcile (reconcile.Run against
// the run's Redis and the edge's order store, after the pipeline drained).
func reconcileVia(admin, token string) Reconciled {
	rec := Reconciled{Ran: true}
	req, _ := http.NewRequest("GET", "http://"+admin+"/admin/reconcile", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 120 * time.Second}).Do(req)
	if err != nil {
		rec.Err = fmt.Sprintf("GET /admin/reconcile: %v", err)
		return rec
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	rec.Text = string(b)
	m := reconcileLine.FindStringSubmatch(rec.Text)
	if m == nil {
		rec.Err = fmt.Sprintf("GET /admin/reconcile answered %d without a RECONCILE line", resp.StatusCode)
		return rec
	}
	rec.Products, _ = strconv.Atoi(m[1])
	rec.Oversold, _ = strconv.ParseInt(m[2], 10, 64)
	rec.Lost, _ = strconv.ParseInt(m[3], 10, 64)
	rec.Duplicated, _ = strconv.ParseInt(m[4], 10, 64)
	rec.Clean = resp.StatusCode == 200 && rec.Oversold == 0 && rec.Lost == 0 && rec.Duplicated == 0
	if resp.StatusCode != 200 {
		rec.Err = "reconcile reported a mismatch (409)"
		if i := strings.Index(rec.Text, "error: "); i >= 0 {
			rec.Err = strings.TrimSpace(rec.Text[i+7:])
		}
	}
	return rec
}

// edgeMetrics reads a few counters from the edge's /metrics.
func edgeMetrics(admin string) map[string]float64 {
	out := map[string]float64{}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + admin + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, want := range []string{"flashgate_redis_script_calls_total", "flashgate_sale_attempts_total", "flashgate_orders_", "flashgate_http_request_duration_seconds_bucket", "flashgate_http_request_duration_seconds_count"} {
			if strings.HasPrefix(line, want) {
				k, v, ok := strings.Cut(line, " ")
				if !ok {
					continue
				}
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err == nil {
					out[k] = f
				}
			}
		}
	}
	return out
}

// probe checks a target answers at all, for a clear message when not.
func probe(addr string) error {
	c := &http.Client{Timeout: 3 * time.Second}
	r, err := c.Get("http://" + addr + "/")
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap()
		}
		return fmt.Errorf("target %s is not reachable: %v (is the edge running there? leave -target out to let bench start one)", addr, err)
	}
	r.Body.Close()
	return nil
}

// RouteLatency is the edge's own view of a route during the load: time
// from request read to response written (its histogram, so quantiles are
// bucket bounds). The difference to bench's figures is time spent before
// the edge read the request (queues, the scheduler) and on the wire.
type RouteLatency struct {
	Route string  `json:"route"`
	Count int64   `json:"count"`
	P50   float64 `json:"p50_le_ms"`
	P99   float64 `json:"p99_le_ms"`
	P999  float64 `json:"p999_le_ms"`
}

var bucketLine = regexp.MustCompile(`^flashgate_http_request_duration_seconds_bucket\{route="([^"]+)",le="([^"]+)"\}$`)

// serverLatency turns the delta of the edge's latency histograms into
// per-route quantile bounds.
func serverLatency(delta map[string]float64) []RouteLatency {
	type bucket struct{ le, cum float64 }
	routes := map[string][]bucket{}
	for k, v := range delta {
		m := bucketLine.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		le := math.Inf(1)
		if m[2] != "+Inf" {
			le, _ = strconv.ParseFloat(m[2], 64)
		}
		routes[m[1]] = append(routes[m[1]], bucket{le, v})
	}
	var out []RouteLatency
	for r, bs := range routes {
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		total := bs[len(bs)-1].cum
		if total <= 0 {
			continue
		}
		q := func(p float64) float64 {
			for _, b := range bs {
				if b.cum >= p*total {
					if math.IsInf(b.le, 1) {
						return -1 // beyond the largest bucket
					}
					return b.le * 1000
				}
			}
			return -1
		}
		out = append(out, RouteLatency{Route: r, Count: int64(total), P50: q(0.5), P99: q(0.99), P999: q(0.999)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Route < out[j].Route })
	return out
}
