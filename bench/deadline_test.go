package main

import (
	"testing"

	"flashgate/internal/redistest"
	"flashgate/orders/stock"
)

// TestSummarizeDeadlines: the sweep's span counts both ends' milliseconds,
// the rate is over it, and the percentiles are nearest-rank.
func TestSummarizeDeadlines(t *testing.T) {
	closed := []int64{1000, 1499, 1200, 1100}
	late := []float64{40, 10, 30, 20}
	d := summarizeDeadlines(closed, late)
	if d.sweepS != 0.5 || d.perSec != 8 || d.lastMs != 1499 {
		t.Errorf("span %.3fs rate %.1f/s last %d, want 0.5s, 8/s, 1499", d.sweepS, d.perSec, d.lastMs)
	}
	if d.p50 != 20 || d.p99 != 40 || d.max != 40 {
		t.Errorf("p50 %.0f p99 %.0f max %.0f, want 20 40 40", d.p50, d.p99, d.max)
	}
	var late100 []float64
	var closed100 []int64
	for i := range 100 {
		late100 = append(late100, float64(100-i))
		closed100 = append(closed100, 5000)
	}
	d = summarizeDeadlines(closed100, late100)
	if d.p50 != 50 || d.p99 != 99 || d.sweepS != 0.001 {
		t.Errorf("100 releases in one ms: p50 %.0f p99 %.0f span %.3fs, want 50 99 0.001s", d.p50, d.p99, d.sweepS)
	}
	if d := summarizeDeadlines(nil, nil); d.perSec != 0 || d.p99 != 0 {
		t.Errorf("no releases: %+v, want zeros", d)
	}
	if _, late, n, err := deadlineStates(nil, "p", nil); late != nil || n != 0 || err != nil {
		t.Errorf("no orders: %v %d %v", late, n, err)
	}
}

// TestDeadlineStatesReadsBothLayouts: an expired order written as a string,
// one in its order bucket hash (ledger "b") and one written as a hash (an
// older edge's) all count, with their lateness; an unpaid one and a missing
// one count as unreleased.
func TestDeadlineStatesReadsBothLayouts(t *testing.T) {
	srv := redistest.New(t)
	rc, err := dialRedis(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, cmd := range [][]string{
		{"SET", stock.OrderKey("p", 1), "E:alice:1:1999:1000:1:5000:0:5040"},
		{"HSET", stock.OrderKey("p", 2), "state", "expired", "user", "bob", "payby", "6000", "closed", "6010"},
		{"SET", stock.OrderKey("p", 3), "s:carol:1:1999:1000:1:9000"},
		{"HSET", stock.OrderBucketKey("p", 5), "5", "E:dave:1:1999:1000:1:7000:0:7020"},
	} {
		if _, err := rc.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	closed, late, unreleased, err := deadlineStates(rc, "p", []int64{1, 2, 3, 4, 5})
	if err != nil || len(closed) != 3 || closed[0] != 5040 || closed[1] != 6010 || closed[2] != 7020 ||
		late[0] != 40 || late[1] != 10 || late[2] != 20 || unreleased != 2 {
		t.Fatalf("deadlineStates = %v %v %d %v", closed, late, unreleased, err)
	}
}

// TestParseEdgePoints: the -edges list, and the refusals naming the bad item.
func TestParseEdgePoints(t *testing.T) {
	if p, err := parseEdgePoints("1, 2"); err != nil || len(p) != 2 || p[0] != 1 || p[1] != 2 {
		t.Errorf("1, 2: %v %v", p, err)
	}
	for _, bad := range []string{"", "0", "5", "1,x"} {
		if _, err := parseEdgePoints(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
