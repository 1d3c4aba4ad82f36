package report

import (
	"reflect"
	"testing"

	"flashgate/proxy/dashboard"
)

func rec(node, sec int64, ok, soldOut uint32, bucket int, flags uint8, left int64) Second {
	r := Second{Node: node, Sec: sec, Flags: flags, Left: left, Joined: -1, Waiting: -1, Admitted: -1, Active: -1}
	r.Codes[dashboard.CodeIndex(200)] = ok
	r.Codes[dashboard.CodeIndex(410)] = soldOut
	r.Buckets[bucket] = ok + soldOut
	return r
}

func TestRecordRoundTrip(t *testing.T) {
	r := rec(3, 1_796_000_000, 12, 5, 4, FlagDegraded|FlagBreakerOpen, 88)
	r.Joined, r.Waiting, r.Admitted, r.Active = 1000, 400, 600, 20
	b := r.Append(nil)
	got, err := DecodeSecond(b)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip: %+v %v, want %+v", got, err, r)
	}
	for _, bad := range [][]byte{nil, {9}, b[:len(b)-1], b[:5]} {
		if _, err := DecodeSecond(bad); err == nil {
			t.Errorf("DecodeSecond(%x) accepted a broken record", bad)
		}
	}
}

func TestAggregateSumsEdgesAndCarriesForward(t *testing.T) {
	recs := []Second{
		rec(1, 98, 0, 0, 0, FlagRecovering, 50), // before the span: seeds flags and stock
		rec(2, 100, 10, 0, 3, 0, 40),
		rec(1, 100, 5, 2, 9, FlagRecovering, 42),
		rec(1, 102, 0, 0, 0, 0, 30), // edge 1 recovered
		rec(2, 105, 1, 0, 3, 0, 29), // past the span
	}
	s := Aggregate(recs, 99, 103)
	if !reflect.DeepEqual(s.Nodes, []int64{1, 2}) {
		t.Fatalf("nodes %v", s.Nodes)
	}
	if !reflect.DeepEqual(s.Attempts, []uint64{0, 17, 0, 0, 0}) || !reflect.DeepEqual(s.ByNode["2"], []uint64{0, 10, 0, 0, 0}) {
		t.Fatalf("attempts %v by node %v", s.Attempts, s.ByNode)
	}
	if s.Codes[dashboard.CodeIndex(200)][1] != 15 || s.Codes[dashboard.CodeIndex(410)][1] != 2 {
		t.Fatalf("codes %v", s.Codes)
	}
	if !reflect.DeepEqual(s.Left, []int64{50, 40, 40, 30, 30}) {
		t.Fatalf("left carried %v", s.Left)
	}
	if !reflect.DeepEqual(s.Flags, []uint8{FlagRecovering, FlagRecovering, FlagRecovering, 0, 0}) {
		t.Fatalf("flags %v", s.Flags)
	}
	if s.P50[0] != -1 || s.P50[1] <= 0 || s.P99[1] < s.P50[1] {
		t.Fatalf("latency %v %v", s.P50, s.P99)
	}
	if s.Buckets[3] != 10 || s.Buckets[9] != 7 {
		t.Fatalf("span buckets %v", s.Buckets)
	}
}
