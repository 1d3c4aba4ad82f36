package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The tables and the result line bench compare prints.

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
