package proxy_test

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"flashgate/internal/edgetest"
	"flashgate/internal/redistest"
	"flashgate/internal/syncbuf"
)

// TestDemoLoginWarnsAtStartAndReload: demo login on is said loudly when
// the edge starts and again on every reload, so no operator runs it
// unaware.
func TestDemoLoginWarnsAtStartAndReload(t *testing.T) {
	logs := &syncbuf.Buffer{}
	e := edgetest.Start(t, edgetest.WriteConfig(t, guardConfig, "auth: {demo_login: true}"),
		slog.New(slog.NewTextHandler(logs, nil)))
	if n := strings.Count(logs.String(), "DEMO LOGIN IS ON"); n != 1 {
		t.Fatalf("%d demo-login warnings at start, want 1:\n%s", n, logs)
	}
	if code, body := (adminCall{method: "POST", path: "/admin/reload", contentType: "application/json"}).do(t, e.Admin); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	out := logs.String()
	if strings.Count(out, "DEMO LOGIN IS ON") != 2 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "trigger=admin") {
		t.Fatalf("no demo-login warning on reload:\n%s", out)
	}
}

// TestDemoLoginOverRealRedis: forced on a test rig over a real Redis it
// starts, with an error-level line; on an edge running on a real Redis a
// reload that turns it on, with a file naming the embedded Redis (redis
// changes on restart only), is refused and changes nothing.
func TestDemoLoginOverRealRedis(t *testing.T) {
	redisAddr := redistest.Start(t)
	real := fmt.Sprintf("redis: {addr: %q}\n", redisAddr)

	logs := &syncbuf.Buffer{}
	edgetest.Start(t, edgetest.WriteConfig(t, guardConfig, real, "auth: {demo_login: true, demo_login_force: true}"),
		slog.New(slog.NewTextHandler(logs, nil)))
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "DEMO LOGIN IS ON over real servers") || !strings.Contains(out, "real_servers=redis") {
		t.Fatalf("forced demo login over a real Redis not said loudly:\n%s", out)
	}

	path := edgetest.WriteConfig(t, guardConfig, real, "auth: {demo_login: false}", "node_id: 2")
	e := edgetest.Start(t, path, nil)
	v := e.Srv.Snapshot().Version
	login := func() int {
		t.Helper()
		code, _ := adminCall{method: "POST", path: "/api/login", contentType: "application/json", body: `{"userId":"anyone"}`}.do(t, e.Addr)
		return code
	}
	if code := login(); code != 404 {
		t.Fatalf("demo login answered %d with demo_login off", code)
	}
	swapped := edgetest.WriteConfig(t, guardConfig, "auth: {demo_login: true}", "node_id: 2")
	b, err := os.ReadFile(swapped)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = e.Srv.Reload("test")
	if err == nil || !strings.Contains(err.Error(), "auth.demo_login") || !strings.Contains(err.Error(), "redis") {
		t.Fatalf("reload turning demo login on over a real Redis: %v", err)
	}
	if e.Srv.Snapshot().Version != v || login() != 404 {
		t.Fatal("the refused reload changed the running edge")
	}
}
