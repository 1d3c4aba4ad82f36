package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestScenarioFilesAreValid(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	names := listScenarios(root)
	for _, want := range []string{"normal", "burst", "oversell", "fault", "failover"} {
		if !contains(names, want) {
			t.Errorf("bench/scenarios/%s.yaml missing (have %v)", want, names)
		}
	}
	for _, n := range names {
		sc, err := loadScenario(resolveScenario(root, n), nil)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if sc.Name != n {
			t.Errorf("%s: name %q", n, sc.Name)
		}
	}
}

func TestScenarioErrors(t *testing.T) {
	base := "mode: open\nrate: 10\nduration: 1s\nsteps:\n  - call: page\n"
	for _, tc := range []struct {
		name, yaml string
		sets       []string
		want       []string // substrings of the error
	}{
		{"unknown top-level key", base + "rat: 5\n", nil, []string{"rat", "unknown key", `did you mean "rate"`, "line 6"}},
		{"unknown nested key", base + "faults:\n  redis:\n    latenc: 1ms\n", nil, []string{"faults.redis.latenc", "unknown key"}},
		{"unknown step key", "mode: open\nrate: 1\nduration: 1s\nsteps:\n  - call: page\n    thnk: 1s\n", nil, []string{"steps[0].thnk", "unknown key"}},
		{"unknown call", "mode: open\nrate: 1\nduration: 1s\nsteps:\n  - call: buy\n", nil, []string{"steps[0].call", `unknown call "buy"`}},
		{"bad type", base + "connections: many\n", nil, []string{"connections", `cannot use "many" as int`}},
		{"bad mode", strings.Replace(base, "open", "half", 1), nil, []string{"mode", "open or closed"}},
		{"open without rate", "mode: open\nduration: 1s\nsteps:\n  - call: page\n", nil, []string{"rate", "burst"}},
		{"quantity over limit", base + "limit: 1\nquantity: 2\n", nil, []string{"quantity"}},
		{"until on the wrong call", "mode: open\nrate: 1\nduration: 1s\nsteps:\n  - call: token\n    until: done\n", nil, []string{"steps[0].until"}},
		{"stall without period", base + "faults:\n  redis:\n    stall_for: 1s\n", nil, []string{"faults.redis", "stall_every"}},
		{"unknown -set key", base, []string{"ratee=5"}, []string{"-set ratee=5", "ratee", "unknown key"}},
		{"-set without =", base, []string{"rate"}, []string{"key=value"}},
		{"unbounded duration", strings.Replace(base, "duration: 1s", "duration: 2h", 1), nil, []string{"duration", "at most 1h"}},
		{"hot share of 1", base + "hot: 1\n", nil, []string{"hot", "[0, 1)"}},
		{"failover after the load", base + "failover:\n  at: 5s\n", nil, []string{"failover.at", "within the load"}},
		{"failover on too many edges", base + "failover:\n  at: 500ms\n  edges: 9\n", nil, []string{"failover.edges", "1..4"}},
		{"failover with a redis fault", base + "failover:\n  at: 500ms\nfaults:\n  redis:\n    latency: 1ms\n", nil, []string{"faults.redis", "not with failover"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseScenario([]byte(tc.yaml), "x.yaml", tc.sets)
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

func TestScenarioDefaultsAndOverrides(t *testing.T) {
	sc, err := parseScenario([]byte("mode: open\nrate: 10\nsteps:\n  - call: origin\n  - call: status\n    repeat: 3\n"), "dir/mine.yaml",
		[]string{"rate=250.5", "faults.redis.latency=2ms", "products=3", "steps=[{call: page}]"})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "mine" || sc.Rate != 250.5 || sc.Products != 3 || sc.Users != 1_000_000 || sc.Stock != 1000 {
		t.Errorf("scenario %+v", sc)
	}
	if sc.Faults.Redis == nil || sc.Faults.Redis.Latency != 2*time.Millisecond {
		t.Errorf("faults %+v", sc.Faults.Redis)
	}
	if len(sc.Steps) != 1 || sc.Steps[0].Call != "page" || sc.Steps[0].Repeat != 1 || sc.Steps[0].Every != time.Second || sc.Steps[0].Prob != 1 {
		t.Errorf("steps %+v", sc.Steps)
	}
	sc, err = parseScenario([]byte("mode: closed\nsteps:\n  - call: origin\n"), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Steps[0].Path != "/items/{product}" {
		t.Errorf("origin path default %q", sc.Steps[0].Path)
	}
}

func TestResolveScenario(t *testing.T) {
	if got := resolveScenario("/m", "burst"); got != "/m/bench/scenarios/burst.yaml" {
		t.Error(got)
	}
	if got := resolveScenario("/m", "x/y.yaml"); got != "x/y.yaml" {
		t.Error(got)
	}
	if _, err := loadScenario("/nonexistent/nope.yaml", nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Error(err)
	}
}

func TestPacerMath(t *testing.T) {
	p := NewPacer(1000, 0, 10*time.Second, time.Millisecond)
	if p.Total != 10000 || p.All() != 10000 || p.Tick != time.Millisecond || p.PerTick() != 1 {
		t.Errorf("%+v", p)
	}
	// Arrival j is due at j/rate, independent of when the generator wakes.
	if got := p.Intended(0); got != 0 {
		t.Error(got)
	}
	if got := p.Intended(2500); got != 2500*time.Millisecond {
		t.Error(got)
	}
	for _, tc := range []struct {
		el   time.Duration
		want int64
	}{{-time.Second, 0}, {0, 1}, {999 * time.Microsecond, 1}, {time.Millisecond, 2}, {time.Second, 1001}, {time.Hour, 10000}} {
		if got := p.Due(tc.el); got != tc.want {
			t.Errorf("Due(%v) = %d, want %d", tc.el, got, tc.want)
		}
	}
	// A slow rate gets a tick of one arrival; a fast one several per tick.
	if p := NewPacer(2, 0, time.Second, time.Millisecond); p.Tick != 500*time.Millisecond || p.Total != 2 {
		t.Errorf("%+v", p)
	}
	if p := NewPacer(100000, 0, time.Second, time.Millisecond); p.PerTick() != 100 {
		t.Errorf("per tick %v", p.PerTick())
	}
	// Bursts come first, all at the start.
	b := NewPacer(100, 50, time.Second, time.Millisecond)
	if b.All() != 150 || b.Intended(49) != 0 || b.Intended(50) != 0 || b.Intended(51) != 10*time.Millisecond || b.Due(0) != 51 {
		t.Errorf("burst %+v: %v %v %v", b, b.Intended(49), b.Intended(51), b.Due(0))
	}
	only := NewPacer(0, 7, 0, time.Millisecond)
	if only.All() != 7 || only.Due(time.Hour) != 7 {
		t.Errorf("burst only %+v", only)
	}
}

func TestPacerRunKeepsTheSchedule(t *testing.T) {
	p := NewPacer(2000, 10, 100*time.Millisecond, time.Millisecond)
	start := time.Now().Add(10 * time.Millisecond)
	var mu sync.Mutex
	var got []time.Time
	n := p.Run(context.Background(), start, func(j int64, intended time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if int64(len(got)) != j {
			t.Errorf("arrival %d out of order", j)
		}
		if want := start.Add(p.Intended(j)); !intended.Equal(want) {
			t.Errorf("arrival %d intended %v, want %v", j, intended, want)
		}
		if time.Now().Before(intended) {
			t.Errorf("arrival %d released before its time", j)
		}
		got = append(got, intended)
	})
	if n != p.All() || int64(len(got)) != p.All() {
		t.Fatalf("released %d of %d", n, p.All())
	}
	if el := time.Since(start); el < 99*time.Millisecond || el > 2*time.Second {
		t.Errorf("took %v", el)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n := NewPacer(10, 0, time.Hour, time.Millisecond).Run(ctx, time.Now(), func(int64, time.Time) {}); n > 1 {
		t.Errorf("cancelled run released %d", n)
	}
}

func TestRecorderAndReport(t *testing.T) {
	start := time.Now()
	r := newRecorder(start, []string{"page", "do"})
	for i := range 1000 {
		intended := start.Add(time.Duration(i) * time.Millisecond)
		lat := time.Duration(1+i%10) * time.Millisecond
		r.Record("page", intended, intended, intended.Add(lat), 200, "")
	}
	r.Record("do", start, start.Add(5*time.Millisecond), start.Add(100*time.Millisecond), 410, "SOLD_OUT")
	r.Record("do", start, start, start.Add(time.Millisecond), 0, "TIMEOUT")
	r.Record("do", start, start, start.Add(time.Millisecond), 503, "DEGRADED")
	eps, total, lag := r.results(1)
	if len(eps) != 2 || total.Count != 1003 {
		t.Fatalf("%d endpoints, total %+v", len(eps), total)
	}
	page := eps[0]
	if page.P50 < 4.9 || page.P50 > 6.1 || page.Max < 9.9 || page.Max > 10.1 || page.RPS != 1000 {
		t.Errorf("page %+v", page.Stats)
	}
	if page.Classes["2xx"] != 1000 || page.Codes["OK"] != 1000 || len(page.Series) != 2 || len(page.Hist) == 0 {
		t.Errorf("page classes %v codes %v series %d hist %d", page.Classes, page.Codes, len(page.Series), len(page.Hist))
	}
	do := eps[1]
	if do.Classes["4xx"] != 1 || do.Classes["error"] != 1 || do.Classes["5xx"] != 1 || do.Codes["SOLD_OUT"] != 1 || do.Codes["TIMEOUT"] != 1 {
		t.Errorf("do %v %v", do.Classes, do.Codes)
	}
	if do.Max < 99 { // from the intended time, not the (late) send
		t.Errorf("do max %v", do.Max)
	}
	if lag.Max < 4.9 {
		t.Errorf("send lag %+v", lag)
	}
	if r.errs.Load() != 2 {
		t.Errorf("errors %d", r.errs.Load())
	}
	var buckets int64
	for _, b := range page.Hist {
		buckets += b.Count
		if b.Hi <= b.Lo {
			t.Errorf("bucket %+v", b)
		}
	}
	if buckets != 1000 {
		t.Errorf("histogram holds %d", buckets)
	}

	res := &Result{Scenario: "unit", Config: &defaultScenarioValue, Endpoints: eps, Total: total, Seconds: 1,
		Reconcile: Reconciled{Ran: true, Products: 1, Clean: true, Text: "RECONCILE products=1 oversold=0 lost=0 duplicated=0\n"},
		Sales:     []ProductSale{{Product: "p1", Stock: 10, Orders: 3, Units: 3}}}
	dir := t.TempDir()
	if err := res.write(dir); err != nil {
		t.Fatal(err)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	for _, want := range []string{"<svg", "<polyline", "<rect", "latency over time", "SOLD_OUT 1", "RESULT scenario=unit"} {
		if !bytes.Contains(bytes.ToLower(html), bytes.ToLower([]byte(want))) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if bytes.Contains(html, []byte("<script")) {
		t.Error("report.html must not need JavaScript")
	}
	var back Result
	raw, _ := os.ReadFile(filepath.Join(dir, "result.json"))
	if err := json.Unmarshal(raw, &back); err != nil || back.Total.Count != 1003 {
		t.Errorf("result.json: %v %+v", err, back.Total)
	}
	var out bytes.Buffer
	printReport(&out, res)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "RESULT scenario=unit rps=1003 p50_ms=") || !strings.HasSuffix(last, "errors=2 oversold=0 lost=0 duplicated=0") {
		t.Errorf("last line %q", last)
	}
	if !res.Passed() {
		t.Error("clean run did not pass")
	}
	res.Sales[0].OverStock = 1
	if res.Passed() {
		t.Error("a sale over stock passed")
	}
	res.Reconcile = Reconciled{}
	if !strings.Contains(res.resultLine(), "oversold=NA") {
		t.Error(res.resultLine())
	}
}

var defaultScenarioValue = func() Scenario {
	s := defaultScenario()
	s.Steps = []Step{{Call: "page", Repeat: 1, Prob: 1}}
	return s
}()

func TestCharts(t *testing.T) {
	svg := string(lineChart("t", "x", "y", []Series{{Name: "a", Color: "#000", Points: [][2]float64{{0, 1}, {1, 10}, {2, 0.5}}}}, true))
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "<polyline") || strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
		t.Errorf("line chart: %s", svg)
	}
	if s := string(lineChart("t", "x", "y", nil, true)); !strings.Contains(s, "no data") {
		t.Error(s)
	}
	h := string(histogramChart("h", []Bucket{{0.1, 0.158, 3}, {0.158, 0.25, 0}, {0.25, 0.4, 7}}, "#111"))
	if strings.Count(h, "<title>") != 3 || strings.Contains(h, "NaN") {
		t.Errorf("histogram: %s", h)
	}
	if niceCeil(7) != 10 || niceCeil(120) != 200 || niceCeil(0.3) != 0.5 {
		t.Error(niceCeil(7), niceCeil(120), niceCeil(0.3))
	}
}

func TestParsers(t *testing.T) {
	wrk := `Running 5s test @ http://127.0.0.1:1/
  1 threads and 64 connections
  Latency Distribution
     50%  515.00us
     75%  600.00us
     90%  700.00us
     99%    1.25ms
  619741 requests in 5.00s, 1.77GB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 619741
Requests/sec: 123948.33
`
	s, non2xx, err := parseWrk(wrk)
	if err != nil || s.RPS != 123948.33 || s.Requests != 619741 || s.P50 != 0.515 || s.P99 != 1.25 || s.Errors != 3 || non2xx != 619741 {
		t.Errorf("wrk: %+v %d %v", s, non2xx, err)
	}
	if _, _, err := parseWrk("unable to connect"); err == nil {
		t.Error("no error")
	}
	rps, p50, err := parseRedisBenchmark("EVALSHA x: 0.00\rEVALSHA x: 95238.10 requests per second, p50=0.263 msec\n")
	if err != nil || rps != 95238.10 || p50 != 0.263 {
		t.Error(rps, p50, err)
	}
	cs := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=60,usec_per_call=6.00,rejected_calls=0\r\ncmdstat_get:calls=3,usec=3\r\n")
	d := statsDelta(map[string]CmdStat{"evalsha": {Calls: 4, Usec: 30}}, cs)
	if d["evalsha"].Calls != 6 || d["evalsha"].PerUs != 5 || d["get"].Calls != 3 {
		t.Errorf("%+v", d)
	}
	if got := jsonStr([]byte(`{"orderId":"123","status": "pending"}`), "status"); got != "pending" {
		t.Error(got)
	}
	if got := jsonStr([]byte(`{"expiresMs":5}`), "expiresMs"); got != "" {
		t.Error(got)
	}
	if m := reconcileLine.FindStringSubmatch("x\nRECONCILE products=10 oversold=0 lost=2 duplicated=0\n"); m == nil || m[3] != "2" {
		t.Error(m)
	}
}

func TestNeedNamesThePackage(t *testing.T) {
	err := need("the OpenResty peer", Tool{"/nonexistent/ngx_http_lua_module.so", "libnginx-mod-http-lua"}, Tool{"no-such-tool-xyz", "lua-nginx-redis"}, Tool{"sh", "dash"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y libnginx-mod-http-lua lua-nginx-redis") || strings.Contains(err.Error(), "dash") {
		t.Errorf("%v", err)
	}
}

func TestDelayProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	d, err := startDelayProxy("echo", ln.Addr().String(), Fault{Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("%q %v", buf, err)
	}
	// Both directions are delayed.
	if el := time.Since(t0); el < 40*time.Millisecond {
		t.Errorf("round trip %v, want >= 40ms", el)
	}
	d.stallUntil.Store(time.Now().Add(150 * time.Millisecond).UnixNano())
	t0 = time.Now()
	c.Write([]byte("pong"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("%q %v", buf, err)
	}
	if el := time.Since(t0); el < 150*time.Millisecond {
		t.Errorf("stalled round trip %v, want >= 150ms", el)
	}
}

func TestComparisonMedianLeavesDirtyRoundsOut(t *testing.T) {
	r := func(a, b float64) [2]Sample { return [2]Sample{{RPS: a, CPUPerReq: 1}, {RPS: b, CPUPerReq: 2}} }
	cmp := &Comparison{Goal: 0.9, Rounds: [][2]Sample{r(90, 100), r(300, 100), r(95, 100)}, Dirty: []bool{false, true, false}}
	cmp.finish()
	if cmp.Median != 0.925 || !cmp.Met || cmp.CPUMedian != 0.5 || len(cmp.Ratios) != 3 {
		t.Errorf("%+v", cmp)
	}
	if got := cmp.medianRPS(0); got != 92.5 {
		t.Error(got)
	}
	all := &Comparison{Goal: 1, Rounds: [][2]Sample{r(50, 100)}, Dirty: []bool{true}}
	all.finish()
	if all.Median != 0.5 || all.Met {
		t.Errorf("%+v", all)
	}
	if median([]float64{3, 1, 2}) != 2 || median(nil) != 0 {
		t.Error("median")
	}
}

// TestRepoFilesExist: the peers' configs and the deduction script compare
// reads from the tree are where it looks for them.
func TestRepoFilesExist(t *testing.T) {
	for _, rel := range []string{nginxPeerConf, nginxTLSPeerConf, openrestyPeerConf, deductScript} {
		if _, err := os.Stat(filepath.Join("..", rel)); err != nil {
			t.Errorf("bench compare reads %s: %v", rel, err)
		}
	}
}
