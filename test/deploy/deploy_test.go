package deploy

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/internal/promtest"
)

var (
	root      = filepath.Join("..", "..")
	rulesFile = filepath.Join(root, "deploy", "prometheus", "flashgate.rules.yml")
	dashFile  = filepath.Join(root, "deploy", "grafana", "flashgate.json")
)

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	if _, err := os.Stat(promtest.Promtool); err != nil {
		t.Fatal(promtest.MissingHint)
	}
	cmd := exec.Command(promtest.Promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestShippedRules: promtool accepts the rules and the example config, and
// the rules' own unit tests pass.
func TestShippedRules(t *testing.T) {
	dir := filepath.Join(root, "deploy", "prometheus")
	promtool(t, dir, "check", "rules", "flashgate.rules.yml")
	if out := promtool(t, dir, "test", "rules", "flashgate.rules.test.yml"); !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
	// --syntax-only: the token file it names lives on the Prometheus host.
	promtool(t, dir, "check", "config", "--syntax-only", "prometheus.yml")
}

type rule struct {
	Alert, Record, Expr, For string
	Labels, Annotations      map[string]string
}

func readRules(t *testing.T, src []byte) []rule {
	t.Helper()
	var f struct {
		Groups []struct{ Rules []rule }
	}
	if err := yaml.Unmarshal(src, &f); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// TestRulesTestCopy: the copy the e2e test runs differs from the shipped
// rules only in `for:`, and promtool accepts it.
func TestRulesTestCopy(t *testing.T) {
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	short, err := promtest.Rules(src, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	shipped, copied := readRules(t, src), readRules(t, short)
	if len(shipped) != len(copied) || len(shipped) == 0 {
		t.Fatalf("%d rules shipped, %d in the copy", len(shipped), len(copied))
	}
	alerts := 0
	for i, r := range shipped {
		c := copied[i]
		if r.For != "" {
			alerts++
			if c.For != "1500ms" {
				t.Errorf("%s: for %q in the copy", r.Alert, c.For)
			}
		}
		c.For = r.For
		if fmt.Sprint(c) != fmt.Sprint(r) {
			t.Errorf("the copy changed more than for:\n%v\n%v", r, c)
		}
	}
	if alerts < 10 {
		t.Fatalf("only %d rules with for:", alerts)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "short.yml"), short, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "short.yml")
}

// TestDashboardQueries: the dashboard has the dashboard page's views and
// every panel's PromQL parses (promtool checks them as recording rules).
func TestDashboardQueries(t *testing.T) {
	src, err := os.ReadFile(dashFile)
	if err != nil {
		t.Fatal(err)
	}
	panels, err := promtest.DashboardQueries(src)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for _, p := range panels {
		all.WriteString(p.Expr + "\n")
	}
	for _, view := range []string{"flashgate_sale_attempts_total", "flashgate_http_requests_total", "flashgate_sale_do_duration_seconds_bucket",
		"flashgate_sale_stock_remaining", "flashgate_waitroom_waiting", "flashgate_waitroom_admitted", "flashgate_waitroom_active",
		"flashgate_orders_unpaid", "flashgate_orders_paid", "flashgate_orders_expired", "flashgate_outbox_pending", "flashgate_orders_consumer_lag"} {
		if !strings.Contains(all.String(), view+"{") {
			t.Errorf("no panel charts %s", view)
		}
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, p := range panels {
		fmt.Fprintf(&rules, "      - record: panel_%d\n        expr: %q\n", i, p.Expr)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "panels.yml"), []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "panels.yml")
}

// TestNamedSeriesAreRegistered: every flashgate_ series the rules and the
// dashboard read is a family the code registers (a histogram's by its
// name without _bucket, _sum or _count).
func TestNamedSeriesAreRegistered(t *testing.T) {
	registered := map[string]bool{}
	family := regexp.MustCompile(`"(flashgate_[a-z0-9_]+)"`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "test" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range family.FindAllSubmatch(b, -1) {
			registered[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	src, _ := os.ReadFile(rulesFile)
	for _, r := range readRules(t, src) {
		text.WriteString(r.Expr + "\n")
	}
	dash, _ := os.ReadFile(dashFile)
	panels, err := promtest.DashboardQueries(dash)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range panels {
		text.WriteString(p.Expr + "\n")
	}
	names := promtest.SeriesNames(text.String())
	if len(names) < 20 {
		t.Fatalf("only %d series named", len(names))
	}
	for n := range names {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suf); ok && registered[b] {
				base = b
			}
		}
		if !registered[base] {
			t.Errorf("%s is read by the rules or the dashboard and registered nowhere", n)
		}
	}
}
