package proxy_test

import (
	"net"
	"strings"
	"testing"

	"flashgate/internal/edgetest"
)

// degraded reads the degrade switch of p1 the way an operator does.
func degraded(t *testing.T, admin string) bool {
	t.Helper()
	code, body := adminCall{method: "GET", path: "/admin/degrade"}.do(t, admin)
	if code != 200 {
		t.Fatalf("GET /admin/degrade: %d %s", code, body)
	}
	return strings.Contains(body, `"p1"`)
}

// TestAdminRefusesWebPages: a page the operator's browser opens can post a
// form to the loopback admin listener, and with DNS rebinding read its
// answers. The cross-site form that degraded a sale (text/plain, the JSON
// hidden in a field name) must change nothing; a rebinding Host must read
// nothing; an operator's curl and the dashboard's own calls still work.
func TestAdminRefusesWebPages(t *testing.T) {
	e := edgetest.Start(t, edgetest.WriteConfig(t, guardConfig), nil)
	_, port, _ := net.SplitHostPort(e.Admin)
	form := `{"productId":"p1","on":true}=`

	refused := []struct {
		name   string
		call   adminCall
		status int
	}{
		{"cross-site text/plain form", adminCall{method: "POST", path: "/admin/degrade", contentType: "text/plain", origin: "http://evil.example", body: form}, 415},
		{"text/plain form, Origin stripped", adminCall{method: "POST", path: "/admin/degrade", contentType: "text/plain", body: form}, 415},
		{"urlencoded form", adminCall{method: "POST", path: "/admin/degrade", contentType: "application/x-www-form-urlencoded", body: form}, 415},
		{"multipart form", adminCall{method: "POST", path: "/admin/degrade", contentType: "multipart/form-data; boundary=x", body: "--x\r\nContent-Disposition: form-data; name=\"" + form + "\"\r\n\r\n\r\n--x--\r\n"}, 415},
		{"no-cors fetch without a body", adminCall{method: "POST", path: "/admin/reload", origin: "http://evil.example"}, 415},
		{"JSON from another origin", adminCall{method: "POST", path: "/admin/degrade", contentType: "application/json", origin: "http://evil.example", body: `{"productId":"p1","on":true}`}, 403},
		{"JSON from a sandboxed frame", adminCall{method: "POST", path: "/admin/degrade", contentType: "application/json", origin: "null", body: `{"productId":"p1","on":true}`}, 403},
		{"JSON with a rebinding Host", adminCall{method: "POST", path: "/admin/degrade", host: "evil.example:" + port, contentType: "application/json", body: `{"productId":"p1","on":true}`}, 403},
		{"PUT as text/plain", adminCall{method: "PUT", path: "/admin/degrade", contentType: "text/plain", body: form}, 415},
	}
	for _, tc := range refused {
		if code, body := tc.call.do(t, e.Admin); code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.status)
		}
	}
	if degraded(t, e.Admin) {
		t.Fatal("a refused call degraded p1")
	}
	if v := e.Srv.Snapshot().Version; v != 1 {
		t.Fatalf("a refused call reloaded the config (version %d)", v)
	}

	// DNS rebinding: the attacker's name now points at 127.0.0.1; its page
	// reads what it fetches as same-origin, with its own name in Host.
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "sub.localhost:" + port} {
		for _, path := range []string{"/admin/config", "/metrics", "/admin/dashboard.json", "/admin/"} {
			code, body := adminCall{method: "GET", path: path, host: host, origin: "http://" + host}.do(t, e.Admin)
			if code != 403 || strings.Contains(body, "node_id") || strings.Contains(body, "flashgate_") {
				t.Errorf("GET %s with Host %s: %d %.120s, want 403", path, host, code, body)
			}
		}
	}
	// The probes say nothing and stay open to any load balancer.
	if code, _ := (adminCall{method: "GET", path: "/healthz", host: "lb.internal"}).do(t, e.Admin); code != 200 {
		t.Errorf("healthz with another Host: %d", code)
	}

	// An operator's curl (the listener's own address, localhost, an IP),
	// and the dashboard's same-origin calls.
	for _, host := range []string{"", "localhost:" + port, "LOCALHOST", "[::1]:" + port, "10.1.2.3:19901"} {
		if code, body := (adminCall{method: "GET", path: "/admin/config", host: host}).do(t, e.Admin); code != 200 || !strings.Contains(body, "node_id") {
			t.Errorf("GET /admin/config with Host %q: %d %.120s", host, code, body)
		}
	}
	on := adminCall{method: "POST", path: "/admin/degrade", contentType: "application/json; charset=utf-8", body: `{"productId":"p1","on":true}`}
	if code, body := on.do(t, e.Admin); code != 200 {
		t.Fatalf("curl-style degrade: %d %s", code, body)
	}
	if !degraded(t, e.Admin) {
		t.Fatal("the operator's degrade did not take")
	}
	off := adminCall{method: "POST", path: "/admin/degrade", contentType: "application/json", origin: "http://" + e.Admin, body: `{"productId":"p1","on":false}`}
	if code, body := off.do(t, e.Admin); code != 200 || degraded(t, e.Admin) {
		t.Fatalf("same-origin degrade off: %d %s", code, body)
	}
	if code, body := (adminCall{method: "POST", path: "/admin/reload", contentType: "application/json", origin: "http://" + e.Admin}).do(t, e.Admin); code != 200 {
		t.Fatalf("same-origin reload: %d %s", code, body)
	}
}

// TestAdminHostsAndTokenRules: a name in admin.hosts is answered (the name
// Prometheus scrapes), and the checks come before, not instead of, the
// token.
func TestAdminHostsAndTokenRules(t *testing.T) {
	const token = "guard-test-admin-token-0123456789"
	e := edgetest.Start(t, edgetest.WriteConfig(t, guardConfig,
		`admin: {token: "`+token+`", hosts: ["Edge-Admin.internal."]}`), nil)
	_, port, _ := net.SplitHostPort(e.Admin)
	for _, tc := range []struct {
		name   string
		call   adminCall
		status int
	}{
		{"listed name with the token", adminCall{method: "GET", path: "/metrics", host: "edge-admin.internal:" + port, token: token}, 200},
		{"listed name, no token", adminCall{method: "GET", path: "/metrics", host: "edge-admin.internal"}, 401},
		{"unlisted name with the token", adminCall{method: "GET", path: "/metrics", host: "other.internal:" + port, token: token}, 403},
		{"form with the token", adminCall{method: "POST", path: "/admin/degrade", contentType: "text/plain", token: token, body: `{"productId":"p1","on":true}=`}, 415},
		{"JSON without the token", adminCall{method: "POST", path: "/admin/degrade", contentType: "application/json", body: `{"productId":"p1","on":true}`}, 401},
		{"JSON with the token", adminCall{method: "POST", path: "/admin/degrade", contentType: "application/json", token: token, body: `{"productId":"p1","on":false}`}, 200},
	} {
		if code, body := tc.call.do(t, e.Admin); code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.status)
		}
	}
}
