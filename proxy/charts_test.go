package proxy

import (
	"context"
	"testing"
	"time"

	"flashgate/proxy/dashboard"
	"flashgate/proxy/report"
)

// TestChartsSampleAnswersAndMarks: `do` answers counted on the request path
// reach the ring as one second's codes and latency, the sale's record in its
// timeline in Redis says the same, and the degrade switch leaves its markers.
func TestChartsSampleAnswersAndMarks(t *testing.T) {
	e, jwt := soldOutEdge(t, allocEdgeChain)
	srv := e.srv
	srv.stopCharts() // the test ticks its own sampler
	<-srv.chartsDone
	sp := srv.newSampler()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	sp.tick(ctx, now) // first sight: nothing answered yet

	const n = 7
	for range n {
		c := requestCtx("POST", "/api/seckill/do", `{"productId":"p1","token":"x","quantity":1}`, jwt)
		srv.Handle(c)
		if c.Response.StatusCode() != 410 {
			t.Fatalf("do: %d", c.Response.StatusCode())
		}
	}
	if _, err := srv.Sale().SetDegraded(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	sp.tick(ctx, now+1000)
	if _, err := srv.Sale().SetDegraded(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	sp.tick(ctx, now+2000)

	v := srv.history.View(now)
	if len(v.T) != 2 || len(v.Products) != 1 || v.Products[0].ProductID != "p1" {
		t.Fatalf("view: %+v", v)
	}
	p := v.Products[0]
	if p.Attempts[0] != n || p.Codes[dashboard.CodeIndex(410)][0] != n || p.Attempts[1] != 0 {
		t.Fatalf("attempts %v, 410s %v; want %d then 0", p.Attempts, p.Codes[dashboard.CodeIndex(410)], n)
	}
	if p.P50[0] <= 0 || p.P99[0] < p.P50[0] || p.P50[1] != -1 {
		t.Fatalf("latency p50 %v p99 %v", p.P50, p.P99)
	}
	if p.Left[0] != 0 {
		t.Fatalf("left %v, want 0 (sold out)", p.Left)
	}
	kinds := []string{}
	for _, m := range v.Marks {
		kinds = append(kinds, m.Kind)
	}
	if len(kinds) != 2 || kinds[0] != dashboard.MarkDegradeOn || kinds[1] != dashboard.MarkDegradeOff {
		t.Fatalf("marks %v, want degrade on then off", kinds)
	}

	recs, err := srv.Store().Timeline(ctx, "p1", now/1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []report.Second
	for _, b := range recs {
		r, err := report.DecodeSecond(b)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	// The first sight writes the sale's state; the busy second its answers;
	// the third its flags going back (degrade off).
	if len(got) != 3 || got[1].Sec != (now+1000)/1000 || got[1].Codes[dashboard.CodeIndex(410)] != n ||
		got[1].Flags&report.FlagDegraded == 0 || got[2].Flags&report.FlagDegraded != 0 {
		t.Fatalf("timeline records %+v", got)
	}
	var lat uint32
	for _, c := range got[1].Buckets {
		lat += c
	}
	if lat != n {
		t.Fatalf("latency buckets hold %d answers, want %d", lat, n)
	}
	// A quiet second writes nothing.
	sp.tick(ctx, now+3000)
	if again, _ := srv.Store().Timeline(ctx, "p1", now/1000); len(again) != 3 {
		t.Fatalf("a quiet second was written: %d records", len(again))
	}
}

// TestFleetSumsTheEdges: GET /admin/dashboard/fleet sums every edge's
// records of the sales' timelines by second: this edge's and another's
// (written here as that edge would), each edge's attempts kept apart.
func TestFleetSumsTheEdges(t *testing.T) {
	e, jwt := soldOutEdge(t, allocEdgeChain)
	srv := e.srv
	srv.stopCharts()
	<-srv.chartsDone
	sp := srv.newSampler()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	for range 4 {
		srv.Handle(requestCtx("POST", "/api/seckill/do", `{"productId":"p1","token":"x","quantity":1}`, jwt))
	}
	sp.tick(ctx, now)
	other := report.Second{Node: 9, Sec: now / 1000, Left: 0, Joined: -1, Waiting: -1, Admitted: -1, Active: -1}
	other.Codes[dashboard.CodeIndex(200)] = 6
	other.Buckets[5] = 6
	if err := srv.Store().AppendTimeline(ctx, "p1", other.Sec, other.Append(nil)); err != nil {
		t.Fatal(err)
	}
	v, err := srv.fleet(ctx, now-5000)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Products) != 1 || v.Products[0].ProductID != "p1" {
		t.Fatalf("products %+v", v.Products)
	}
	s := v.Products[0].Series
	k := int(now/1000 - s.FromSec)
	if len(s.Nodes) != 2 || s.Nodes[1] != 9 || s.Attempts[k] != 10 || s.ByNode["9"][k] != 6 || s.ByNode["0"][k] != 4 {
		t.Fatalf("nodes %v attempts %v by node %v (second %d)", s.Nodes, s.Attempts, s.ByNode, k)
	}
	if s.Codes[dashboard.CodeIndex(200)][k] != 6 || s.Codes[dashboard.CodeIndex(410)][k] != 4 || v.All.Attempts[k] != 10 {
		t.Fatalf("codes %v all %v", s.Codes, v.All.Attempts)
	}
}

// BenchmarkChartsObserve is what a `do` answer costs the charts on the
// request path: the sale's stats by name, its code, its latency bucket.
func BenchmarkChartsObserve(b *testing.B) {
	c := newChartStats()
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		c.get(id)
	}
	id := []byte("p3")
	b.ReportAllocs()
	for b.Loop() {
		c.observe(id, 200, 1500*time.Microsecond)
	}
}

// BenchmarkHistoryAdd is the sampler's once-a-second copy into the ring.
func BenchmarkHistoryAdd(b *testing.B) {
	h := dashboard.NewHistory()
	f := &dashboard.Frame{N: 4}
	for k := range 4 {
		f.IDs[k] = "p" + string(rune('1'+k))
	}
	b.ReportAllocs()
	for b.Loop() {
		f.TimeMs += 1000
		h.Add(f)
	}
}
