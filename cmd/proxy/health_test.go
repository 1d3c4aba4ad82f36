package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"flashgate/conf"
)

func TestLoopbackAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9901":          "127.0.0.1:9901",
		"0.0.0.0:9901":   "127.0.0.1:9901",
		"[::]:9901":      "[::1]:9901",
		"127.0.0.1:9901": "127.0.0.1:9901",
		"10.0.0.5:9901":  "10.0.0.5:9901",
		"localhost:9901": "localhost:9901",
		"[::1]:9901":     "[::1]:9901",
		"not an address": "not an address",
	} {
		if got := loopbackAddr(in); got != want {
			t.Errorf("loopbackAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// proxy health exits 0 only while an admin listener answers /healthz 200.
func TestHealthSubcommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var status atomic.Int32
	status.Store(http.StatusOK)
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		w.Write([]byte("ok\n"))
	}))
	t.Setenv("FLASHGATE_TEST_HEALTH_ADDR", "0.0.0.0:"+strings.Split(ln.Addr().String(), ":")[1])
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	os.WriteFile(cfg, []byte("admin:\n  addr: env:FLASHGATE_TEST_HEALTH_ADDR\n  token: 0123456789abcdef0123\n"), 0o644)

	var out, errb bytes.Buffer
	if code := run([]string{"health", "-c", cfg}, &out, &errb); code != 0 {
		t.Fatalf("health against a live listener: exit %d: %s", code, errb.String())
	}
	status.Store(http.StatusServiceUnavailable)
	if code := run([]string{"health", "-c", cfg}, &out, &errb); code == 0 {
		t.Fatal("health passes on a 503")
	}
	ln.Close()
	status.Store(http.StatusOK)
	errb.Reset()
	if code := run([]string{"health", "-c", cfg}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "proxy health") {
		t.Fatalf("health with nothing listening: exit %d: %s", code, errb.String())
	}
}

// An edge whose stand-ins cannot write data_dir says which setting to
// change before anything starts.
func TestCheckDataDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	c := conf.Defaults()
	c.DataDir = filepath.Join(file, "data") // under a file: never a directory
	err := checkDataDir(c)
	if err == nil || !strings.Contains(err.Error(), "data_dir") || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("data_dir under a file: %v", err)
	}
	c.DataDir = filepath.Join(dir, "data")
	if err := checkDataDir(c); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(c.DataDir); len(left) != 0 {
		t.Fatalf("the check left %v behind", left)
	}
	c.DataDir = file + "/x"
	c.Redis.Addr, c.Kafka.Brokers, c.ClickHouse.Addr = "127.0.0.1:6379", []string{"127.0.0.1:9092"}, "127.0.0.1:9000"
	if err := checkDataDir(c); err != nil {
		t.Fatalf("no stand-in uses data_dir, yet it is checked: %v", err)
	}
}
