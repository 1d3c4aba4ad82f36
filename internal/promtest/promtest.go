package promtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/internal/proctest"
)

// Binary is Debian's Prometheus server; Promtool its rules checker.
const (
	Binary   = "/usr/bin/prometheus"
	Promtool = "/usr/bin/promtool"
)

// MissingHint says how to install what this package runs.
const MissingHint = "prometheus not installed: apt-get install -y prometheus (scripts/test.sh does)"

// Config is what one Prometheus scrapes and evaluates.
type Config struct {
	// Job is the scrape job's name (the shipped rules expect "flashgate").
	Job string
	// Targets are host:port of the edges' admin listeners.
	Targets []string
	// Token is the admin token, sent as a Bearer credential (from a file,
	// as deploy/prometheus/prometheus.yml does).
	Token string
	// Rules is the content of one rules file.
	Rules []byte
	// Interval is both the scrape and the rule evaluation interval.
	Interval time.Duration
}

// Server is one Prometheus child process.
type Server struct {
	proc *proctest.Child
	port int
	hc   *http.Client
}

// Start runs Prometheus in t.TempDir() until the test ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Fatal(MissingHint)
	}
	dir := t.TempDir()
	s := &Server{hc: &http.Client{Timeout: 10 * time.Second}}
	if err := writeConfig(dir, cfg); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "prometheus.log")
	s.proc = proctest.NewChild(dir, false, proctest.Spec{
		Name: func() string { return fmt.Sprintf("prometheus on port %d", s.port) },
		Command: func() *exec.Cmd {
			return exec.Command(Binary,
				"--config.file="+filepath.Join(dir, "prometheus.yml"),
				"--storage.tsdb.path="+filepath.Join(dir, "data"),
				"--web.listen-address="+s.Addr(),
				"--log.level=warn",
			)
		},
		Output:  logPath,
		Log:     func() []byte { return proctest.Tail(logPath) },
		Ready:   s.ready,
		Probe:   "/-/ready",
		Timeout: 30 * time.Second,
		Backoff: 5 * time.Millisecond,
	})
	err := s.proc.Launch(func() (err error) {
		s.port, err = proctest.FreePort()
		return err
	})
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	t.Cleanup(s.proc.Close)
	return s
}

// writeConfig writes prometheus.yml, the rules and the token file.
func writeConfig(dir string, cfg Config) error {
	every := Duration(cfg.Interval)
	tokenFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte(cfg.Token), 0o600); err != nil {
		return err
	}
	rules := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rules, cfg.Rules, 0o644); err != nil {
		return err
	}
	job := map[string]any{
		"job_name":        cfg.Job,
		"scrape_interval": every,
		"scrape_timeout":  every,
		"static_configs":  []any{map[string]any{"targets": cfg.Targets}},
	}
	if cfg.Token != "" {
		job["authorization"] = map[string]any{"type": "Bearer", "credentials_file": tokenFile}
	}
	out, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": every, "evaluation_interval": every},
		"rule_files":     []string{rules},
		"scrape_configs": []any{job},
	})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "prometheus.yml"), out, 0o644)
}

// Addr is host:port of Prometheus's web listener.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Log is the tail of Prometheus's log, for a failing test's message.
func (s *Server) Log() string {
	return string(proctest.Tail(filepath.Join(s.proc.Dir(), "prometheus.log")))
}

func (s *Server) ready() error {
	resp, err := s.hc.Get("http://" + s.Addr() + "/-/ready")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/-/ready: %d", resp.StatusCode)
	}
	return nil
}

// get decodes the data of one API answer into v.
func (s *Server) get(path string, q url.Values, v any) error {
	resp, err := s.hc.Get("http://" + s.Addr() + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %d: %w", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

// Alert is one alert of /api/v1/alerts.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"` // pending or firing
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// Name is the alert's alertname.
func (a Alert) Name() string { return a.Labels["alertname"] }

// Alerts is every pending and firing alert.
func (s *Server) Alerts() ([]Alert, error) {
	var d struct {
		Alerts []Alert `json:"alerts"`
	}
	err := s.get("/api/v1/alerts", nil, &d)
	return d.Alerts, err
}

// Sample is one series of an instant vector.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query runs an instant query, which must give a vector.
func (s *Server) Query(expr string) ([]Sample, error) {
	var d struct {
		ResultType string   `json:"resultType"`
		Result     []Sample `json:"result"`
	}
	if err := s.get("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("%s: a %s, not a vector", expr, d.ResultType)
	}
	return d.Result, nil
}

// Names is every metric name Prometheus holds samples of.
func (s *Server) Names() (map[string]bool, error) {
	var names []string
	if err := s.get("/api/v1/label/__name__/values", nil, &names); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// Rules is a rules file with every rule's `for:` set to forDur, and
// nothing else changed: a test runs the shipped alerts at its own pace.
func Rules(src []byte, forDur time.Duration) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("an empty rules file")
	}
	groups := value(doc.Content[0], "groups")
	if groups == nil || groups.Kind != yaml.SequenceNode || len(groups.Content) == 0 {
		return nil, errors.New("no rule groups")
	}
	for _, g := range groups.Content {
		rules := value(g, "rules")
		if rules == nil {
			continue
		}
		for _, r := range rules.Content {
			if f := value(r, "for"); f != nil {
				f.SetString(Duration(forDur))
			}
		}
	}
	return yaml.Marshal(&doc)
}

// Duration is d as Prometheus writes durations (no fractions: 1500ms).
func Duration(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// Records lists the recording rules' names of a rules file.
func Records(src []byte) ([]string, error) {
	var f struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(src, &f); err != nil {
		return nil, err
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out = append(out, r.Record)
			}
		}
	}
	return out, nil
}

// value is the value node of key in mapping node m, or nil.
func value(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// Panel is one query of a Grafana dashboard.
type Panel struct {
	Title, RefID, Expr string
}

// DashboardQueries lists the PromQL of every target of every panel of a
// Grafana dashboard JSON (rows' nested panels included).
func DashboardQueries(src []byte) ([]Panel, error) {
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(src, &d); err != nil {
		return nil, err
	}
	var out []Panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, Panel{Title: p.Title, RefID: tg.RefID, Expr: strings.TrimSpace(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, nil
}

// seriesName matches a flashgate series in PromQL, not the middle of a
// recording rule's name (level:metric:operations).
var seriesName = regexp.MustCompile(`(?:^|[^:\w])(flashgate_[a-z0-9_]+)`)

// SeriesNames is every flashgate_ series named in PromQL text.
func SeriesNames(promql string) map[string]bool {
	out := map[string]bool{}
	for _, m := range seriesName.FindAllStringSubmatch(promql, -1) {
		out[m[1]] = true
	}
	return out
}
