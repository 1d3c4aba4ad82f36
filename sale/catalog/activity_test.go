package catalog

import (
	"encoding/json"
	"flashgate/conf"
	"strings"
	"testing"
	"time"
)

func TestParsePrice(t *testing.T) {
	good := map[string]int64{"0": 0, "99": 9900, "99.9": 9990, "99.00": 9900, "0.05": 5, "1234567.89": 123456789}
	for in, want := range good {
		if got, err := ParsePrice(in); err != nil || got != want {
			t.Errorf("ParsePrice(%q) = %d, %v; want %d", in, got, err, want)
		}
		if back := string(AppendPrice(nil, want)); in == "99.00" && back != "99.00" {
			t.Errorf("AppendPrice = %q", back)
		}
	}
	for _, in := range []string{"", "-1", "1.", ".5", "1.234", "abc", "1e3", "99,00", "12345678901"} {
		if _, err := ParsePrice(in); err == nil {
			t.Errorf("ParsePrice(%q) accepted", in)
		}
	}
}

func TestParseTime(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if ms, err := ParseTime("+30s", base); err != nil || ms != base.Add(30*time.Second).UnixMilli() {
		t.Fatalf("+30s: %d %v", ms, err)
	}
	if ms, err := ParseTime("2026-11-11T00:00:00+08:00", base); err != nil || ms != time.Date(2026, 11, 10, 16, 0, 0, 0, time.UTC).UnixMilli() {
		t.Fatalf("rfc3339: %d %v", ms, err)
	}
	for _, in := range []string{"", "tomorrow", "+1x", "2026-11-11"} {
		if _, err := ParseTime(in, base); err == nil {
			t.Errorf("ParseTime(%q) accepted", in)
		}
	}
}

func TestConfigBuildErrorsNameFields(t *testing.T) {
	base := time.Now()
	cases := map[string]conf.ActivityConfig{
		"product_id": {ProductID: "bad id!", Name: "x", Price: "1", Stock: 1, Start: "+0s", End: "+1h"},
		"price":      {ProductID: "p", Name: "x", Price: "-3", Stock: 1, Start: "+0s", End: "+1h"},
		"end":        {ProductID: "p", Name: "x", Price: "1", Stock: 1, Start: "+1h", End: "+0s"},
		"stock":      {ProductID: "p", Name: "x", Price: "1", Stock: -5, Start: "+0s", End: "+1h"},
		"limit":      {ProductID: "p", Name: "x", Price: "1", Stock: 1, Limit: -1, Start: "+0s", End: "+1h"},
		"name":       {ProductID: "p", Price: "1", Stock: 1, Start: "+0s", End: "+1h"},
	}
	for path, c := range cases {
		_, errs := Build(c, base)
		found := false
		for _, e := range errs {
			found = found || e.Path == path
		}
		if !found {
			t.Errorf("%s: errors %v do not name the field", path, errs)
		}
	}
	a, errs := Build(conf.ActivityConfig{ProductID: "p1", Name: "Sneaker", Price: "99.00", Stock: 100, Start: "+0s", End: "+1h"}, base)
	if len(errs) > 0 || a.Limit != 1 || a.PriceCents != 9900 {
		t.Fatalf("good config: %+v %v", a, errs)
	}
}

func TestPhases(t *testing.T) {
	a := &Sale{StartMs: 1000, EndMs: 2000}
	for _, tc := range []struct {
		now     int64
		soldOut bool
		want    Phase
	}{{999, false, Upcoming}, {1000, false, Active}, {1500, true, SoldOut}, {2000, false, Ended}, {2500, true, Ended}} {
		if got := a.PhaseAt(tc.now, tc.soldOut); got != tc.want {
			t.Errorf("PhaseAt(%d, %v) = %v, want %v", tc.now, tc.soldOut, got, tc.want)
		}
	}
}

func TestStatusJSONAndStateSurvivesReplace(t *testing.T) {
	r := NewRegistry()
	r.Put(&Sale{ProductID: "p1", Name: `Flash "Sneaker" <b>`, PriceCents: 9900, Stock: 100, Limit: 2, StartMs: 0, EndMs: 1 << 50})
	e, ok := r.Get([]byte("p1"))
	if !ok {
		t.Fatal("missing")
	}
	e.SetSoldOut(true)
	e.SetRemaining(0)
	// A replacement of the activity keeps the flag.
	r.Replace([]*Sale{{ProductID: "p1", Name: "New", PriceCents: 1, Stock: 100, Limit: 1, EndMs: 1 << 50}})
	e, _ = r.Get([]byte("p1"))
	if !e.SoldOut() {
		t.Fatal("sold-out flag lost on replace")
	}
	var got map[string]any
	buf := e.AppendStatus(nil, 12345)
	if err := json.Unmarshal(buf, &got); err != nil {
		t.Fatalf("invalid JSON %s: %v", buf, err)
	}
	if got["status"] != "soldout" || got["serverTimeMs"] != float64(12345) || got["price"] != "0.01" || got["remaining"] != float64(0) {
		t.Fatalf("status %s", buf)
	}
	r.Put(&Sale{ProductID: "p2", Name: `<script>`, EndMs: 10})
	e2, _ := r.Get([]byte("p2"))
	if s := string(e2.AppendStatus(nil, 1)); strings.Contains(s, "<script>") {
		t.Fatalf("unescaped: %s", s)
	}
}

func TestAppendStatusAllocs(t *testing.T) {
	r := NewRegistry()
	r.Put(&Sale{ProductID: "p1", Name: "New", PriceCents: 1, Stock: 100, Limit: 1, EndMs: 1 << 50})
	e, _ := r.Get([]byte("p1"))
	e.SetRemaining(0)
	buf := e.AppendStatus(nil, 1)
	if n := testing.AllocsPerRun(100, func() { buf = e.AppendStatus(buf[:0], 1) }); n != 0 {
		t.Fatalf("AppendStatus allocs %v", n)
	}
}

func TestHotspot(t *testing.T) {
	var s State
	crossed := 0
	for i := 0; i < 50; i++ {
		if s.Hit(5000, 10) {
			crossed++
		}
	}
	if crossed != 1 || !s.Hot() {
		t.Fatalf("crossed %d hot %v", crossed, s.Hot())
	}
	s.Hit(6000, 10) // the previous full second was hot: stays hot
	if !s.Hot() {
		t.Fatal("hot flag dropped although the last second was hot")
	}
	s.Hit(9000, 10) // a quiet gap
	if s.Hot() {
		t.Fatal("still hot after a quiet gap")
	}
}
