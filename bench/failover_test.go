package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFailoverScenarioDefaults(t *testing.T) {
	sc, err := parseScenario([]byte("mode: open\nrate: 10\nduration: 20s\nhot: 0.5\nsteps:\n  - call: do\nfailover:\n  at: 5s\n"), "x.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if fo := sc.Failover; fo == nil || fo.At != 5*time.Second || fo.Edges != 2 || fo.Timeout != 30*time.Second {
		t.Fatalf("failover %+v, want at 5s, 2 edges, timeout 30s", sc.Failover)
	}
}

func TestPickProductSendsTheHotShareToP1(t *testing.T) {
	g := newGenerator(&Scenario{Products: 4, Hot: 0.8, Connections: 2}, []string{"a:1", "b:2"}, nil, nil)
	rnd := rand.New(rand.NewPCG(1, 2))
	var n [4]int
	const picks = 20000
	for range picks {
		n[g.pickProduct(rnd)]++
	}
	if share := float64(n[0]) / picks; share < 0.78 || share > 0.82 {
		t.Fatalf("p1 got %.3f of the shoppers, want about 0.8 (%v)", share, n)
	}
	for p := 1; p < 4; p++ {
		if share := float64(n[p]) / picks; share < 0.055 || share > 0.078 {
			t.Fatalf("p%d got %.3f, want about 0.2/3 (%v)", p+1, share, n)
		}
	}
	g.sc.Hot = 0
	n = [4]int{}
	for range picks {
		n[g.pickProduct(rnd)]++
	}
	if float64(n[0])/picks > 0.27 {
		t.Fatalf("without a hot share p1 got %v of %d", n[0], picks)
	}
}

func TestTimelineCountsPhasesAndClosedSeconds(t *testing.T) {
	t0 := time.Now()
	tl := newTimeline(t0, 2, 1)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tl.addAt(at(0.1), 0, 200, "")
	tl.addAt(at(0.2), 1, 200, "")
	tl.addAt(at(0.3), 0, 410, "SOLD_OUT")
	tl.phase.Store(phaseDuring)
	tl.addAt(at(1.1), 0, 503, "DEGRADED")
	tl.addAt(at(1.2), 0, 0, "TIMEOUT")
	tl.addAt(at(1.3), 1, 200, "")
	tl.phase.Store(phaseAfter)
	tl.addAt(at(2.1), 0, 503, "RECOVERING")
	tl.addAt(at(2.2), 0, 503, "RECOVERING")
	tl.addAt(at(3.5), 0, 200, "")
	tl.addAt(at(3.6), 0, 200, "")
	tl.addAt(at(3.7), 0, 409, "LIMIT_REACHED")

	fo := &FailoverResult{Product: "p1", StartedS: 1.0, PromotedS: 2.0}
	tl.result(fo, 100)
	if len(fo.Timeline) != 4 {
		t.Fatalf("%d seconds, want 4", len(fo.Timeline))
	}
	wantPhase := []string{"before", "failover", "after", "after"}
	for i, s := range fo.Timeline {
		if s.Phase != wantPhase[i] {
			t.Errorf("second %d phase %q, want %q", i, s.Phase, wantPhase[i])
		}
	}
	if s := fo.Timeline[1]; s.All[tlDegraded] != 1 || s.All[tlError] != 1 || s.All[tlOK] != 1 || s.Hot[tlOK] != 0 {
		t.Errorf("second 1: all %v hot %v", s.All, s.Hot)
	}
	p1, p2 := fo.Products[0], fo.Products[1]
	if p1.UnitsBefore != 1 || p1.UnitsDuring != 0 || p1.UnitsAfter != 2 || p2.UnitsBefore != 1 || p2.UnitsDuring != 1 {
		t.Errorf("units p1 %+v p2 %+v", p1, p2)
	}
	// p1: seconds 1 and 2 got only 503s or no answer; p2 had no purchase
	// then, which is not closed.
	if p1.ClosedS != 2 || p1.Recovering != 2 || p2.ClosedS != 0 {
		t.Errorf("closed p1 %+v p2 %+v", p1, p2)
	}
	if fo.Totals["200"] != 5 || fo.Totals["503 RECOVERING"] != 2 || fo.Totals["409"] != 1 || fo.Totals["no answer"] != 1 {
		t.Errorf("totals %v", fo.Totals)
	}
	var out bytes.Buffer
	printFailover(&out, fo)
	for _, want := range []string{"503 RECOVERING", "p1 200", "closed s (all 503)", "failover"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRecoveringProductsReadsTheGauge(t *testing.T) {
	metrics := "# TYPE flashgate_sale_recovering gauge\n" +
		"flashgate_sale_recovering{product=\"p1\"} 1\n" +
		"flashgate_sale_recovering{product=\"p2\"} 0\n" +
		"flashgate_sale_recovering{node=\"1\",product=\"p3\"} 1\n" +
		"flashgate_sale_recoveries_total{product=\"p4\"} 3\n"
	got := recoveringProducts([]byte(metrics))
	if len(got) != 2 || !got["p1"] || !got["p3"] {
		t.Fatalf("recovering %v, want p1 and p3", got)
	}
}

func TestProxyReconcileReadsTheVerdict(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, out string, code int) string {
		// A stand-in for the proxy binary: what `proxy reconcile` prints
		// and how it exits is all proxyReconcile reads.
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\nprintf '%s\\n' '" + out + "'\nexit " + string(rune('0'+code)) + "\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	if r := proxyReconcile(ctx, fake("clean", "RECONCILE products=4 oversold=0 lost=0 duplicated=0", 0), "x.yaml"); !r.Clean || r.Products != 4 || r.Err != "" {
		t.Errorf("clean run: %+v", r)
	}
	if r := proxyReconcile(ctx, fake("over", "RECONCILE products=4 oversold=12 lost=0 duplicated=0", 1), "x.yaml"); r.Clean || r.Oversold != 12 || r.Err == "" {
		t.Errorf("oversold run: %+v", r)
	}
	if r := proxyReconcile(ctx, fake("broken", "proxy reconcile: cannot reach redis", 1), "x.yaml"); r.Clean || !strings.Contains(r.Err, "no RECONCILE line") {
		t.Errorf("failed run: %+v", r)
	}
}

func TestWaitReplicasMergesIntoTheEdgeSection(t *testing.T) {
	sc := &Scenario{Edge: map[string]any{"redis": map[string]any{"max_flush_delay": "1ms"}}}
	sc.setWaitReplicas(1)
	redis := sc.Edge["redis"].(map[string]any)
	if redis["wait_replicas"] != 1 || redis["max_flush_delay"] != "1ms" {
		t.Fatalf("edge section %v", sc.Edge)
	}
	sc = &Scenario{}
	sc.setWaitReplicas(2)
	if sc.Edge["redis"].(map[string]any)["wait_replicas"] != 2 {
		t.Fatalf("edge section %v", sc.Edge)
	}
}
