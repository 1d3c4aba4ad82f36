package main

import (
	"bytes"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func eq(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestCPUPerPurchaseTable: a round's per-request CPU by process becomes CPU
// per purchase made (refused attempts are not purchases), split into the
// server, Redis, the broker, the consumer and the rest; flashgate's rounds,
// shared by the two attempts targets, give one row; the A/B row divides B
// by A column by column.
func TestCPUPerPurchaseTable(t *testing.T) {
	fg := func(edge float64) Sample {
		return Sample{Server: "flashgate", Requests: 1000, Codes: map[string]int64{"OK": 800, "SOLD_OUT": 200},
			PerProc: map[string]float64{"edge": edge, "redis": 8, "kafka": 2, "orders": 4, "origin": 0.4, "edge-b": 0.4}}
	}
	fgb := func(edge float64) Sample {
		s := fg(edge)
		s.Server = "flashgate-b"
		s.PerProc = map[string]float64{"edge-b": edge, "redis": 8, "kafka": 2, "orders": 4, "origin": 0.4, "edge": 0.4}
		return s
	}
	or := Sample{Server: "openresty", Requests: 500, Codes: map[string]int64{"OK": 500}, PerProc: map[string]float64{"openresty": 10, "redis": 9}}
	rb := Sample{Server: "redis-benchmark", Requests: 500, PerProc: map[string]float64{"redis": 9}}
	cmps := []*Comparison{
		{Name: "soldout", Rounds: [][2]Sample{{{Server: "flashgate", Requests: 9, PerProc: map[string]float64{"edge": 1}}, {}}}},
		{Name: "attempts-redis", Rounds: [][2]Sample{{fg(16), rb}, {fg(24), rb}, {fg(20), rb}}},
		{Name: "attempts-openresty", Rounds: [][2]Sample{{fg(16), or}, {fg(24), or}, {fg(20), or}}},
		{Name: "ab-attempts", Rounds: [][2]Sample{{fgb(8), fg(16)}, {fgb(12), fg(24)}}},
		{Name: "ab-page", Rounds: [][2]Sample{{fgb(1), fg(1)}}},
	}
	rows := sortedRows(cpuTable(cmps))
	var got []string
	for _, r := range rows {
		got = append(got, r.Target+"/"+r.Server)
	}
	if strings.Join(got, " ") != "ab-attempts/flashgate ab-attempts/flashgate-b attempts/flashgate attempts/openresty" {
		t.Fatalf("rows %v", got)
	}
	a := rows[2]
	// Per purchase: 1000 requests, 800 purchases -> x1.25; the median round's edge is 20.
	want := CPUSplit{Purchases: 800, Edge: 25, Redis: 10, Broker: 2.5, Consumer: 5, Other: 1, Total: 43.5}
	if len(a.Rounds) != 3 || !eq(a.Median.Edge, want.Edge) || !eq(a.Median.Redis, want.Redis) || !eq(a.Median.Broker, want.Broker) ||
		!eq(a.Median.Consumer, want.Consumer) || !eq(a.Median.Other, want.Other) || !eq(a.Median.Total, want.Total) || a.Median.Purchases != 800 {
		t.Fatalf("flashgate row %+v, want %+v", a.Median, want)
	}
	if o := rows[3].Median; !eq(o.Edge, 10) || !eq(o.Redis, 9) || o.Broker != 0 || o.Consumer != 0 {
		t.Fatalf("openresty row %+v", o)
	}
	var buf bytes.Buffer
	printCPUTable(&buf, rows)
	out := buf.String()
	// B's edge: median of 8 and 12 per request = 10 x 1.25 = 12.5; A's 20 x 1.25 = 25: B/A 0.50.
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 8 {
			lines[f[0]+" "+f[1]] = strings.Join(f[2:], " ")
		}
	}
	for k, w := range map[string]string{
		"attempts flashgate":      "25.0 10.0 2.5 5.0 1.0 43.5 3",
		"attempts openresty":      "10.0 9.0 0.0 0.0 0.0 19.0 3",
		"ab-attempts flashgate-b": "12.5 10.0 2.5 5.0 1.0 31.0 2",
		"ab-attempts B/A":         "0.50 1.00 1.00 1.00 1.00 0.71",
	} {
		if lines[k] != w {
			t.Errorf("%s: %q, want %q in\n%s", k, lines[k], w, out)
		}
	}
}

// TestABRoundsAlternate: A/B rounds run A B, B A, A B, and keep each pair
// B first, so the ratio is B/A whatever order measured it.
func TestABRoundsAlternate(t *testing.T) {
	c := &comparer{f: compareFlags{rounds: 4, duration: time.Second, dirtyPct: 25}, log: io.Discard}
	var order []int
	cmp := &Comparison{Name: "ab-page"}
	err := c.abRounds(cmp, func(side int) (Sample, error) {
		order = append(order, side)
		rps := 100.0
		if side == 1 {
			rps = 150
		}
		return Sample{Server: map[int]string{0: "flashgate", 1: "flashgate-b"}[side], RPS: rps}, nil
	}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if got := order; len(got) != 8 || got[0] != 0 || got[1] != 1 || got[2] != 1 || got[3] != 0 || got[4] != 0 || got[6] != 1 {
		t.Fatalf("order %v, want A B B A A B B A", got)
	}
	cmp.finish()
	if len(cmp.Ratios) != 4 || !eq(cmp.Median, 1.5) {
		t.Fatalf("ratios %v median %v, want B/A 1.5 each round", cmp.Ratios, cmp.Median)
	}
}
