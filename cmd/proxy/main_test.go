package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"flashgate/internal/syncbuf"
)

func TestConfigTestFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join("..", "..", "conf", "edge.yaml")
	var out, errb bytes.Buffer
	if code := run([]string{"-t", "-c", good}, &out, &errb); code != 0 {
		t.Fatalf("shipped config: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "is ok") {
		t.Fatalf("stdout %q", out.String())
	}

	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("node_id: 1\nfilters:\n  - type: ip_limit\n    rate: fast\n"), 0o644)
	out.Reset()
	errb.Reset()
	if code := run([]string{"-t", "-c", broken}, &out, &errb); code == 0 {
		t.Fatal("broken config accepted")
	}
	if msg := errb.String(); !strings.Contains(msg, "filters[0].rate") || !strings.Contains(msg, "line 4") {
		t.Fatalf("error does not name the field and line: %s", msg)
	}

	errb.Reset()
	if code := run([]string{"-t", "-c", filepath.Join(dir, "missing.yaml")}, &out, &errb); code == 0 {
		t.Fatal("missing explicit config accepted")
	}
}

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-version"}, &out, &out); code != 0 || !strings.Contains(out.String(), "flashgate") {
		t.Fatalf("exit %d %q", code, out.String())
	}
}

// TestSIGTERMExitsZero runs the real binary and stops it like an
// orchestrator would.
func TestSIGTERMExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, cfg := buildWithConfig(t)
	cmd := exec.Command(bin, "-c", cfg)
	var logs syncbuf.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "edge started") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("did not start: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Fatalf("logs: %s", logs.String())
	}
}

// buildWithConfig builds the binary into a temporary directory and writes
// a valid config beside it, both listeners on free loopback ports.
func buildWithConfig(t *testing.T) (bin, cfg string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "proxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfg = filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfg, []byte("listen:\n  addr: \"127.0.0.1:0\"\nadmin:\n  addr: \"127.0.0.1:0\"\nlog:\n  format: text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin, cfg
}

func TestPprofFlag(t *testing.T) {
	good := filepath.Join("..", "..", "conf", "edge.yaml")
	for _, addr := range []string{"0.0.0.0:0", ":6060", "10.1.2.3:6060", "example.com:6060", "nonsense"} {
		var out, errb bytes.Buffer
		if code := run([]string{"-c", good, "-pprof", addr}, &out, &errb); code != 2 {
			t.Fatalf("-pprof %s: exit %d, want 2 (refused before anything starts): %s", addr, code, errb.String())
		}
		if !strings.Contains(errb.String(), "-pprof") {
			t.Fatalf("-pprof %s: the error does not name the flag: %s", addr, errb.String())
		}
	}

	a, err := startPprof("127.0.0.1:0", 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + a.String() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pprof/cmdline: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + a.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the profiler's listener serves more than the profiler: /metrics %d", resp.StatusCode)
	}
}
