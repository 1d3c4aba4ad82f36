package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// endpointStats is the p50, p99 and p99.9 (ms) of one endpoint of the run,
// NaN if it had no requests.
func (r *Result) endpointStats(name string) (p50, p99, p999 float64) {
	for _, e := range r.Endpoints {
		if e.Name == name && e.Count > 0 {
			return e.P50, e.P99, e.P999
		}
	}
	return math.NaN(), math.NaN(), math.NaN()
}

// waitRoomLine is the waitingroom scenario's RESULT line.
func (r *Result) waitRoomLine() string {
	wr := r.WaitingRoom
	rc := r.Reconcile
	na := func(v int64) string {
		if !rc.Ran || rc.Err != "" && rc.Products == 0 {
			return "NA"
		}
		return fmt.Sprint(v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "RESULT scenario=%s edges=%d shoppers=%d", r.Scenario, wr.Edges, wr.Shoppers)
	for _, n := range wrCallNames {
		if n == "challenge" && wr.PowSolveMs == nil {
			continue
		}
		_, _, p999 := r.endpointStats(n)
		fmt.Fprintf(&b, " %s_p999_ms=%.3f", n, p999)
	}
	var devs []string
	for _, er := range wr.AdminRate {
		if er.Err != "" {
			devs = append(devs, "NA")
		} else {
			devs = append(devs, fmt.Sprintf("%+.1f", er.DevPct))
		}
	}
	fa := wr.Fairness
	fair := fmt.Sprintf("spearman=%.4f chi2=%.1f chi2_df=%d chi2_p=%.3f", fa.Spearman, fa.ChiSq, fa.DF, fa.P)
	if fa.Err != "" {
		fair = "spearman=NA chi2=NA chi2_df=NA chi2_p=NA"
	}
	fmt.Fprintf(&b, " admit_dev_pct=%s out_of_turn=%d sold=%d stock=%d %s lottery_reproduced=%v errors=%d oversold=%s lost=%s duplicated=%s",
		strings.Join(devs, ","), wr.OutOfTurn, wr.Sold, wr.Stock, fair,
		wr.Lottery.Reproduced, r.Errors(), na(rc.Oversold), na(rc.Lost), na(rc.Duplicated))
	fmt.Fprintf(&b, " eta_n=%d eta_first_p90_pct=%.1f eta_half_p90_pct=%.1f", wr.ETA.N, wr.ETA.FirstP90, wr.ETA.HalfP90)
	if p := wr.PowSolveMs; p != nil {
		fmt.Fprintf(&b, " pow_bits=%d pow_solve_p90_ms=%.1f", p.Bits, p.P90)
	}
	return b.String()
}

// printRoom writes the room's figures.
func printRoom(w io.Writer, r *Result) {
	wr := r.WaitingRoom
	fmt.Fprintf(w, "waiting room: %d edges on %s; %d shoppers (%d in the pre-queue, %d after the opening at %s); admission %d/min\n",
		wr.Edges, wr.Redis, wr.Shoppers, wr.PreJoins, wr.PostJoins, wr.OpensAt, wr.AdmitPerMinute)
	for _, n := range wrCallNames {
		if n == "challenge" && wr.PowSolveMs == nil {
			continue
		}
		p50, p99, p999 := r.endpointStats(n)
		verdict := ""
		if n != "do" && !math.IsNaN(p999) {
			verdict = " (target p99.9 < 50 ms: " + map[bool]string{true: "met", false: "MISSED"}[p999 < 50] + ")"
		}
		fmt.Fprintf(w, "  %-6s p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms%s\n", n, p50, p99, p999, verdict)
	}
	fmt.Fprintf(w, "  joined %d (%s); admitted %d; bought %d of stock %d\n", wr.Joined, countList(wr.JoinStatuses), wr.Admitted, wr.Sold, wr.Stock)
	fmt.Fprintf(w, "  journeys ended: %s\n", countList(wr.Outcomes))
	for _, er := range wr.AdminRate {
		if er.Err != "" {
			fmt.Fprintf(w, "  admission, edge %d's GET /admin/waitroom: %s\n", er.Edge, er.Err)
			continue
		}
		fmt.Fprintf(w, "  admission, edge %d's GET /admin/waitroom: %d admitted over %.0fs = %.0f/min, %+.1f%% against %d/min (target within 5%%)\n",
			er.Edge, er.Admitted, wr.RateWindowS, er.PerMinute, er.DevPct, wr.AdmitPerMinute)
	}
	for _, er := range wr.FrontRate {
		fmt.Fprintf(w, "  admission, as edge %d's shoppers saw it (the highest position admitted): +%d over %.0fs = %.0f/min, %+.1f%%\n",
			er.Edge, er.Admitted, wr.RateWindowS, er.PerMinute, er.DevPct)
	}
	fmt.Fprintf(w, "  out of turn: %d (early purchase attempts %d: %s; of them got a token %d; admissions ahead of the schedule N(t) %d)\n",
		wr.OutOfTurn, wr.EarlyTries, countList(wr.EarlyAnswers), wr.EarlySucceeded, wr.AheadOfSchedule)
	fa := wr.Fairness
	if fa.Err != "" {
		fmt.Fprintf(w, "  fairness: %s\n", fa.Err)
	} else {
		fmt.Fprintf(w, "  fairness of the pre-queue (%d shoppers): Spearman rank correlation of arrival and position %.4f; chi-square over deciles %.1f, df %d, p = %.3f\n",
			fa.N, fa.Spearman, fa.ChiSq, fa.DF, fa.P)
	}
	if fa.PostN > 0 {
		fmt.Fprintf(w, "  after the opening (%d shoppers, FIFO): Spearman rank correlation of arrival and position %.4f\n", fa.PostN, fa.PostSpearman)
	}
	if e := wr.ETA; e.N > 0 {
		fmt.Fprintf(w, "  ETA (%d shoppers waiting %.0f s or more): |etaMs − real wait| / real wait at the first estimate p50 %.1f %% p90 %.1f %%, at half-way p50 %.1f %% p90 %.1f %% (target p90 ≤ 10 %%); median real wait − estimate %.0f ms (the poll's delay)\n",
			e.N, e.MinWaitS, e.FirstP50, e.FirstP90, e.HalfP50, e.HalfP90, e.MedianLag)
	} else {
		fmt.Fprintf(w, "  ETA: no shopper waited %.0f s or more with an estimate\n", e.MinWaitS)
	}
	if p := wr.PowSolveMs; p != nil {
		fmt.Fprintf(w, "  proof of work (%d bits) solved by bench's shoppers (Go, one core): p50 %.1f ms p90 %.1f ms over %d joins\n", p.Bits, p.P50, p.P90, p.N)
	}
	l := wr.Lottery
	if l.Err != "" {
		fmt.Fprintf(w, "  lottery: %s\n", l.Err)
	} else {
		fmt.Fprintf(w, "  lottery: %d members, %d listed; SHA-256(key) = commit: %v; HMAC-SHA256(key, ticket) order = the list: %v; shoppers' positions = their ticket's rank: %d (not: %d); reproduced: %v\n",
			l.Members, l.Listed, l.CommitOK, l.OrderOK, l.PositionsOK, l.PositionsBad, l.Reproduced)
	}
	fmt.Fprintln(w)
}

func countList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
