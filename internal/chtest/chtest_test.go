package chtest

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// query runs SQL over the HTTP interface, enough to check the server
// without pulling the driver into this package.
func query(t *testing.T, s *Server, sql string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+s.HTTPAddr()+"/", "text/plain", strings.NewReader(sql))
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", sql, resp.StatusCode, b)
	}
	return strings.TrimSpace(string(b))
}

func TestStartQueryRestartKeepsData(t *testing.T) {
	s := New(t)
	t.Logf("clickhouse-server %s started in %v (native %s)", query(t, s, "SELECT version()"), s.StartTook(), s.Addr())
	query(t, s, "CREATE TABLE default.t (x UInt64) ENGINE = MergeTree ORDER BY x")
	query(t, s, "INSERT INTO default.t VALUES (1), (2), (3)")

	addr := s.Addr()
	s.Stop()
	if _, err := http.Get("http://" + s.HTTPAddr() + "/ping"); err == nil {
		t.Fatal("/ping answered after Stop")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %v", s.StartTook())
	if s.Addr() != addr {
		t.Fatalf("address changed across restart: %s -> %s", addr, s.Addr())
	}
	if got := query(t, s, "SELECT count() FROM default.t"); got != "3" {
		t.Fatalf("count after restart = %s, want 3", got)
	}
	cfg, _ := os.ReadFile(filepath.Join(s.Dir(), "config.xml"))
	if strings.Count(string(cfg), "<listen_host>") != 1 || !strings.Contains(string(cfg), "<listen_host>127.0.0.1</listen_host>") {
		t.Fatalf("config must listen on 127.0.0.1 only")
	}
	if strings.Contains(string(cfg), "/var/lib/clickhouse") || strings.Contains(string(cfg), "/var/log/") {
		t.Fatalf("config still points at system paths")
	}
}

func TestParallelServersGetTheirOwnPorts(t *testing.T) {
	a, b := New(t), New(t)
	if a.Addr() == b.Addr() || a.HTTPAddr() == b.HTTPAddr() {
		t.Fatalf("ports shared: %s %s", a.Addr(), b.Addr())
	}
}

func TestLaunchAndClose(t *testing.T) {
	s, err := Launch("")
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	s.Close()
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Launch's dir not removed: %v", err)
	}
}

func TestMissingBinary(t *testing.T) {
	old := Binary
	Binary = "clickhouse-server-does-not-exist"
	defer func() { Binary = old }()
	_, err := Launch("")
	if err == nil || err.Error() != MissingHint {
		t.Fatalf("err = %v, want %q", err, MissingHint)
	}
}
