package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/orders/stock"
)

// The soak (`bench run -s soak -duration 30m`): the nemesis fleet and its
// sale mix, no faults, for a long time at a steady pace, sampling what
// could grow without bound — each edge's RSS, goroutines and open file
// descriptors, Redis' memory per live order (over the first sample's), the outboxes' length,
// ClickHouse's active parts — every Soak.Sample. A resource is flat when,
// after the warm-up (the first half of the run), the straight line fitted
// through its samples grows by no more than its bound over the second
// half. The sale never runs out: the stock and the limit are far above
// what the shoppers buy. At the end the checker and `proxy reconcile` run
// over the whole history, as after a schedule.

// Soak is the soak scenario's section (the fleet's shape is its nemesis
// section, with no faults).
type Soak struct {
	Duration time.Duration `yaml:"duration"` // the load (-duration); default 30m
	Sample   time.Duration `yaml:"sample"`   // between samples; default 10s
}

func (sc *Scenario) validateSoak(errs *field.Errors) {
	s := sc.Soak
	if s == nil {
		return
	}
	if s.Duration == 0 {
		s.Duration = 30 * time.Minute
	}
	if s.Sample == 0 {
		s.Sample = 10 * time.Second
	}
	if s.Duration < time.Minute || s.Duration > 24*time.Hour {
		errs.Add("soak.duration", "must be 1m..24h")
	}
	if s.Sample < time.Second || s.Sample > s.Duration/6 {
		errs.Add("soak.sample", "must be 1s..duration/6 (at least 3 samples after the warm-up)")
	}
	if sc.Nemesis == nil {
		errs.Add("soak", "needs a nemesis: section (the fleet and the sale mix)")
	}
}

// SoakSample is one sample of the fleet.
type SoakSample struct {
	T          float64      `json:"t_s"` // since the load started
	Edges      []EdgeSample `json:"edges"`
	RedisBytes int64        `json:"redis_used_memory"` // the masters' used_memory, summed
	// RedisPerOrder is (RedisBytes - the first sample's) / LiveOrders:
	// what the orders cost, without the empty servers' own memory.
	RedisPerOrder float64       `json:"redis_bytes_per_live_order"`
	LiveOrders    int64         `json:"redis_live_orders"` // orders Redis holds (every product)
	Outbox        int64         `json:"outbox_entries"`    // every product's outbox, summed
	CHParts       int64         `json:"clickhouse_parts"`  // active parts of the orders database
	Errs          []string      `json:"errors,omitempty"`  // what could not be read
	Purchases     map[int]int64 `json:"-"`
}

// EdgeSample is one edge's resources (-1: could not be read).
type EdgeSample struct {
	RSSMB      float64 `json:"rss_mb"`
	Goroutines float64 `json:"goroutines"`
	FDs        float64 `json:"open_fds"`
}

// Flatness is one resource's verdict.
type Flatness struct {
	Name   string  `json:"name"`
	Unit   string  `json:"unit"`
	First  float64 `json:"after_warmup"` // the fit's value at the warm-up's end
	Last   float64 `json:"at_end"`       // the fit's value at the end
	Growth float64 `json:"growth"`       // Last - First
	Bound  float64 `json:"bound"`        // the growth allowed
	Max    float64 `json:"max"`
	Flat   bool    `json:"flat"`
}

// SoakResult is the soak's report.
type SoakResult struct {
	Scenario  string           `json:"scenario"`
	Started   time.Time        `json:"started"`
	Commit    string           `json:"commit"`
	Machine   string           `json:"machine"`
	Duration  float64          `json:"duration_s"`
	Ops       int              `json:"ops"`
	Samples   []SoakSample     `json:"samples"`
	Flatness  []Flatness       `json:"flatness"`
	Verdict   *Verdict         `json:"verdict"`
	Reconcile Reconciled       `json:"reconcile"`
	Answers   map[string]int64 `json:"answers"`
}

// resource is one sampled series and its bound: growth over the second
// half at most rel x its mean there plus abs.
type resource struct {
	name, unit string
	rel, abs   float64
	value      func(SoakSample) (float64, bool)
}

func soakResources(edges int) []resource {
	var out []resource
	for i := range edges {
		out = append(out,
			resource{fmt.Sprintf("edge%d RSS", i+1), "MB", 0.10, 4, func(s SoakSample) (float64, bool) {
				return edgeVal(s, i, func(e EdgeSample) float64 { return e.RSSMB })
			}},
			resource{fmt.Sprintf("edge%d goroutines", i+1), "", 0.10, 20, func(s SoakSample) (float64, bool) {
				return edgeVal(s, i, func(e EdgeSample) float64 { return e.Goroutines })
			}},
			resource{fmt.Sprintf("edge%d open fds", i+1), "", 0.10, 10, func(s SoakSample) (float64, bool) { return edgeVal(s, i, func(e EdgeSample) float64 { return e.FDs }) }},
		)
	}
	out = append(out,
		resource{"Redis memory per live order", "bytes", 0.15, 0, func(s SoakSample) (float64, bool) {
			return s.RedisPerOrder, s.LiveOrders > 0 && s.RedisBytes > 0
		}},
		resource{"outbox entries", "", 0, 50, func(s SoakSample) (float64, bool) { return float64(s.Outbox), s.Outbox >= 0 }},
		resource{"ClickHouse active parts", "", 0, 30, func(s SoakSample) (float64, bool) { return float64(s.CHParts), s.CHParts >= 0 }},
	)
	return out
}

func edgeVal(s SoakSample, i int, f func(EdgeSample) float64) (float64, bool) {
	if i >= len(s.Edges) {
		return 0, false
	}
	v := f(s.Edges[i])
	return v, v >= 0
}

// flatness fits a line through the samples after the warm-up (the first
// half of the run) and compares its rise over that span with the bound.
// Falling is flat: only growth counts.
func flatness(r resource, samples []SoakSample, total float64) Flatness {
	fl := Flatness{Name: r.name, Unit: r.unit}
	var xs, ys []float64
	for _, s := range samples {
		if v, ok := r.value(s); ok {
			fl.Max = math.Max(fl.Max, v)
			if s.T >= total/2 {
				xs, ys = append(xs, s.T), append(ys, v)
			}
		}
	}
	if len(xs) < 3 {
		return fl // too few samples: not flat (not shown to be)
	}
	slope, icept := fitLine(xs, ys)
	fl.First, fl.Last = icept+slope*xs[0], icept+slope*xs[len(xs)-1]
	fl.Growth = fl.Last - fl.First
	mean := 0.0
	for _, y := range ys {
		mean += y
	}
	mean /= float64(len(ys))
	fl.Bound = r.rel*mean + r.abs
	fl.Flat = fl.Growth <= fl.Bound
	return fl
}

// fitLine is the least-squares line y = slope*x + icept.
func fitLine(xs, ys []float64) (slope, icept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, sy / n
	}
	slope = (n*sxy - sx*sy) / d
	return slope, (sy - slope*sx) / n
}

// cmdSoak runs the soak.
func cmdSoak(ctx context.Context, root string, sc *Scenario, f runFlags, stdout, stderr io.Writer) int {
	s := sc.Soak
	if f.duration > 0 {
		s.Duration = f.duration
		var errs field.Errors
		sc.validateSoak(&errs)
		if len(errs) > 0 {
			fmt.Fprintln(stderr, "bench run: -duration:", errs)
			return 2
		}
	}
	if f.target != "" || f.pin || f.pprof || f.kafka != "bench" || f.schedules != 0 || f.kinds != "" || f.plan || f.seeds != "" {
		fmt.Fprintln(stderr, "bench run: the soak starts its own fleet and draws no faults: no -target, -pin, -pprof, -kafka edge, -schedules, -kinds, -plan or -seeds")
		return 2
	}
	dir, progress, bins, cleanup, ok := fleetRunDir(root, "the soak", sc, f, stderr)
	if !ok {
		return 1
	}
	defer cleanup()
	res := &SoakResult{Scenario: sc.Name, Started: time.Now().UTC(), Commit: proxyCommit(root, f.proxyRev), Machine: machineInfo()}
	logf := func(format string, args ...any) { fmt.Fprintf(progress, "bench: [soak] "+format+"\n", args...) }
	if err := runSoak(ctx, sc, f, bins, filepath.Join(dir, "soak"), res, logf, progress); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	out := outDir(root, f, sc, res.Started)
	if err := writeSoak(out, res); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
	} else {
		fmt.Fprintf(stdout, "report: %s\n", filepath.Join(out, "report.html"))
	}
	printSoak(stdout, res)
	fmt.Fprintln(stdout, res.resultLine())
	if !res.passed() {
		return 1
	}
	return 0
}

func runSoak(ctx context.Context, sc *Scenario, f runFlags, bins map[string]string, dir string, res *SoakResult, logf func(string, ...any), progress io.Writer) error {
	n, s := sc.Nemesis, sc.Soak
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fl, err := startNemFleet(ctx, sc, f, bins, dir, progress, nil, s.Duration+time.Hour)
	if fl != nil {
		defer fl.close()
	}
	if err != nil {
		return err
	}
	products := fl.products
	start := time.Now().Add(200 * time.Millisecond)
	for i := range products {
		products[i].OpenMs = fl.saleStart.Sub(start).Milliseconds()
	}
	load := newNemLoad(start, fl.set.Addrs, fl.set.Admins, fl.users, products)
	logf("fleet ready: %d edges, Redis Cluster 3+3, %d brokers, ClickHouse; %d shoppers for %v, a sample every %v", n.Edges, n.Brokers, n.Shoppers, s.Duration, s.Sample)
	lctx, stopLoad := context.WithDeadline(ctx, start.Add(s.Duration))
	defer stopLoad()
	var wg sync.WaitGroup
	for i := range n.Shoppers {
		sh := &shopper{l: load, id: i, edge: i % n.Edges, rnd: rand.New(rand.NewPCG(uint64(i), 0x736f616b)), tickets: map[int]roomPass{}}
		for j := range 6 {
			sh.users = append(sh.users, i*6+j)
		}
		wg.Go(func() {
			pause(lctx, time.Until(start))
			sh.run(lctx)
		})
	}
	db := conf.Defaults().ClickHouse.Database
	for i := 0; ; i++ {
		if !pause(lctx, time.Until(start.Add(time.Duration(i)*s.Sample))) {
			break
		}
		smp := sampleFleet(fl, products, db)
		smp.T = time.Since(start).Seconds()
		if len(res.Samples) > 0 && smp.LiveOrders > 0 {
			smp.RedisPerOrder = float64(smp.RedisBytes-res.Samples[0].RedisBytes) / float64(smp.LiveOrders)
		}
		res.Samples = append(res.Samples, smp)
		e0 := smp.Edges[0]
		logf("%4.0fs: edge1 rss %.0f MB, %0.f goroutines, %.0f fds; Redis %.0f B/order (%d orders); outbox %d; ClickHouse parts %d; %d ops",
			smp.T, e0.RSSMB, e0.Goroutines, e0.FDs, smp.RedisPerOrder, smp.LiveOrders, smp.Outbox, smp.CHParts, len(load.History()))
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	res.Duration = s.Duration.Seconds()
	for _, r := range soakResources(n.Edges) {
		res.Flatness = append(res.Flatness, flatness(r, res.Samples, res.Duration))
	}

	// The promises, as after a schedule.
	loadEnd := time.Since(start).Milliseconds()
	logf("load over, %d ops; draining (at most %v)", len(load.History()), n.Drain)
	var stalled []string
	if err := awaitQuiet(ctx, fl.set.Admins, n.Drain); err != nil {
		stalled = append(stalled, err.Error())
	}
	pause(ctx, n.PayTimeout+2*time.Second)
	load.resolve(ctx, func(int) bool { return true })
	h := &History{Seed: 0, Edges: n.Edges, Products: products, LoadEndMs: loadEnd, Stalled: stalled}
	h.Ops = load.History()
	readFacts(ctx, h, fl.env, fl.cluster.MasterOf, products)
	res.Verdict = Check(h)
	res.Ops = len(h.Ops)
	res.Reconcile = proxyReconcile(ctx, fl.env.bins["proxy"], fl.set.ConsumerConfig)
	CompareReconcile(res.Verdict, res.Reconcile, time.Since(start).Milliseconds())
	res.Answers = map[string]int64{}
	for k, c := range res.Verdict.Answers {
		if strings.HasPrefix(k, opDo+" ") || strings.HasPrefix(k, opPay+" ") || strings.HasPrefix(k, opWebhook+" ") {
			res.Answers[k] += c
		}
	}
	return nil
}

// sampleFleet reads every figure once; what cannot be read is -1 and
// named in Errs.
func sampleFleet(fl *nemFleet, products []ProductSpec, db string) SoakSample {
	var s SoakSample
	bad := func(what string, err error) { s.Errs = append(s.Errs, what+": "+err.Error()) }
	for i, p := range fl.set.Procs {
		e := EdgeSample{RSSMB: -1, Goroutines: -1, FDs: -1}
		if ok, _ := p.Exited(); !ok {
			if kb, err := procRSSKB(p.Pid()); err == nil {
				e.RSSMB = float64(kb) / 1024
			} else {
				bad(fmt.Sprintf("edge%d rss", i+1), err)
			}
			if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid())); err == nil {
				e.FDs = float64(len(fds))
			} else {
				bad(fmt.Sprintf("edge%d fds", i+1), err)
			}
			if v, ok := metricValue(metricsText(fl.set.Admins[i]), "go_goroutines"); ok {
				e.Goroutines = v
			}
		}
		s.Edges = append(s.Edges, e)
	}
	s.RedisBytes, s.LiveOrders, s.Outbox = -1, -1, -1
	if err := redisFigures(fl.cluster.MasterOf, products, &s); err != nil {
		bad("redis", err)
	}
	s.CHParts = -1
	q := "SELECT count() FROM system.parts WHERE active AND database = '" + db + "' FORMAT TabSeparated"
	if b, err := chQuery(fl.env.chHTTP(), q); err != nil {
		bad("clickhouse parts", err)
	} else if v, err := strconv.ParseInt(strings.TrimSpace(b), 10, 64); err == nil {
		s.CHParts = v
	}
	return s
}

func procRSSKB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func chQuery(httpAddr, q string) (string, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+httpAddr+"/?query="+url.QueryEscape(q), "text/plain", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("%d %s", resp.StatusCode, firstLines(string(b), 1))
	}
	return string(b), nil
}

// redisFigures sums the masters' used_memory, counts the orders Redis
// holds (one key each, or fields of the bucket hashes) and the outboxes'
// entries. The key names come from orders/stock.
func redisFigures(masterOf func(string) string, products []ProductSpec, s *SoakSample) error {
	masters := map[string]bool{}
	var mem, orders, outbox int64
	for _, p := range products {
		m := masterOf(stock.StockKey(p.ID))
		rc, err := dialRedis(m)
		if err != nil {
			return err
		}
		err = func() error {
			defer rc.Close()
			if !masters[m] {
				masters[m] = true
				v, err := rc.Do("INFO", "memory")
				if err != nil {
					return err
				}
				used, _ := strconv.ParseInt(infoValue(respString(v), "used_memory"), 10, 64)
				mem += used
			}
			v, err := rc.Do("XLEN", stock.OutboxKey(p.ID))
			if err != nil {
				return err
			}
			x, _ := v.(int64)
			outbox += x
			// sk:{p}:o:<id> keys and sk:{p}:ob:<bucket> hashes.
			one := strings.TrimSuffix(stock.OrderKey(p.ID, 0), "0")
			n, err := scanCount(rc, one+"*", nil)
			if err != nil {
				return err
			}
			orders += n
			bucket := strings.TrimSuffix(stock.OrderBucketKey(p.ID, 0), "0")
			n, err = scanCount(rc, bucket+"*", func(k string) int64 {
				v, err := rc.Do("HLEN", k)
				if err != nil {
					return 0
				}
				x, _ := v.(int64)
				return x
			})
			orders += n
			return err
		}()
		if err != nil {
			return err
		}
	}
	s.RedisBytes, s.LiveOrders, s.Outbox = mem, orders, outbox
	return nil
}

// scanCount SCANs the keys matching pattern and sums each's weight (1
// without one).
func scanCount(rc *redisConn, pattern string, weight func(string) int64) (int64, error) {
	var n int64
	cursor := "0"
	for {
		v, err := rc.Do("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
		if err != nil {
			return n, err
		}
		arr, ok := v.([]any)
		if !ok || len(arr) != 2 {
			return n, fmt.Errorf("SCAN: unexpected reply %v", v)
		}
		cursor = respString(arr[0])
		keys, _ := arr[1].([]any)
		for _, k := range keys {
			if weight == nil {
				n++
			} else {
				n += weight(respString(k))
			}
		}
		if cursor == "0" {
			return n, nil
		}
	}
}

func respString(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

func infoValue(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return rest
		}
	}
	return ""
}

func (r *SoakResult) passed() bool {
	if r.Verdict == nil || len(r.Verdict.Violations) > 0 {
		return false
	}
	for _, f := range r.Flatness {
		if !f.Flat {
			return false
		}
	}
	return true
}

func (r *SoakResult) resultLine() string {
	notFlat := []string{}
	for _, f := range r.Flatness {
		if !f.Flat {
			notFlat = append(notFlat, strings.ReplaceAll(f.Name, " ", "_"))
		}
	}
	v := 0
	var oversold, lost, dup int64
	if r.Verdict != nil {
		v, oversold, lost, dup = len(r.Verdict.Violations), r.Verdict.Oversold, r.Verdict.Lost, r.Verdict.Duplicated
	}
	nf := "none"
	if len(notFlat) > 0 {
		nf = strings.Join(notFlat, ",")
	}
	return fmt.Sprintf("RESULT scenario=soak duration_s=%.0f samples=%d ops=%d flat=%v not_flat=%s violations=%d oversold=%d lost=%d duplicated=%d",
		r.Duration, len(r.Samples), r.Ops, len(notFlat) == 0, nf, v, oversold, lost, dup)
}

func printSoak(w io.Writer, r *SoakResult) {
	fmt.Fprintf(w, "\nsoak: %.0f s, %d samples, %d ops; a resource is flat when its fitted growth over the second half stays within its bound\n", r.Duration, len(r.Samples), r.Ops)
	fmt.Fprintf(w, "  %-30s %12s %12s %10s %10s %10s  %s\n", "resource", "after warm-up", "at end", "growth", "bound", "max", "flat")
	for _, f := range r.Flatness {
		fmt.Fprintf(w, "  %-30s %12.1f %12.1f %10.1f %10.1f %10.1f  %v\n", f.Name+unitSuffix(f.Unit), f.First, f.Last, f.Growth, f.Bound, f.Max, f.Flat)
	}
	if v := r.Verdict; v != nil {
		fmt.Fprintf(w, "checker: %d violations; reconcile clean=%v\n", len(v.Violations), r.Reconcile.Clean)
		for i, x := range v.Violations {
			if i == 20 {
				fmt.Fprintf(w, "  … %d more\n", len(v.Violations)-20)
				break
			}
			fmt.Fprintf(w, "  %-22s at %6.1fs %s %s %s: %s\n", x.Kind, float64(x.AtMs)/1000, x.Product, x.User, x.OrderID, x.Detail)
		}
	}
	fmt.Fprintln(w, "answers by code (do, pay, webhook):")
	for _, k := range sortedKeys(r.Answers) {
		fmt.Fprintf(w, "  %-32s %d\n", k, r.Answers[k])
	}
}

func unitSuffix(u string) string {
	if u == "" {
		return ""
	}
	return " (" + u + ")"
}

func writeSoak(dir string, r *SoakResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), []byte(soakHTML(r)), 0o644)
}
