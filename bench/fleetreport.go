package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// FleetResult is a fleet run: its result.json, and the table printFleet
// shows.
type FleetResult struct {
	Scenario       string       `json:"scenario"`
	Description    string       `json:"description"`
	Started        time.Time    `json:"started"`
	Machine        string       `json:"machine"`
	CPUs           int          `json:"cpus"`
	GoVersion      string       `json:"go"`
	Commit         string       `json:"commit"`
	Target         string       `json:"target"`
	EdgeGoMaxProcs int          `json:"edge_gomaxprocs"`
	Config         *Scenario    `json:"scenario_config"`
	Points         []FleetPoint `json:"points"`
	Base           int          `json:"base_point"` // the point the ratios are against: the first of 1 edge, else the first
	Caveat         string       `json:"caveat"`
	Err            string       `json:"error,omitempty"` // a point that could not be measured; the ones after it were not run
	ResultLine     string       `json:"result_line"`
	OutDir         string       `json:"-"`
}

// FleetPoint is one number of edges on a sale of its own.
type FleetPoint struct {
	Edges     int         `json:"edges"`
	Purchase  FleetPhase  `json:"purchase"`           // while the stock lasts
	SoldOut   *FleetPhase `json:"sold_out,omitempty"` // after; nil when the stock did not sell out
	Ratio     FleetRatio  `json:"ratio_to_base"`
	Reconcile Reconciled  `json:"reconcile"`
	Notes     []string    `json:"notes,omitempty"`
}

// FleetPhase is what one phase of a point measured. The CPU figures are
// per 1,000 purchase requests (all answers) in CPU-seconds; a purchase
// phase counts them until the order consumer stored its orders.
type FleetPhase struct {
	Name            string  `json:"name"` // purchase | soldout
	Seconds         float64 `json:"seconds"`
	Requests        int64   `json:"requests"`   // purchase answers of every kind, and no answer
	OK              int64   `json:"ok"`         // 200: queued
	SoldOut         int64   `json:"sold_out"`   // 410 SOLD_OUT
	Other           int64   `json:"other"`      // anything else, and no answer
	PerSecond       float64 `json:"per_second"` // purchase: 200s per second; soldout: 410s per second
	P50             float64 `json:"p50_ms"`
	P99             float64 `json:"p99_ms"`
	EdgesCPU        float64 `json:"edges_cpu_s"`
	RedisCPU        float64 `json:"redis_cpu_s"`
	BenchCPU        float64 `json:"bench_cpu_s"`
	EdgesPct        float64 `json:"edges_cpu_pct"` // % of one CPU over the load alone
	RedisPct        float64 `json:"redis_cpu_pct"`
	BenchPct        float64 `json:"bench_cpu_pct"`
	EdgesPer1k      float64 `json:"edges_cpu_s_per_1k"`
	RedisPer1k      float64 `json:"redis_cpu_s_per_1k"`
	BenchPer1k      float64 `json:"bench_cpu_s_per_1k"`
	MachineBusyPct  float64 `json:"machine_busy_pct"`  // % of one CPU, everything on the machine, over the phase's load
	AttemptsPerCall float64 `json:"attempts_per_call"` // the deduction script's group commit, all edges
	Run             *Result `json:"run"`               // the phase in full, as `bench run` books a scenario
}

// FleetRatio is a point's figures over the base point's.
type FleetRatio struct {
	Purchases     float64 `json:"purchases_per_s"`
	SoldOut       float64 `json:"sold_out_per_s"`
	PurchaseEdges float64 `json:"purchase_edges_cpu_per_1k"`
	SoldOutEdges  float64 `json:"sold_out_edges_cpu_per_1k"`
}

// fleetFigures reads a phase's figures from its booked run and the
// processes' CPU over the load alone.
func fleetFigures(name string, r *Result, load []ProcStat) FleetPhase {
	ph := FleetPhase{Name: name, Seconds: r.Seconds, MachineBusyPct: r.MachineBusyPct, Run: r}
	for _, e := range r.Endpoints {
		if e.Name != "do" {
			continue
		}
		ph.Requests, ph.OK, ph.SoldOut = e.Count, e.Codes["OK"], e.Codes["SOLD_OUT"]
		ph.Other = e.Count - ph.OK - ph.SoldOut
		ph.P50, ph.P99 = e.P50, e.P99
	}
	for _, p := range r.Processes {
		switch p.Name {
		case watchEdges:
			ph.EdgesCPU = p.CPUSeconds
		case watchRedis:
			ph.RedisCPU = p.CPUSeconds
		case watchBench:
			ph.BenchCPU = p.CPUSeconds
		}
	}
	for _, p := range load {
		switch p.Name {
		case watchEdges:
			ph.EdgesPct = p.CPUPct
		case watchRedis:
			ph.RedisPct = p.CPUPct
		case watchBench:
			ph.BenchPct = p.CPUPct
		}
	}
	ph.EdgesPer1k, ph.RedisPer1k, ph.BenchPer1k = per1k(ph.EdgesCPU, ph.Requests), per1k(ph.RedisCPU, ph.Requests), per1k(ph.BenchCPU, ph.Requests)
	answers := ph.OK
	if name != "purchase" {
		answers = ph.SoldOut
	}
	ph.PerSecond = ratio(float64(answers), ph.Seconds)
	calls, att := r.EdgeMetrics[`flashgate_redis_script_calls_total{what="calls"}`], r.EdgeMetrics[`flashgate_redis_script_calls_total{what="attempts"}`]
	ph.AttemptsPerCall = ratio(att, calls)
	return ph
}

func per1k(cpu float64, requests int64) float64 { return ratio(1000*cpu, float64(requests)) }

// ratio is a/b, 0 when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// cpuPcts is the phase's CPU over the load, % of one CPU: the edges, Redis,
// bench, the whole machine.
func (ph *FleetPhase) cpuPcts() string {
	return fmt.Sprintf("%.0f/%.0f/%.0f/%.0f", ph.EdgesPct, ph.RedisPct, ph.BenchPct, ph.MachineBusyPct)
}

func (ph *FleetPhase) perSecond() float64 {
	if ph == nil {
		return 0
	}
	return ph.PerSecond
}

// okAnswers is the purchases a run answered 200.
func okAnswers(r *Result) int64 {
	var n int64
	for _, s := range r.Sales {
		n += s.Orders
	}
	return n
}

// baseIndex is the point the ratios are against: the first with one
// edge, else the first.
func baseIndex(points []FleetPoint) int {
	for i, p := range points {
		if p.Edges == 1 {
			return i
		}
	}
	return 0
}

// finish computes the ratios and the RESULT line.
func (r *FleetResult) finish() {
	if len(r.Points) == 0 {
		r.ResultLine = r.resultLine()
		return
	}
	r.Base = baseIndex(r.Points)
	b := r.Points[r.Base]
	var bSold, bSoldEdges float64
	if b.SoldOut != nil {
		bSold, bSoldEdges = b.SoldOut.PerSecond, b.SoldOut.EdgesPer1k
	}
	for i := range r.Points {
		p := &r.Points[i]
		p.Ratio = FleetRatio{
			Purchases:     ratio(p.Purchase.PerSecond, b.Purchase.PerSecond),
			PurchaseEdges: ratio(p.Purchase.EdgesPer1k, b.Purchase.EdgesPer1k),
		}
		if p.SoldOut != nil {
			p.Ratio.SoldOut = ratio(p.SoldOut.PerSecond, bSold)
			p.Ratio.SoldOutEdges = ratio(p.SoldOut.EdgesPer1k, bSoldEdges)
		}
	}
	r.ResultLine = r.resultLine()
}

// Passed: every point reconciled clean and none told shoppers they bought
// more than the stock.
func (r *FleetResult) Passed() bool {
	if len(r.Points) == 0 || r.Err != "" {
		return false
	}
	for _, p := range r.Points {
		if !p.Reconcile.Clean {
			return false
		}
		for _, ph := range []*FleetPhase{&p.Purchase, p.SoldOut} {
			if ph != nil && ph.Run != nil {
				for _, s := range ph.Run.Sales {
					if s.OverStock > 0 {
						return false
					}
				}
			}
		}
	}
	return true
}

func (r *FleetResult) resultLine() string {
	var edges, buy, sold, rb, rs, over, lost, dup []string
	for _, p := range r.Points {
		edges = append(edges, fmt.Sprint(p.Edges))
		buy = append(buy, fmt.Sprintf("%.0f", p.Purchase.PerSecond))
		sold = append(sold, fmt.Sprintf("%.0f", p.SoldOut.perSecond()))
		rb = append(rb, fmt.Sprintf("%.2f", p.Ratio.Purchases))
		rs = append(rs, fmt.Sprintf("%.2f", p.Ratio.SoldOut))
		rc := p.Reconcile
		na := func(v int64) string {
			if !rc.Ran || rc.Err != "" && rc.Products == 0 {
				return "NA"
			}
			return fmt.Sprint(v)
		}
		over, lost, dup = append(over, na(rc.Oversold)), append(lost, na(rc.Lost)), append(dup, na(rc.Duplicated))
	}
	j := func(s []string) string { return strings.Join(s, ",") }
	return fmt.Sprintf("RESULT scenario=%s edges=%s purchases_per_s=%s soldout_per_s=%s purchases_ratio=%s soldout_ratio=%s oversold=%s lost=%s duplicated=%s",
		r.Scenario, j(edges), j(buy), j(sold), j(rb), j(rs), j(over), j(lost), j(dup))
}

func (r *FleetResult) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644)
}

// fleetCaveat says what the curve measures on the machine it ran on.
func fleetCaveat(cpus int, external bool) string {
	if external {
		return "edges on machines of their own: bench measured throughput and its own CPU only; compare runs of 1, 2, 3 edges, each on a fresh sale"
	}
	return fmt.Sprintf("one machine, %d CPUs: the N edges, the 6 Redis nodes, kfake, the order consumer and bench's load generator all share them, "+
		"so adding an edge adds no CPU. The curve measures what an extra edge costs per request (more processes, more connections, "+
		"smaller group commits per edge), not the fleet's capacity; for that, run the edges on machines of their own "+
		"(-target host1:port,host2:port,... -admin HOST:PORT, one point per run)", cpus)
}

// printFleet writes the points side by side; its last line is the RESULT
// line.
func printFleet(w io.Writer, r *FleetResult) {
	sc := r.Config
	fmt.Fprintf(w, "\n== %s: %s\n", r.Scenario, r.Description)
	fmt.Fprintf(w, "== %s, %s, commit %s; %s; edge GOMAXPROCS=%d\n", r.Machine, r.Started.Format("2006-01-02 15:04 UTC"), r.Commit, r.Target, r.EdgeGoMaxProcs)
	fmt.Fprintf(w, "== load per point: %s; shopper i to edge i mod N; sold-out phase %v\n\n", describeLoad(sc), sc.Fleet.SoldOutFor)
	base := "vs 1"
	if len(r.Points) > 0 {
		base = fmt.Sprintf("vs %d", r.Points[r.Base].Edges)
	}
	fmt.Fprintln(w, "purchases while the stock lasts (200 = queued); CPU-seconds per 1,000 purchase requests, until the consumer stored the orders:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "edges\t200/s\t%s\tanswers\tother\ts\tp50 ms\tp99 ms\tedges cpu-s/1k\t%s\tredis cpu-s/1k\tbench cpu-s/1k\tattempts/call\tcpu %% edges/redis/bench/machine\t\n", base, base)
	for _, p := range r.Points {
		ph := p.Purchase
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.3f\t%.2f\t%.3f\t%.3f\t%.1f\t%s\t\n", p.Edges, ph.PerSecond, p.Ratio.Purchases,
			ph.Requests, ph.Other, ph.Seconds, ph.P50, ph.P99, ph.EdgesPer1k, p.Ratio.PurchaseEdges, ph.RedisPer1k, ph.BenchPer1k, ph.AttemptsPerCall, ph.cpuPcts())
	}
	tw.Flush()
	fmt.Fprintln(w, "\nsold out (410 from the edges' memory), the same load:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "edges\t410/s\t%s\tanswers\tother\ts\tp50 ms\tp99 ms\tedges cpu-s/1k\t%s\tredis cpu-s/1k\tbench cpu-s/1k\tcpu %% edges/redis/bench/machine\t\n", base, base)
	for _, p := range r.Points {
		ph := p.SoldOut
		if ph == nil {
			fmt.Fprintf(tw, "%d\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", p.Edges)
			continue
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.3f\t%.2f\t%.3f\t%.3f\t%s\t\n", p.Edges, ph.PerSecond, p.Ratio.SoldOut,
			ph.Requests, ph.Other, ph.Seconds, ph.P50, ph.P99, ph.EdgesPer1k, p.Ratio.SoldOutEdges, ph.RedisPer1k, ph.BenchPer1k, ph.cpuPcts())
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, p := range r.Points {
		rc := p.Reconcile
		verdict := "clean"
		if !rc.Clean {
			verdict = "NOT CLEAN"
		}
		fmt.Fprintf(w, "reconcile, %d edge(s): %s (products %d, oversold %d, lost %d, duplicated %d)", p.Edges, verdict, rc.Products, rc.Oversold, rc.Lost, rc.Duplicated)
		if rc.Err != "" {
			fmt.Fprintf(w, ": %s", rc.Err)
		}
		fmt.Fprintln(w)
		for _, ph := range []*FleetPhase{&p.Purchase, p.SoldOut} {
			if ph != nil && ph.Run != nil {
				for _, n := range ph.Run.Notes {
					fmt.Fprintf(w, "  note (%s): %s\n", ph.Name, n)
				}
			}
		}
		for _, n := range p.Notes {
			fmt.Fprintln(w, "  note:", n)
		}
	}
	if r.Err != "" {
		fmt.Fprintln(w, "error:", r.Err)
	}
	fmt.Fprintf(w, "\ncaveat: %s\n", r.Caveat)
	if r.OutDir != "" {
		fmt.Fprintf(w, "result: %s/result.json (each phase's report.html and result.json in %s/N-edgesK/)\n", r.OutDir, r.OutDir)
	}
	fmt.Fprintln(w, r.ResultLine)
}
