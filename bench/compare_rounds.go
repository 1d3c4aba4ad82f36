package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The rounds of bench compare: quiet machine, one load per server in turn,
// CPU per request, and the ratios of the medians.

// waitIdle waits (at most 30 s) until the order consumer and Kafka are idle:
// the backlog of a purchase round is consumed before the next round starts
// and is counted in the round that made it.
func (c *comparer) waitIdle() {
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
	c.waitIdle()
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
