package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/redistest"
)

func TestFleetScenarioFileAndDefaults(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := loadScenario(resolveScenario(root, "fleet"), nil)
	if err != nil {
		t.Fatal(err)
	}
	fl := sc.Fleet
	if fl == nil || len(fl.Edges) != 3 || fl.Edges[0] != 1 || fl.Edges[2] != 3 || fl.SoldOutFor != 5*time.Second {
		t.Fatalf("fleet section %+v, want edges [1 2 3], sold out for 5s", fl)
	}
	if sc.Mode != "closed" || len(sc.Steps) != 1 || sc.Steps[0].Call != "do" || sc.Products*sc.Stock < 20000 {
		t.Errorf("fleet scenario: mode %s, steps %+v, %d × %d units (want a closed loop of do, enough stock for seconds of purchases)",
			sc.Mode, sc.Steps, sc.Products, sc.Stock)
	}
	sc, err = parseScenario([]byte("mode: closed\nusers: 100\nproducts: 2\nstock: 10\nsteps:\n  - call: do\nfleet: {}\n"), "x.yaml",
		[]string{"fleet.sold_out_for=2s"})
	if err != nil {
		t.Fatal(err)
	}
	if fl := sc.Fleet; len(fl.Edges) != 3 || fl.SoldOutFor != 2*time.Second || fl.Settle != time.Minute {
		t.Errorf("defaults %+v, want edges [1 2 3], the -set sold_out_for 2s, settle 1m", fl)
	}
}

func TestFleetScenarioErrors(t *testing.T) {
	base := "mode: closed\nusers: 1000\nproducts: 2\nstock: 10\nsteps:\n  - call: do\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"no edges", base + "fleet:\n  edges: [0]\n", []string{"fleet.edges[0]", "1..8", "not 0"}},
		{"too many edges", base + "fleet:\n  edges: [1, 9]\n", []string{"fleet.edges[1]", "not 9"}},
		{"too many points", base + "fleet:\n  edges: [1, 1, 1, 1, 1, 1, 1, 1, 1]\n", []string{"fleet.edges", "at most 8 points"}},
		{"negative sold-out phase", base + "fleet:\n  sold_out_for: -1s\n", []string{"fleet.sold_out_for"}},
		{"with failover", strings.Replace(base, "mode: closed", "mode: closed\nduration: 10s", 1) + "failover:\n  at: 1s\nfleet: {}\n", []string{"fleet", "not with failover"}},
		{"with faults", base + "faults:\n  origin:\n    latency: 1ms\nfleet: {}\n", []string{"faults", "not with fleet"}},
		{"other steps", strings.Replace(base, "call: do", "call: token\n  - call: do", 1) + "fleet: {}\n", []string{"steps", "[{call: do}]"}},
		{"too few shoppers", strings.Replace(base, "users: 1000", "users: 15", 1) + "fleet: {}\n", []string{"users", "at least products × stock / quantity (20)"}},
		{"too many shoppers", strings.Replace(base, "users: 1000", "users: 600000", 1) + "fleet: {}\n", []string{"users", "at most 500000"}},
		{"unknown key", base + "fleet:\n  edge: [1]\n", []string{"fleet.edge", "unknown key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseScenario([]byte(tc.yaml), "x.yaml", nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseEdgeList(t *testing.T) {
	got, err := parseEdgeList(" 1, 2,3,1")
	if err != nil || len(got) != 4 || got[0] != 1 || got[1] != 2 || got[2] != 3 || got[3] != 1 {
		t.Fatalf("%v %v, want [1 2 3 1] (a point may repeat, to see drift)", got, err)
	}
	for _, bad := range []string{"", "a", "0", "9", "1,,2", "1;2", "1,2,3,4,5,6,7,8,1"} {
		if _, err := parseEdgeList(bad); err == nil || !strings.Contains(err.Error(), "-edges") {
			t.Errorf("-edges %q: %v, want an error naming -edges", bad, err)
		}
	}
}

func TestFleetTargets(t *testing.T) {
	fl := &Fleet{Edges: []int{1, 2, 3}}
	if ts, err := fleetTargets(runFlags{}, fl); ts != nil || err != nil {
		t.Errorf("no -target: %v %v, want bench to start the edges", ts, err)
	}
	ts, err := fleetTargets(runFlags{target: "10.0.0.1:8080, 10.0.0.2:8080", admin: "10.0.0.9:9090"}, fl)
	if err != nil || len(ts) != 2 || ts[1] != "10.0.0.2:8080" {
		t.Errorf("two targets: %v %v", ts, err)
	}
	if _, err := fleetTargets(runFlags{target: "a:1,b:2", edges: "3"}, &Fleet{Edges: []int{3}}); err == nil || !strings.Contains(err.Error(), "-edges") {
		t.Errorf("-edges 3 with two targets: %v", err)
	}
	if _, err := fleetTargets(runFlags{target: "a:1,b:2", edges: "2"}, &Fleet{Edges: []int{2}}); err != nil {
		t.Errorf("-edges 2 with two targets: %v", err)
	}
	if _, err := fleetTargets(runFlags{target: "a:1,", admin: ""}, fl); err == nil || !strings.Contains(err.Error(), "empty address") {
		t.Errorf("trailing comma: %v", err)
	}
	if _, err := fleetTargets(runFlags{target: "a:1", admin: "x:1,y:2"}, fl); err == nil || !strings.Contains(err.Error(), "-admin") {
		t.Errorf("two admins: %v", err)
	}
}

// TestEdgesFlagOutsideTheFleetIsRefused: -edges with another scenario is a
// usage error before anything starts.
func TestEdgesFlagOutsideTheFleetIsRefused(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"run", "-s", "normal", "-edges", "2"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "-edges is for a scenario with a fleet") {
		t.Errorf("exit %d, stderr %q", code, errs.String())
	}
	errs.Reset()
	if code := run([]string{"run", "-s", "fleet", "-edges", "1,x"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), `"x" is not a number of edges`) {
		t.Errorf("exit %d, stderr %q", code, errs.String())
	}
}

// fleetRun is a phase's booked run as recordLoad and the watches leave it.
func fleetRun(seconds float64, ok, soldOut, other int64, edgesCPU, redisCPU float64) *Result {
	return &Result{Seconds: seconds, MachineBusyPct: 190,
		Endpoints: []EndpointResult{{Name: "do", Stats: Stats{Count: ok + soldOut + other, P50: 1, P99: 9},
			Codes: map[string]int64{"OK": ok, "SOLD_OUT": soldOut, "DEGRADED": other}}},
		Processes:   []ProcStat{{Name: watchEdges, CPUSeconds: edgesCPU}, {Name: "edge1", CPUSeconds: edgesCPU}, {Name: watchRedis, CPUSeconds: redisCPU}, {Name: watchBench, CPUSeconds: 1}},
		EdgeMetrics: map[string]float64{`flashgate_redis_script_calls_total{what="calls"}`: 100, `flashgate_redis_script_calls_total{what="attempts"}`: 450},
		Sales:       []ProductSale{{Product: "p1", Stock: 100, Orders: ok, Units: ok}},
	}
}

func TestFleetFiguresAndRatios(t *testing.T) {
	ph := fleetFigures("purchase", fleetRun(5, 40000, 1000, 50, 2.0525, 1.02625), []ProcStat{{Name: watchEdges, CPUPct: 95}, {Name: watchRedis, CPUPct: 40}})
	if ph.PerSecond != 8000 || ph.Requests != 41050 || ph.Other != 50 || ph.SoldOut != 1000 || ph.AttemptsPerCall != 4.5 || ph.EdgesPct != 95 || ph.RedisPct != 40 || ph.cpuPcts() != "95/40/0/190" {
		t.Errorf("purchase figures %+v", ph)
	}
	if d := ph.EdgesPer1k - 0.05; d > 1e-9 || d < -1e-9 {
		t.Errorf("edges CPU per 1,000 requests %v, want 2.0525 s / 41,050 × 1,000 = 0.05 (the group, not edge1 again)", ph.EdgesPer1k)
	}
	if d := ph.RedisPer1k - 0.025; d > 1e-9 || d < -1e-9 {
		t.Errorf("redis CPU per 1,000 %v, want 0.025", ph.RedisPer1k)
	}
	so := fleetFigures("soldout", fleetRun(2, 0, 60000, 0, 3, 0.06), nil)
	if so.PerSecond != 30000 || so.EdgesPer1k != 0.05 {
		t.Errorf("sold-out figures %+v, want 30,000 410s/s", so)
	}
	if z := fleetFigures("purchase", &Result{}, nil); z.PerSecond != 0 || z.EdgesPer1k != 0 {
		t.Errorf("an empty run: %+v, want zeros, not NaN", z)
	}

	point := func(n int, buy, sold float64, clean bool) FleetPoint {
		p := FleetPoint{Edges: n, Purchase: fleetFigures("purchase", fleetRun(5, int64(buy*5), 10, 0, 0.002*(buy*5+10), 1), nil),
			Reconcile: Reconciled{Ran: true, Products: 10, Clean: clean}}
		if sold > 0 {
			s := fleetFigures("soldout", fleetRun(2, 0, int64(sold*2), 0, 0.0005*sold*2, 0.1), nil)
			p.SoldOut = &s
		}
		return p
	}
	r := &FleetResult{Scenario: "fleet", Config: &Scenario{Fleet: &Fleet{SoldOutFor: 5 * time.Second}, Steps: []Step{{Call: "do"}}},
		Points: []FleetPoint{point(2, 9000, 45000, true), point(1, 10000, 50000, true), point(3, 8000, 40000, true)}}
	r.Caveat = fleetCaveat(2, false)
	r.finish()
	if r.Base != 1 {
		t.Fatalf("base point %d, want the one edge (index 1)", r.Base)
	}
	for i, want := range []FleetRatio{{0.9, 0.9, 1, 1}, {1, 1, 1, 1}, {0.8, 0.8, 1, 1}} {
		got := r.Points[i].Ratio
		near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
		if !near(got.Purchases, want.Purchases) || !near(got.SoldOut, want.SoldOut) || !near(got.PurchaseEdges, 1) || !near(got.SoldOutEdges, 1) {
			t.Errorf("point %d ratios %+v, want %+v", i, got, want)
		}
	}
	if want := "RESULT scenario=fleet edges=2,1,3 purchases_per_s=9000,10000,8000 soldout_per_s=45000,50000,40000 purchases_ratio=0.90,1.00,0.80 soldout_ratio=0.90,1.00,0.80 oversold=0,0,0 lost=0,0,0 duplicated=0,0,0"; r.ResultLine != want {
		t.Errorf("result line\n%s\nwant\n%s", r.ResultLine, want)
	}
	if !r.Passed() {
		t.Error("three clean points did not pass")
	}
	var out bytes.Buffer
	printFleet(&out, r)
	text := out.String()
	for _, want := range []string{"200/s", "410/s", "vs 1", "edges cpu-s/1k", "redis cpu-s/1k", "reconcile, 3 edge(s): clean", "not the fleet's capacity", "-target host1:port,host2:port", "one machine, 2 CPUs"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if lines := strings.Split(strings.TrimSpace(text), "\n"); lines[len(lines)-1] != r.ResultLine {
		t.Errorf("last line %q, want the RESULT line", lines[len(lines)-1])
	}

	// A point that never sold out has no sold-out figures and no ratio
	// for them; a dirty reconcile or a sale over stock fails the run.
	r.Points = append(r.Points, point(2, 5000, 0, true))
	r.finish()
	if p := r.Points[3]; p.SoldOut != nil || p.Ratio.SoldOut != 0 || p.Ratio.Purchases != 0.5 {
		t.Errorf("unsold point %+v", p.Ratio)
	}
	out.Reset()
	printFleet(&out, r)
	if !strings.Contains(r.ResultLine, "soldout_per_s=45000,50000,40000,0") {
		t.Error(r.ResultLine)
	}
	r.Points[0].Reconcile.Clean = false
	if r.Passed() {
		t.Error("a point with a dirty reconcile passed")
	}
	r.Points[0].Reconcile.Clean = true
	r.Points[2].Purchase.Run.Sales[0].OverStock = 1
	if r.Passed() {
		t.Error("a sale over stock passed")
	}
	r.Points[2].Purchase.Run.Sales[0].OverStock = 0
	if r.Err = "the point of 3 edge(s): redis-server exited"; r.Passed() {
		t.Error("a run with a point that failed passed")
	}
	if (&FleetResult{}).Passed() {
		t.Error("a run without points passed")
	}
}

func TestSoldOutSeenCallsDoneOnce(t *testing.T) {
	var calls atomic.Int64
	s := newSoldOutSeen(3, func() { calls.Add(1) })
	s.observe(0, 200, "")
	s.observe(0, 410, "SOLD_OUT")
	s.observe(0, 410, "SOLD_OUT")
	s.observe(1, 410, "SALE_ENDED")
	s.observe(1, 503, "DEGRADED")
	s.observe(7, 410, "SOLD_OUT")
	s.observe(2, 410, "SOLD_OUT")
	if s.all() || calls.Load() != 0 {
		t.Fatalf("p2 has not answered SOLD_OUT: all %v, done %d times", s.all(), calls.Load())
	}
	s.observe(1, 410, "SOLD_OUT")
	s.observe(1, 410, "SOLD_OUT")
	if !s.all() || calls.Load() != 1 {
		t.Fatalf("all %v, done %d times, want once", s.all(), calls.Load())
	}
}

func TestInfoPid(t *testing.T) {
	pid, err := infoPid("# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\ntcp_port:6379\r\n")
	if err != nil || pid != 4242 {
		t.Errorf("%d %v", pid, err)
	}
	if _, err := infoPid("# Server\r\n"); err == nil {
		t.Error("no error without process_id")
	}
}

// TestRedisPidOfARealServer: the pid bench watches for a Redis node is the
// redis-server process itself (its /proc/PID/stat names it).
func TestRedisPidOfARealServer(t *testing.T) {
	pid, err := redisPid(redistest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil || !strings.Contains(string(stat), "(redis-server)") {
		t.Fatalf("pid %d: %q %v, want redis-server's stat", pid, stat, err)
	}
}

// standInEdge answers POST /api/seckill/do as the edge's sale API does —
// 200 with an order id while the product has stock, then 410 SOLD_OUT —
// on a loopback port. The real fleet (cluster, edges) is the bench run
// itself, tens of seconds; this checks bench's own phase logic in
// milliseconds: the load spread over the edges, the switch at sold out,
// the figures.
type standInEdge struct {
	ln   net.Listener
	hits atomic.Int64
}

func startStandInEdges(t *testing.T, n int, stock map[string]int) []*standInEdge {
	var mu sync.Mutex
	var edges []*standInEdge
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		e := &standInEdge{ln: ln}
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			e.hits.Add(1)
			product := jsonStr(ctx.PostBody(), "productId")
			mu.Lock()
			left := stock[product]
			if left > 0 {
				stock[product] = left - 1
			}
			mu.Unlock()
			ctx.SetContentType("application/json")
			if left > 0 {
				ctx.SetBodyString(`{"orderId":"o1","status":"pending"}`)
				return
			}
			ctx.SetStatusCode(410)
			ctx.SetBodyString(`{"code":"SOLD_OUT"}`)
		}}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Shutdown() })
		edges = append(edges, e)
	}
	return edges
}

func TestFleetPhasesAgainstStandInEdges(t *testing.T) {
	stock := map[string]int{"p1": 60, "p2": 60}
	edges := startStandInEdges(t, 3, stock)
	sc, err := parseScenario([]byte("mode: closed\nconnections: 6\nduration: 20s\ndrain: 1s\nusers: 500\nproducts: 2\nstock: 60\nsteps:\n  - call: do\nfleet:\n  sold_out_for: 200ms\n"), "fleet-unit.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	users, err := newUsers(sc.Users, benchSessionSecret, benchTokenSecret)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, e := range edges {
		addrs = append(addrs, e.ln.Addr().String())
	}
	tgt := &fleetTarget{addrs: addrs, watches: fleetWatches(nil, nil, nil, nil)}
	pt, err := tgt.measure(context.Background(), sc, runFlags{}, len(addrs), users, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	buy := pt.Purchase
	if buy.OK != 120 || buy.Other != 0 {
		t.Errorf("purchase phase: %d answered 200, %d other; want the stock, 120, and nothing else", buy.OK, buy.Other)
	}
	if buy.Seconds >= sc.Duration.Seconds() {
		t.Errorf("the purchase phase ran %.1fs, its whole duration: it should end once both products answered SOLD_OUT", buy.Seconds)
	}
	if pt.SoldOut == nil {
		t.Fatalf("no sold-out phase; notes %v", pt.Notes)
	}
	if so := pt.SoldOut; so.OK != 0 || so.SoldOut == 0 || so.SoldOut != so.Requests || so.PerSecond <= 0 {
		t.Errorf("sold-out phase %+v: want only 410s", so)
	}
	for i, e := range edges {
		if e.hits.Load() == 0 {
			t.Errorf("stand-in edge %d got no request: the load is not spread", i)
		}
	}
	if ps := pt.Purchase.Run.Processes; len(ps) != 1 || ps[0].Name != watchBench {
		t.Errorf("watched %+v, want bench alone (no edges or Redis of its own)", ps)
	}
	t.Logf("purchase %.2fs %d requests, sold out %.2fs %d requests", buy.Seconds, buy.Requests, pt.SoldOut.Seconds, pt.SoldOut.Requests)
}
