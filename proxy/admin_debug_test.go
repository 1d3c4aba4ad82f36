package proxy_test

import (
	"net"
	"strings"
	"testing"

	"flashgate/internal/edgetest"
)

// TestDebugPprofBehindAdminRules: the profiler on the admin listener is an
// admin path like the others: refused without the token, refused to a web
// page (another Origin, a rebinding Host) even with it, served to an
// operator with it; cmdline is not served at all.
func TestDebugPprofBehindAdminRules(t *testing.T) {
	const token = "pprof-test-admin-token-0123456789"
	e := edgetest.Start(t, edgetest.WriteConfig(t, guardConfig, `admin: {token: "`+token+`"}`), nil)
	_, port, _ := net.SplitHostPort(e.Admin)

	refused := []struct {
		name   string
		call   adminCall
		status int
	}{
		{"heap without the token", adminCall{method: "GET", path: "/debug/pprof/heap"}, 401},
		{"index without the token", adminCall{method: "GET", path: "/debug/pprof/"}, 401},
		{"CPU profile with a wrong token", adminCall{method: "GET", path: "/debug/pprof/profile?seconds=1", token: "wrong-token-wrong-token-0123456"}, 401},
		{"goroutines from another origin, with the token", adminCall{method: "GET", path: "/debug/pprof/goroutine?debug=1", origin: "http://evil.example", token: token}, 403},
		{"goroutines with a rebinding Host, with the token", adminCall{method: "GET", path: "/debug/pprof/goroutine?debug=1", host: "evil.example:" + port, token: token}, 403},
		{"a form post, with the token", adminCall{method: "POST", path: "/debug/pprof/heap", contentType: "text/plain", token: token}, 415},
		{"JSON post, with the token", adminCall{method: "POST", path: "/debug/pprof/heap", contentType: "application/json", token: token}, 405},
		{"cmdline, with the token", adminCall{method: "GET", path: "/debug/pprof/cmdline", token: token}, 404},
		{"symbol, with the token", adminCall{method: "GET", path: "/debug/pprof/symbol", token: token}, 404},
		{"a CPU profile of an hour", adminCall{method: "GET", path: "/debug/pprof/profile?seconds=3600", token: token}, 400},
		{"a trace of no time", adminCall{method: "GET", path: "/debug/pprof/trace?seconds=0", token: token}, 400},
	}
	for _, tc := range refused {
		code, body := tc.call.do(t, e.Admin)
		if code != tc.status {
			t.Errorf("%s: %d %.200s, want %d", tc.name, code, body, tc.status)
		}
		if strings.Contains(body, "goroutine profile") || strings.HasPrefix(body, "\x1f\x8b") {
			t.Errorf("%s: a profile was sent", tc.name)
		}
	}

	// The operator, with the token.
	code, body := adminCall{method: "GET", path: "/debug/pprof/", token: token}.do(t, e.Admin)
	if code != 200 || !strings.Contains(body, `href="heap"`) || strings.Contains(body, "cmdline") {
		t.Fatalf("index: %d %.300s", code, body)
	}
	code, body = adminCall{method: "GET", path: "/debug/pprof/goroutine?debug=1", token: token}.do(t, e.Admin)
	if code != 200 || !strings.Contains(body, "goroutine profile: total") {
		t.Fatalf("goroutines: %d %.300s", code, body)
	}
	for _, p := range []string{"/debug/pprof/heap", "/debug/pprof/allocs", "/debug/pprof/profile?seconds=1"} {
		code, body = adminCall{method: "GET", path: p, token: token, host: "localhost:" + port}.do(t, e.Admin)
		if code != 200 || !strings.HasPrefix(body, "\x1f\x8b") { // a profile is gzipped protobuf
			t.Errorf("%s: %d, %d bytes %q...", p, code, len(body), body[:min(len(body), 40)])
		}
	}
}

// TestDebugPprofWithoutTokenStillGuarded: on a loopback admin listener
// without a token the profiler answers an operator's curl, but not a web
// page the operator's browser opens.
func TestDebugPprofWithoutTokenStillGuarded(t *testing.T) {
	e := edgetest.Start(t, edgetest.WriteConfig(t, guardConfig), nil)
	_, port, _ := net.SplitHostPort(e.Admin)
	for _, c := range []adminCall{
		{method: "GET", path: "/debug/pprof/goroutine?debug=1", origin: "http://evil.example"},
		{method: "GET", path: "/debug/pprof/goroutine?debug=1", host: "evil.example:" + port, origin: "http://evil.example:" + port},
	} {
		if code, body := c.do(t, e.Admin); code != 403 || strings.Contains(body, "goroutine profile") {
			t.Errorf("%+v: %d %.200s, want 403", c, code, body)
		}
	}
	if code, body := (adminCall{method: "GET", path: "/debug/pprof/goroutine?debug=1"}).do(t, e.Admin); code != 200 || !strings.Contains(body, "goroutine profile: total") {
		t.Fatalf("curl: %d %.200s", code, body)
	}
}
