package main

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one run: what result.json holds and report.html shows.
type Result struct {
	Scenario       string             `json:"scenario"`
	Description    string             `json:"description"`
	Started        time.Time          `json:"started"`
	Machine        string             `json:"machine"`
	GoVersion      string             `json:"go"`
	Commit         string             `json:"commit"`
	Target         string             `json:"target"`
	EdgeGoMaxProcs int                `json:"edge_gomaxprocs"`
	Pinned         bool               `json:"pinned"`
	Kafka          string             `json:"kafka"`
	Consumer       string             `json:"consumer"`
	ClickHouse     bool               `json:"clickhouse"`
	Config         *Scenario          `json:"scenario_config"`
	Seconds        float64            `json:"seconds"` // from the start to the last answer
	Total          Stats              `json:"total"`
	SendLag        Stats              `json:"send_lag"` // how late requests left against their schedule
	Endpoints      []EndpointResult   `json:"endpoints"`
	Arrived        int64              `json:"shoppers"`
	Unfinished     int64              `json:"unfinished_journeys"`
	SessionsSigned int64              `json:"sessions_signed"`
	Sales          []ProductSale      `json:"sales"`
	Processes      []ProcStat         `json:"processes"`
	MachineBusyPct float64            `json:"machine_busy_pct"` // % of one CPU, everything on the machine
	RedisCommands  map[string]CmdStat `json:"redis_commands"`
	EdgeMetrics    map[string]float64 `json:"edge_metrics"`
	Faults         []FaultStat        `json:"faults,omitempty"`
	Reconcile      Reconciled         `json:"reconcile"`
	Notes          []string           `json:"notes,omitempty"`
	Profile        string             `json:"pprof_top,omitempty"`
	ServerLatency  []RouteLatency     `json:"server_latency,omitempty"`
	Failover       *FailoverResult    `json:"failover,omitempty"`
	WaitingRoom    *RoomResult        `json:"waiting_room,omitempty"`
	RouteRoom      *RouteRoomResult   `json:"route_room,omitempty"`
	ResultLine     string             `json:"result_line"`
	OutDir         string             `json:"-"`
}

// ProductSale is what the shoppers were told per product: bench's own
// oversell check beside reconcile's.
type ProductSale struct {
	Product   string `json:"product"`
	Stock     int64  `json:"stock"`
	Orders    int64  `json:"orders"`  // do answered 200
	Units     int64  `json:"units"`   // their units
	Unknown   int64  `json:"unknown"` // do answered 503 or not at all: outcome settled by the ledger
	OverStock int64  `json:"over_stock"`
}

// FaultStat is what a delay proxy did.
type FaultStat struct {
	Name        string `json:"name"`
	Connections int64  `json:"connections"`
	Chunks      int64  `json:"chunks"`
	Stalls      int64  `json:"stalls"`
}

// Errors counts requests without an answer or with a 5xx.
func (r *Result) Errors() int64 {
	var n int64
	for _, e := range r.Endpoints {
		n += e.Classes["error"] + e.Classes["5xx"]
	}
	return n
}

// Passed: reconciliation clean and nobody was told they bought more than
// the stock.
func (r *Result) Passed() bool {
	if !r.Reconcile.Clean {
		return false
	}
	for _, s := range r.Sales {
		if s.OverStock > 0 {
			return false
		}
	}
	if wr := r.WaitingRoom; wr != nil && (wr.OutOfTurn > 0 || wr.Sold > int64(wr.Stock)) {
		return false
	}
	return true
}

func (r *Result) resultLine() string {
	if r.WaitingRoom != nil {
		return r.waitRoomLine()
	}
	rc := r.Reconcile
	na := func(v int64) string {
		if !rc.Ran || rc.Err != "" && rc.Products == 0 {
			return "NA"
		}
		return fmt.Sprint(v)
	}
	line := fmt.Sprintf("RESULT scenario=%s rps=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f errors=%d oversold=%s lost=%s duplicated=%s",
		r.Scenario, r.Total.RPS, r.Total.P50, r.Total.P99, r.Total.P999, r.Errors(), na(rc.Oversold), na(rc.Lost), na(rc.Duplicated))
	if fo := r.Failover; fo != nil && len(fo.Products) > 0 {
		hot := fo.Products[0]
		line += fmt.Sprintf(" failover_s=%.1f hot_closed_s=%d hot_recovering=%d", fo.PromotedS-fo.StartedS, hot.ClosedS, hot.Recovering)
	}
	return line
}

// outDir is where a run's result files go: -out, or a new folder under
// bench/results named by the scenario and the run's start.
func outDir(root string, f runFlags, sc *Scenario, started time.Time) string {
	if f.out != "" {
		return f.out
	}
	return filepath.Join(root, "bench", "results", sc.Name+"-"+started.Format("20060102-150405"))
}

// runDir makes a run's working directory (configs, logs, data): kept and
// named on w with -keep, else removed by the returned cleanup. progress is
// where the run's progress lines go: w, or nowhere with -q.
func runDir(name string, keep, quiet bool, w io.Writer) (dir string, progress io.Writer, cleanup func(), err error) {
	progress = w
	if quiet {
		progress = io.Discard
	}
	dir, err = os.MkdirTemp("", "flashgate-bench-"+name+"-")
	if err != nil {
		return "", nil, nil, err
	}
	if keep {
		fmt.Fprintln(w, "bench: run directory", dir)
		return dir, progress, func() {}, nil
	}
	return dir, progress, func() { os.RemoveAll(dir) }, nil
}

// exitNotes says, for each process that exited during the run, how and how
// its log ends.
func exitNotes(procs ...*Proc) []string {
	var notes []string
	for _, p := range procs {
		if ok, err := p.Exited(); ok {
			notes = append(notes, fmt.Sprintf("%s exited during the run (%v); its log ends: %s", p.Name, err, p.Tail()))
		}
	}
	return notes
}

func (r *Result) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.ResultLine = r.resultLine()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	defer f.Close()
	return renderHTML(f, r)
}

// printReport writes the text summary; its last line is the RESULT line.
func printReport(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n== %s: %s\n", r.Scenario, r.Description)
	fmt.Fprintf(w, "== %s, %s, commit %s; edge GOMAXPROCS=%d, pinned=%v, kafka=%s, consumer=%s, clickhouse=%v\n",
		r.Machine, r.Started.Format("2006-01-02 15:04 UTC"), r.Commit, r.EdgeGoMaxProcs, r.Pinned, r.Kafka, r.Consumer, r.ClickHouse)
	fmt.Fprintf(w, "== %d shoppers over %.1fs; send lag p99 %.2fms max %.1fms (bench's own lateness, counted in the latencies)\n\n",
		r.Arrived, r.Seconds, r.SendLag.P99, r.SendLag.Max)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "endpoint\trequests\treq/s\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\t2xx\t4xx\t5xx\terrors\t")
	row := func(name string, s Stats, c map[string]int64) {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%d\t%d\t%d\t%d\t\n", name, s.Count, s.RPS, s.P50, s.P99, s.P999, s.Max,
			c["2xx"], c["4xx"], c["5xx"], c["error"])
	}
	all := map[string]int64{}
	for _, e := range r.Endpoints {
		row(e.Name, e.Stats, e.Classes)
		for k, v := range e.Classes {
			all[k] += v
		}
	}
	row("all", r.Total, all)
	tw.Flush()
	fmt.Fprintln(w)
	for _, e := range r.Endpoints {
		var parts []string
		for _, k := range sortedKeys(e.Codes) {
			parts = append(parts, fmt.Sprintf("%s %d", k, e.Codes[k]))
		}
		fmt.Fprintf(w, "  %-7s %s\n", e.Name, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	for _, p := range r.Processes {
		fmt.Fprintf(w, "  cpu %-24s %6.1f%% of one CPU (%.1fs)  rss %.0f MB (peak %.0f MB)\n", p.Name, p.CPUPct, p.CPUSeconds, p.RSSMB, p.PeakRSSMB)
	}
	fmt.Fprintf(w, "  machine busy %.0f%% of one CPU (all processes, %d CPUs)\n", r.MachineBusyPct, runtime.NumCPU())
	if len(r.RedisCommands) > 0 {
		var parts []string
		for _, k := range sortedCmds(r.RedisCommands) {
			c := r.RedisCommands[k]
			parts = append(parts, fmt.Sprintf("%s %d (%.1fµs)", k, c.Calls, c.PerUs))
		}
		fmt.Fprintf(w, "  redis commands: %s\n", strings.Join(parts, ", "))
	}
	for _, l := range r.ServerLatency {
		fmt.Fprintf(w, "  edge's own latency (read to written, its histogram) route %-7s %d requests, p50 <= %s ms, p99 <= %s ms, p99.9 <= %s ms\n",
			l.Route, l.Count, fmtNum(l.P50), fmtNum(l.P99), fmtNum(l.P999))
	}
	if calls, att := r.EdgeMetrics[`flashgate_redis_script_calls_total{what="calls"}`], r.EdgeMetrics[`flashgate_redis_script_calls_total{what="attempts"}`]; calls > 0 {
		fmt.Fprintf(w, "  deduction script: %.0f calls for %.0f attempts (group commit: %.2f attempts per call)\n", calls, att, att/calls)
	}
	for _, f := range r.Faults {
		fmt.Fprintf(w, "  fault proxy %s: %d connections, %d chunks delayed, %d stalls\n", f.Name, f.Connections, f.Chunks, f.Stalls)
	}
	var orders, units, unknown, over int64
	for _, s := range r.Sales {
		orders, units, unknown, over = orders+s.Orders, units+s.Units, unknown+s.Unknown, over+s.OverStock
	}
	if orders+unknown > 0 {
		fmt.Fprintf(w, "  purchases answered 200: %d orders, %d units (stock %d × %d); answered 503/none (settled by the ledger): %d; over stock: %d\n",
			orders, units, len(r.Sales), r.Config.Stock, unknown, over)
	}
	if r.Unfinished > 0 {
		fmt.Fprintf(w, "  %d journeys still running when the drain time ended\n", r.Unfinished)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "  note:", n)
	}
	fmt.Fprintln(w)
	if r.Failover != nil {
		printFailover(w, r.Failover)
	}
	if r.WaitingRoom != nil {
		printRoom(w, r)
	}
	if r.Reconcile.Text != "" {
		fmt.Fprint(w, r.Reconcile.Text)
	}
	if r.Reconcile.Err != "" {
		fmt.Fprintln(w, "reconcile:", r.Reconcile.Err)
	}
	if r.Profile != "" {
		lines := strings.Split(r.Profile, "\n")
		fmt.Fprintln(w, "edge CPU profile (top; all of it in pprof-top.txt, cpu.pprof):")
		for _, l := range lines[:min(len(lines), 22)] {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if r.OutDir != "" {
		fmt.Fprintf(w, "report: %s/report.html (result.json beside it)\n", r.OutDir)
	}
	fmt.Fprintln(w, r.ResultLine)
}

// printFailover writes the failover run's timeline and per-product sale.
func printFailover(w io.Writer, fo *FailoverResult) {
	fmt.Fprintf(w, "== failover of %s's master %s onto its lagging replica %s: began at %.1fs, %s promoted at %.1fs (%d edges, redis.wait_replicas %d)\n",
		fo.Product, fo.OldMaster, fo.Replica, fo.StartedS, fo.NewMaster, fo.PromotedS, fo.Edges, fo.WaitReplicas)
	if fo.Err != "" {
		fmt.Fprintln(w, "  failover error:", fo.Err)
	}
	fmt.Fprintln(w, "   purchase answers per second, all products | the hot product alone:")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	head := "t\tphase\t"
	for _, n := range fo.Classes {
		head += n + "\t"
	}
	head += "|\t" + fo.Product + " 200\t409\t410\tDEGRADED\tRECOVERING\tnone\t"
	fmt.Fprintln(tw, head)
	for _, s := range fo.Timeline {
		row := fmt.Sprintf("%d\t%s\t", s.T, s.Phase)
		for _, n := range s.All {
			row += fmt.Sprintf("%d\t", n)
		}
		row += "|\t"
		for _, c := range []int{tlOK, tlLimit, tlSoldOut, tlDegraded, tlRecovering, tlError} {
			row += fmt.Sprintf("%d\t", s.Hot[c])
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "product\tstock\tunits before\tduring\tafter\tclosed s (all 503)\tRECOVERING answers\trecovering s (gauge)\t")
	for _, p := range fo.Products {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t\n", p.Product, p.Stock, p.UnitsBefore, p.UnitsDuring, p.UnitsAfter, p.ClosedS, p.Recovering, p.RecoveringS)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func sortedCmds(m map[string]CmdStat) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]].Calls > m[keys[j]].Calls })
	return keys
}

func machineInfo() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				_, model, _ = strings.Cut(line, ":")
				model = strings.TrimSpace(model)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs %s (%s)", runtime.NumCPU(), model, kernel)
}

// proxyCommit names what the edge was built from: a revision, or the
// working tree's HEAD (+dirty when it has uncommitted changes).
func proxyCommit(root, rev string) string {
	if rev == "" {
		return gitCommit(root)
	}
	cmd := exec.Command("git", "rev-parse", "--short", rev)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return rev
	}
	return strings.TrimSpace(string(out))
}

func gitCommit(root string) string {
	cmd := exec.Command("git", "rev-parse", "--short", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	cmd = exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
		c += "+dirty"
	}
	return c
}

// --- HTML ------------------------------------------------------------------

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"}

// Series is one line of a chart.
type Series struct {
	Name   string
	Color  string
	Points [][2]float64 // x, y
	Dash   bool
}

// lineChart draws series as an inline SVG with a log-scale y axis when
// logY (latencies span decades).
func lineChart(title, xLabel, yLabel string, series []Series, logY bool) template.HTML {
	const W, H, L, R, T, B = 720.0, 260.0, 60.0, 150.0, 28.0, 36.0
	var xmax, ymin, ymax = 0.0, math.Inf(1), 0.0
	for _, s := range series {
		for _, p := range s.Points {
			xmax = math.Max(xmax, p[0])
			if p[1] > 0 {
				ymin = math.Min(ymin, p[1])
			}
			ymax = math.Max(ymax, p[1])
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img">`, W, H, W, H)
	fmt.Fprintf(&b, `<text x="%.0f" y="16" font-size="13" font-weight="bold">%s</text>`, L, template.HTMLEscapeString(title))
	if ymax <= 0 || math.IsInf(ymin, 1) {
		b.WriteString(`<text x="60" y="120" font-size="12">no data</text></svg>`)
		return template.HTML(b.String())
	}
	if xmax <= 0 {
		xmax = 1
	}
	pw, ph := W-L-R, H-T-B
	var ylo, yhi float64
	var ty func(float64) float64
	var ticks []float64
	if logY {
		ylo, yhi = math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
		if yhi <= ylo {
			yhi = ylo + 1
		}
		ty = func(v float64) float64 {
			v = math.Max(v, math.Pow(10, ylo))
			return T + ph - (math.Log10(v)-ylo)/(yhi-ylo)*ph
		}
		for e := ylo; e <= yhi; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
	} else {
		ylo, yhi = 0, niceCeil(ymax)
		ty = func(v float64) float64 { return T + ph - v/yhi*ph }
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, yhi*float64(i)/4)
		}
	}
	tx := func(v float64) float64 { return L + v/xmax*pw }
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ccc"/>`, L, T, pw, ph)
	for _, v := range ticks {
		y := ty(v)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/>`, L, L+pw, y, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="10" text-anchor="end">%s</text>`, L-4, y+3, fmtNum(v))
	}
	for i := 0; i <= 5; i++ {
		v := xmax * float64(i) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="10" text-anchor="middle">%s</text>`, tx(v), T+ph+14, fmtNum(v))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" text-anchor="middle">%s</text>`, L+pw/2, H-4, template.HTMLEscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="12" y="%.0f" font-size="11" transform="rotate(-90 12 %.0f)" text-anchor="middle">%s</text>`, T+ph/2, T+ph/2, template.HTMLEscapeString(yLabel))
	for i, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", tx(p[0]), ty(p[1])))
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`, s.Color, dash, strings.Join(pts, " "))
		if len(s.Points) <= 30 {
			for _, p := range s.Points {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.2" fill="%s"/>`, tx(p[0]), ty(p[1]), s.Color)
			}
		}
		ly := T + 10 + float64(i)*15
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="2"%s/>`, L+pw+10, L+pw+28, ly, ly, s.Color, dash)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11">%s</text>`, L+pw+32, ly+4, template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// histogramChart draws latency buckets (log-spaced) as bars.
func histogramChart(title string, buckets []Bucket, color string) template.HTML {
	const W, H, L, R, T, B = 720.0, 220.0, 60.0, 20.0, 28.0, 40.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img">`, W, H, W, H)
	fmt.Fprintf(&b, `<text x="%.0f" y="16" font-size="13" font-weight="bold">%s</text>`, L, template.HTMLEscapeString(title))
	var cmax int64
	for _, k := range buckets {
		cmax = max(cmax, k.Count)
	}
	if cmax == 0 {
		b.WriteString(`<text x="60" y="110" font-size="12">no data</text></svg>`)
		return template.HTML(b.String())
	}
	pw, ph := W-L-R, H-T-B
	ymax := niceCeil(float64(cmax))
	bw := pw / float64(len(buckets))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ccc"/>`, L, T, pw, ph)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		y := T + ph - v/ymax*ph
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/>`, L, L+pw, y, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="10" text-anchor="end">%s</text>`, L-4, y+3, fmtNum(v))
	}
	step := max(1, len(buckets)/10)
	for i, k := range buckets {
		h := float64(k.Count) / ymax * ph
		x := L + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s–%s ms: %d</title></rect>`,
			x+0.5, T+ph-h, math.Max(bw-1, 0.5), h, color, fmtNum(k.Lo), fmtNum(k.Hi), k.Count)
		if i%step == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="10" text-anchor="middle">%s</text>`, x, T+ph+13, fmtNum(k.Lo))
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" text-anchor="middle">latency, ms (log scale, 5 buckets per decade)</text>`, L+pw/2, H-6)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v >= 1:
		return fmt.Sprintf("%.4g", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(a, b int64) string {
		if b == 0 {
			return "0"
		}
		return fmt.Sprintf("%.1f", 100*float64(a)/float64(b))
	},
	"codes": func(m map[string]int64) string {
		var parts []string
		for _, k := range sortedKeys(m) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		return strings.Join(parts, ", ")
	},
	"f2": func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"f0": func(v float64) string { return fmt.Sprintf("%.0f", v) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bench {{.R.Scenario}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}.ok{color:#080}.bad{color:#b00;font-weight:bold}
code,pre{background:#f6f6f6;padding:2px 4px}pre{padding:8px;overflow-x:auto}
</style></head><body>
<h1>bench: {{.R.Scenario}}</h1>
<p>{{.R.Description}}</p>
<p>{{.R.Machine}} · {{.R.Started.Format "2006-01-02 15:04 UTC"}} · {{.R.GoVersion}} · commit {{.R.Commit}} · {{.R.Target}} ·
edge GOMAXPROCS={{.R.EdgeGoMaxProcs}} · pinned={{.R.Pinned}} · kafka={{.R.Kafka}} · consumer={{.R.Consumer}} · clickhouse={{.R.ClickHouse}}</p>
<p>{{.Load}}</p>
<pre>{{.R.ResultLine}}</pre>
<h2>Endpoints</h2>
<p>Latency is measured from each request's <em>intended</em> send time (open loop: no coordinated omission).
{{.R.Arrived}} shoppers over {{f2 .R.Seconds}} s; bench's own send lag p99 {{f2 .R.SendLag.P99}} ms, max {{f2 .R.SendLag.Max}} ms.</p>
<table><tr><th>endpoint</th><th>requests</th><th>req/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>2xx</th><th>4xx</th><th>5xx</th><th>no answer</th><th>codes</th></tr>
{{range .R.Endpoints}}<tr><td>{{.Name}}</td><td>{{.Count}}</td><td>{{f0 .RPS}}</td><td>{{f2 .P50}}</td><td>{{f2 .P90}}</td><td>{{f2 .P99}}</td><td>{{f2 .P999}}</td><td>{{f2 .Max}}</td>
<td>{{index .Classes "2xx"}}</td><td>{{index .Classes "4xx"}}</td><td>{{index .Classes "5xx"}}</td><td>{{index .Classes "error"}}</td><td style="text-align:left">{{codes .Codes}}</td></tr>
{{end}}<tr><th>all</th><th>{{.R.Total.Count}}</th><th>{{f0 .R.Total.RPS}}</th><th>{{f2 .R.Total.P50}}</th><th>{{f2 .R.Total.P90}}</th><th>{{f2 .R.Total.P99}}</th><th>{{f2 .R.Total.P999}}</th><th>{{f2 .R.Total.Max}}</th><th colspan="5"></th></tr></table>
<h2>Latency over time</h2>
{{.P99Chart}}
{{.RateChart}}
{{range .PerEndpoint}}{{.}}{{end}}
<h2>Latency histograms</h2>
{{range .Hists}}{{.}}{{end}}
<h2>Resources</h2>
<table><tr><th>process</th><th>CPU % of one CPU</th><th>CPU s</th><th>RSS MB</th><th>peak RSS MB</th></tr>
{{range .R.Processes}}<tr><td>{{.Name}}</td><td>{{f2 .CPUPct}}</td><td>{{f2 .CPUSeconds}}</td><td>{{f0 .RSSMB}}</td><td>{{f0 .PeakRSSMB}}</td></tr>{{end}}
<tr><td>machine (everything)</td><td>{{f2 .R.MachineBusyPct}}</td><td colspan="3"></td></tr></table>
{{if .R.ServerLatency}}<h3>The edge's own latency (request read to response written; bucket bounds)</h3>
<table><tr><th>route</th><th>requests</th><th>p50 ≤ ms</th><th>p99 ≤ ms</th><th>p99.9 ≤ ms</th></tr>
{{range .R.ServerLatency}}<tr><td>{{.Route}}</td><td>{{.Count}}</td><td>{{f2 .P50}}</td><td>{{f2 .P99}}</td><td>{{f2 .P999}}</td></tr>{{end}}</table>{{end}}
{{if .R.RedisCommands}}<h3>Redis commands during the load (INFO commandstats delta)</h3>
<table><tr><th>command</th><th>calls</th><th>µs per call</th><th>total ms</th></tr>
{{range .Cmds}}<tr><td>{{.Name}}</td><td>{{.Calls}}</td><td>{{f2 .PerUs}}</td><td>{{f0 .Ms}}</td></tr>{{end}}</table>{{end}}
{{if .R.Faults}}<h3>Injected faults</h3><table><tr><th>proxy</th><th>connections</th><th>chunks delayed</th><th>stalls</th></tr>
{{range .R.Faults}}<tr><td>{{.Name}}</td><td>{{.Connections}}</td><td>{{.Chunks}}</td><td>{{.Stalls}}</td></tr>{{end}}</table>{{end}}
{{with .R.Failover}}<h2>Failover</h2>
<p>{{.Product}}'s master {{.OldMaster}} failed over onto its lagging replica {{.Replica}}: began at {{f2 .StartedS}} s,
{{.NewMaster}} promoted at {{f2 .PromotedS}} s; {{.Edges}} edges, redis.wait_replicas {{.WaitReplicas}}. {{.Err}}</p>
<table><tr><th>product</th><th>stock</th><th>units before</th><th>during</th><th>after</th><th>closed s (all 503)</th><th>RECOVERING answers</th><th>recovering s (gauge)</th></tr>
{{range .Products}}<tr><td>{{.Product}}</td><td>{{.Stock}}</td><td>{{.UnitsBefore}}</td><td>{{.UnitsDuring}}</td><td>{{.UnitsAfter}}</td><td>{{.ClosedS}}</td><td>{{.Recovering}}</td><td>{{f2 .RecoveringS}}</td></tr>{{end}}</table>
<h3>Purchase answers per second (all products; the hot product below each)</h3>
<table><tr><th>t</th><th>phase</th>{{range .Classes}}<th>{{.}}</th>{{end}}</tr>
{{range .Timeline}}<tr><td>{{.T}}</td><td>{{.Phase}}</td>{{range .All}}<td>{{.}}</td>{{end}}</tr>
<tr style="color:#777"><td></td><td>hot</td>{{range .Hot}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>{{end}}
<h2>Sales and reconciliation</h2>
<table><tr><th>product</th><th>stock</th><th>orders (200)</th><th>units</th><th>503 / no answer</th><th>over stock</th></tr>
{{range .R.Sales}}<tr><td>{{.Product}}</td><td>{{.Stock}}</td><td>{{.Orders}}</td><td>{{.Units}}</td><td>{{.Unknown}}</td><td {{if .OverStock}}class="bad"{{end}}>{{.OverStock}}</td></tr>{{end}}</table>
<p class="{{if .R.Reconcile.Clean}}ok{{else}}bad{{end}}">reconcile: oversold={{.R.Reconcile.Oversold}} lost={{.R.Reconcile.Lost}} duplicated={{.R.Reconcile.Duplicated}} {{.R.Reconcile.Err}}</p>
<pre>{{.R.Reconcile.Text}}</pre>
{{range .R.Notes}}<p>note: {{.}}</p>{{end}}
{{if .R.Profile}}<h2>Edge CPU profile</h2><pre>{{.R.Profile}}</pre>{{end}}
</body></html>
`))

type cmdRow struct {
	Name      string
	Calls     int64
	PerUs, Ms float64
}

func renderHTML(w io.Writer, r *Result) error {
	var p99, rate []Series
	var perEndpoint, hists []template.HTML
	for i, e := range r.Endpoints {
		c := palette[i%len(palette)]
		var s99, sr, s50, smax []([2]float64)
		for _, pt := range e.Series {
			x := pt.T
			s99 = append(s99, [2]float64{x, pt.P99})
			s50 = append(s50, [2]float64{x, pt.P50})
			smax = append(smax, [2]float64{x, pt.Max})
			sr = append(sr, [2]float64{x, pt.Rate})
		}
		p99 = append(p99, Series{Name: e.Name, Color: c, Points: s99})
		rate = append(rate, Series{Name: e.Name, Color: c, Points: sr})
		perEndpoint = append(perEndpoint, lineChart(e.Name+": latency over time", "seconds since start", "ms (log)", []Series{
			{Name: "p50", Color: "#2ca02c", Points: s50}, {Name: "p99", Color: "#d62728", Points: s99}, {Name: "max", Color: "#777", Points: smax, Dash: true},
		}, true))
		hists = append(hists, histogramChart(fmt.Sprintf("%s: %d requests, p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms", e.Name, e.Count, e.P50, e.P99, e.P999), e.Hist, c))
	}
	var cmds []cmdRow
	for _, k := range sortedCmds(r.RedisCommands) {
		c := r.RedisCommands[k]
		cmds = append(cmds, cmdRow{Name: k, Calls: c.Calls, PerUs: c.PerUs, Ms: float64(c.Usec) / 1000})
	}
	return reportTmpl.Execute(w, map[string]any{
		"R":           r,
		"Load":        describeLoad(r.Config),
		"P99Chart":    lineChart("p99 latency over time, by endpoint", "seconds since start", "ms (log)", p99, true),
		"RateChart":   lineChart("answers per second, by endpoint", "seconds since start", "requests/s", rate, false),
		"PerEndpoint": perEndpoint,
		"Hists":       hists,
		"Cmds":        cmds,
	})
}

// runResult is a run's Result head: the scenario, the machine, the build
// and the flags the edges run with.
func runResult(root string, sc *Scenario, f runFlags) *Result {
	return &Result{Scenario: sc.Name, Description: sc.Description, Started: time.Now().UTC(), Config: sc,
		Machine: machineInfo(), GoVersion: runtime.Version(), Commit: proxyCommit(root, f.proxyRev),
		EdgeGoMaxProcs: f.gomaxprocs, Kafka: f.kafka, Consumer: f.consumer, ClickHouse: f.clickhouse}
}
