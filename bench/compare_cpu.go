package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"
)

// What a purchase costs the whole system, process by process, and A/B
// rounds of two edge builds in one run (-edge-b).
//
// The table: for every server of the purchase targets (flashgate, the
// OpenResty pattern, and with -edge-b the B build), the CPU each process
// bench started spent per purchase made, including the order pipeline's
// catch-up after the round (measure waits for the consumer and Kafka to go
// quiet), medians over rounds. The columns are the server itself, Redis,
// the broker (kfake), the order consumer (the second cmd/proxy; with
// -consumer edge it runs inside the edge and its cost is in the edge
// column), and everything else bench started (the origin, the idle peers
// and edges), so the row's total is bench's sys-us/r per purchase.
//
// A/B: -edge-b PATH starts a second edge from that binary, its config the
// main edge's (own ports, node id and data dir), on the same Redis, Kafka
// and order consumer, pinned like the main edge, and adds an ab-TARGET
// comparison for each chosen target but tls: B against A, round by round.
// The order alternates, A B, B A, A B, ..., so what drifts through a run
// (Redis filling with keys, the consumer's backlog, the machine's load)
// weighs on both alike. The ratio is B/A (the build under test over the
// baseline: above 1, B answers more per second; the CPU ratio below 1, B
// is cheaper); no goal, the verdict column says A/B.

// CPUSplit is one round's CPU per purchase by process, µs.
type CPUSplit struct {
	Purchases int64   `json:"purchases"`
	Edge      float64 `json:"edge_us"`
	Redis     float64 `json:"redis_us"`
	Broker    float64 `json:"broker_us"`
	Consumer  float64 `json:"consumer_us"`
	Other     float64 `json:"other_us"`
	Total     float64 `json:"total_us"`
}

// CPURow is one server's CPU per purchase: the median of each column over
// its rounds (so the columns need not add up to the total exactly), and
// every round.
type CPURow struct {
	Target string     `json:"target"`
	Server string     `json:"server"`
	Median CPUSplit   `json:"median"`
	Rounds []CPUSplit `json:"rounds"`
}

// serverProc is the process (bench's name for it) of a server under test.
var serverProc = map[string]string{"flashgate": "edge", "flashgate-b": "edge-b", "openresty": "openresty"}

// cpuSplit divides a purchase round's per-request CPU into the table's
// columns, per purchase made (a refused attempt is not one).
func cpuSplit(s Sample) (CPUSplit, bool) {
	own, ok := serverProc[s.Server]
	ok = ok && s.Requests > 0 && s.Codes["OK"] > 0
	if !ok || len(s.PerProc) == 0 {
		return CPUSplit{}, false
	}
	per := float64(s.Requests) / float64(s.Codes["OK"])
	sp := CPUSplit{Purchases: s.Codes["OK"]}
	for name, us := range s.PerProc {
		us *= per
		switch name {
		case own:
			sp.Edge += us
		case "redis":
			sp.Redis += us
		case "kafka":
			sp.Broker += us
		case "orders":
			sp.Consumer += us
		default:
			sp.Other += us
		}
		sp.Total += us
	}
	return sp, true
}

// cpuTable is the table of the run's purchase comparisons: one row per
// server and target (flashgate's rounds are shared by the two attempts
// targets: one row).
func cpuTable(cmps []*Comparison) []CPURow {
	var rows []CPURow
	seen := map[string]bool{}
	for _, cmp := range cmps {
		if cmp.Skipped != "" || !strings.Contains(cmp.Name, "attempts") {
			continue
		}
		for k := range 2 {
			var row CPURow
			for _, r := range cmp.Rounds {
				if sp, ok := cpuSplit(r[k]); ok {
					row.Server = r[k].Server
					row.Rounds = append(row.Rounds, sp)
				}
			}
			target := "attempts"
			if strings.HasPrefix(cmp.Name, "ab-") {
				target = cmp.Name
			}
			if len(row.Rounds) == 0 || seen[target+" "+row.Server] {
				continue
			}
			seen[target+" "+row.Server] = true
			row.Target = target
			col := func(f func(CPUSplit) float64) float64 {
				var v []float64
				for _, sp := range row.Rounds {
					v = append(v, f(sp))
				}
				return median(v)
			}
			row.Median = CPUSplit{
				Purchases: int64(col(func(s CPUSplit) float64 { return float64(s.Purchases) })),
				Edge:      col(func(s CPUSplit) float64 { return s.Edge }),
				Redis:     col(func(s CPUSplit) float64 { return s.Redis }),
				Broker:    col(func(s CPUSplit) float64 { return s.Broker }),
				Consumer:  col(func(s CPUSplit) float64 { return s.Consumer }),
				Other:     col(func(s CPUSplit) float64 { return s.Other }),
				Total:     col(func(s CPUSplit) float64 { return s.Total }),
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// cpuPerPurchaseGoal is issue #17's bound on what one purchase costs the
// whole system (edge, Redis, broker, consumer), in µs of CPU.
const cpuPerPurchaseGoal = 25.0

// printCPUTable writes the table, and for an A/B target the ratio B/A of
// each column.
func printCPUTable(w io.Writer, rows []CPURow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nCPU per purchase by process, µs (medians over rounds; the pipeline's catch-up after each round included):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tserver\tedge\tredis\tbroker\tconsumer\tother\ttotal\trounds")
	byKey := map[string]CPURow{}
	for _, r := range rows {
		byKey[r.Target+" "+r.Server] = r
	}
	ratio := func(b, a float64) string {
		if a == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", b/a)
	}
	for _, r := range rows {
		m := r.Median
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\n", r.Target, r.Server, m.Edge, m.Redis, m.Broker, m.Consumer, m.Other, m.Total, len(r.Rounds))
		if a, ok := byKey[r.Target+" flashgate"]; ok && r.Server == "flashgate-b" {
			fmt.Fprintf(tw, "%s\tB/A\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Target, ratio(m.Edge, a.Median.Edge), ratio(m.Redis, a.Median.Redis),
				ratio(m.Broker, a.Median.Broker), ratio(m.Consumer, a.Median.Consumer), ratio(m.Other, a.Median.Other), ratio(m.Total, a.Median.Total))
		}
	}
	tw.Flush()
	if r, ok := byKey["attempts flashgate"]; ok {
		verdict := "MISSED"
		if r.Median.Total <= cpuPerPurchaseGoal {
			verdict = "met"
		}
		fmt.Fprintf(w, "goal: the whole system's CPU per purchase (attempts, flashgate, total) <= %.0f µs: %.1f, %s\n", cpuPerPurchaseGoal, r.Median.Total, verdict)
	}
	fmt.Fprintln(w, "(edge: the server under test; broker: kfake; consumer: the order consumer's cmd/proxy (with -consumer edge, inside the edge column); other: the origin and the idle servers; total: bench's sys-us/r per purchase; the OpenResty pattern has no order pipeline)")
}

// --- A/B: a second edge build ----------------------------------------------

// startEdgeB starts the -edge-b binary as a second edge on the main edge's
// config (spec), and checks it answers like A: the page, and 410 for the
// sold-out product once it has seen the flag.
func (c *comparer) startEdgeB(ctx context.Context, spec EdgeSpec) error {
	if c.f.edgeB == "" {
		return nil
	}
	env := c.env
	bin, err := filepath.Abs(c.f.edgeB)
	if err != nil {
		return err
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		return fmt.Errorf("-edge-b %s: not a cmd/proxy binary (%v)", c.f.edgeB, err)
	}
	if env.opt.Consumer != "separate" {
		return errors.New("-edge-b needs -consumer separate: a consumer inside edge A would charge B's orders to A")
	}
	path, addr, admin, err := env.writeConfig(spec, "edge-b", 4, false)
	if err != nil {
		return err
	}
	var penv []string
	if env.opt.GoMaxProcs > 0 {
		penv = append(penv, "GOMAXPROCS="+strconv.Itoa(env.opt.GoMaxProcs))
	}
	if c.edgeB, err = env.procs.Start("edge-b", env.cpu(env.opt.ServerCPU), penv, bin, "-c", path); err != nil {
		return err
	}
	if err := env.waitEdge(ctx, c.edgeB, admin, addr, "p1"); err != nil {
		return fmt.Errorf("-edge-b: %w", err)
	}
	c.edgeBAddr = addr
	cl := &fasthttp.Client{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + addr + "/api/seckill/do")
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.Header.Set("Authorization", "Bearer "+c.users.Session(2))
		req.SetBodyString(c.soldOutBody())
		err := cl.DoTimeout(req, resp, 5*time.Second)
		st := resp.StatusCode()
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if err == nil && st == 410 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("-edge-b: the sold-out product is not answered 410 (%d %v); its log %s", st, err, c.edgeB.Log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.setup = append(c.setup, "A/B: edge B is "+bin+" (a second cmd/proxy, GOMAXPROCS=1, the main edge's config, the same Redis, Kafka and order consumer, pinned like A); ab-* targets alternate A B, B A, ...; ratios B/A")
	return nil
}

func (c *comparer) edgeBPids() []int { return []int{c.edgeB.Pid()} }

// abTargets runs the A/B comparisons of the chosen targets, each after the
// run's other targets of its kind.
func (c *comparer) abTargets(ctx context.Context, want map[string]bool, run func(name string, fn func(*Comparison) error) error) error {
	if c.edgeB == nil {
		return nil
	}
	wrk := []struct{ target, path string }{{"soldout", "/api/seckill/do"}, {"page", "/seckill/p1"}, {"proxy", "/items/p1"}}
	for _, t := range wrk {
		if !want[t.target] {
			continue
		}
		expect, script := 200, ""
		if t.target == "soldout" {
			var err error
			if script, err = c.soldOutScript(); err != nil {
				return err
			}
			expect = 410
		}
		if err := run("ab-"+t.target, func(cmp *Comparison) error {
			return c.abRounds(cmp, func(side int) (Sample, error) {
				if side == 1 {
					return c.measure("flashgate-b", c.edgeBPids, c.wrkSample("http://"+c.edgeBAddr+t.path, script, expect))
				}
				return c.measure("flashgate", c.edgePids, c.wrkSample("http://"+c.env.EdgeAddr+t.path, script, expect))
			}, func() {
				for _, a := range []string{c.env.EdgeAddr, c.edgeBAddr} {
					runWrk(c.env.cpu(0), c.f.threads, c.f.conns, c.f.warmup, script, "http://"+a+t.path)
				}
			})
		}); err != nil {
			return err
		}
	}
	if want["attempts"] {
		return run("ab-attempts", func(cmp *Comparison) error {
			return c.abRounds(cmp, func(side int) (Sample, error) {
				if side == 1 {
					return c.measure("flashgate-b", c.edgeBPids, c.attemptGen(ctx, c.edgeBAddr, c.f.duration))
				}
				return c.measure("flashgate", c.edgePids, c.attemptGen(ctx, c.env.EdgeAddr, c.f.duration))
			}, func() {
				c.attemptGen(ctx, c.env.EdgeAddr, c.f.warmup)()
				c.attemptGen(ctx, c.edgeBAddr, c.f.warmup)()
			})
		})
	}
	return nil
}

// abRounds measures B (side 1) and A (side 0) round by round, the order
// alternating, with the dirty-round redo of the other targets. The pair is
// stored B first: the ratio is B/A.
func (c *comparer) abRounds(cmp *Comparison, measure func(side int) (Sample, error), warm func()) error {
	warm()
	printRoundHeader(c.log)
	for r := 1; r <= c.f.rounds; r++ {
		order := [2]int{0, 1}
		if r%2 == 0 {
			order = [2]int{1, 0}
		}
		var got [2]Sample
		for attempt := 0; attempt <= c.f.redo; attempt++ {
			for _, side := range order {
				s, err := measure(side)
				if err != nil {
					return err
				}
				got[side] = s
			}
			dirty := got[0].OtherPct > c.f.dirtyPct || got[1].OtherPct > c.f.dirtyPct
			for _, side := range order {
				printRound(c.log, r, got[side], Sample{})
				printPerProc(c.log, got[side])
			}
			if !dirty || attempt == c.f.redo {
				cmp.Dirty = append(cmp.Dirty, dirty)
				break
			}
			c.logf("   (other load above %.0f%% of a CPU: round redone)", c.f.dirtyPct)
		}
		cmp.Rounds = append(cmp.Rounds, [2]Sample{got[1], got[0]})
	}
	return nil
}

// attemptGen is a purchase round against addr on the product with stock
// to spare, prepared like the attempts target's.
func (c *comparer) attemptGen(ctx context.Context, addr string, d time.Duration) func() (Sample, float64, error) {
	rate := 30000.0
	for _, r := range c.attemptRate {
		rate = max(rate, r)
	}
	reqs := c.prepare("pa", min(int(1.5*rate*d.Seconds()), 1_000_000))
	return func() (Sample, float64, error) {
		self0 := cpuTicks(os.Getpid())
		s := c.attemptLoad(ctx, addr, "pa", reqs, d)
		return s, float64(cpuTicks(os.Getpid())-self0) / clkTck, nil
	}
}

// abTargetInfo describes the A/B comparisons for the result.
func abTargetInfo(name string) (what string, ok bool) {
	base, ok := strings.CutPrefix(name, "ab-")
	if !ok {
		return "", false
	}
	for _, t := range compareTargets {
		if t.name == base || (base == "attempts" && t.name == "attempts-openresty") {
			what, _, _ = strings.Cut(t.what, " vs ")
			if base == "attempts" {
				what = "purchase attempts (each deducts)"
			}
			return "A/B of two edge builds: " + what + ", edge B (-edge-b) over edge A, rounds alternating A B, B A", true
		}
	}
	return "A/B of two edge builds", true
}

// sortedRows orders the table: by target, then flashgate, flashgate-b, the peers.
func sortedRows(rows []CPURow) []CPURow {
	rank := map[string]int{"flashgate": 0, "flashgate-b": 1}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Target != rows[j].Target {
			return rows[i].Target < rows[j].Target
		}
		ri, ok := rank[rows[i].Server]
		if !ok {
			ri = 2
		}
		rj, ok := rank[rows[j].Server]
		if !ok {
			rj = 2
		}
		return ri < rj
	})
	return rows
}
