package promtest

import (
	"strings"
	"testing"
	"time"
)

func TestRules(t *testing.T) {
	src := "# shipped\ngroups:\n  - name: g\n    rules:\n      - record: r\n        expr: up\n" +
		"      - alert: A\n        expr: up == 0\n        for: 5m # long\n        labels: {for: keep}\n"
	out, err := Rules([]byte(src), 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{"for: 1500ms", "for: keep", "# shipped", "expr: up == 0", "record: r"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q missing from:\n%s", want, got)
		}
	}
	if strings.Contains(got, "5m") || strings.Count(got, "for: 1500ms") != 1 {
		t.Errorf("only the rule's for: changes:\n%s", got)
	}
	if recs, err := Records([]byte(src)); err != nil || len(recs) != 1 || recs[0] != "r" {
		t.Errorf("records %v %v", recs, err)
	}
	for _, bad := range []string{"", "groups: []\n", "rules: []\n", "groups: [\n"} {
		if _, err := Rules([]byte(bad), time.Second); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestDashboardQueries(t *testing.T) {
	src := `{"panels": [
	  {"type": "row", "title": "R", "panels": [{"title": "inner", "targets": [{"refId": "A", "expr": " a "}]}]},
	  {"title": "top", "targets": [{"refId": "A", "expr": "b"}, {"refId": "B", "expr": "c"}]}]}`
	ps, err := DashboardQueries([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Panel{{"inner", "A", "a"}, {"top", "A", "b"}, {"top", "B", "c"}}
	if len(ps) != len(want) {
		t.Fatalf("%v", ps)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("%d: %v, want %v", i, ps[i], want[i])
		}
	}
	if _, err := DashboardQueries([]byte("{")); err == nil {
		t.Error("broken JSON: no error")
	}
}

func TestSeriesNames(t *testing.T) {
	got := SeriesNames(`sum(rate(flashgate_a_total[1m])) / job:flashgate_b:rate1m + flashgate_c_bucket`)
	if len(got) != 2 || !got["flashgate_a_total"] || !got["flashgate_c_bucket"] {
		t.Fatalf("%v", got)
	}
}
