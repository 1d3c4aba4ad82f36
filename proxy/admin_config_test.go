package proxy_test

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"flashgate/internal/edgetest"
)

// TestAdminConfigOverHTTP reads /admin/config from a real edge as an
// operator does: the list of session secrets and the purchase-token secret
// (which let anyone sign sessions and tokens) never appear, and each
// filter shows its own settings and whether it is on, so a reload can be
// confirmed.
func TestAdminConfigOverHTTP(t *testing.T) {
	const (
		admin    = "config-test-admin-token-0123456789"
		first    = "session-secret-one-0123456789abcdef0123"
		second   = "session-secret-two-0123456789abcdef0123"
		purchase = "purchase-token-secret-0123456789abcdef"
	)
	e := edgetest.Start(t, edgetest.WriteConfig(t, guardConfig, `
admin: {token: "`+admin+`"}
auth: {secrets: ["`+first+`", "`+second+`"]}
sale: {token_secret: "`+purchase+`"}
filters:
  - type: access
    scope: all
    rules: ["deny 10.6.6.0/24", "allow all"]
  - type: ip_limit
    rate: 20r/s
    burst: 40
    nodelay: true
  - type: conn_limit
    enabled: false
    max: 7
  - type: user_limit
    limits:
      - {rate: 5r/s, burst: 5, nodelay: true}
      - {rate: 50r/m, burst: 10}
`), nil)
	code, body := adminCall{method: "GET", path: "/admin/config", token: admin}.do(t, e.Admin)
	if code != 200 {
		t.Fatalf("GET /admin/config: %d %s", code, body)
	}
	for _, secret := range []string{admin, first, second, purchase, "session-secret", "purchase-token-secret"} {
		if strings.Contains(body, secret) {
			t.Fatalf("%s shown:\n%s", secret, body)
		}
	}
	var got struct {
		Admin struct{ Token string }
		Auth  struct{ Secrets []string }
		Sale  struct {
			TokenSecret string `yaml:"token_secret"`
		}
		Filters []map[string]any
	}
	if err := yaml.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, body)
	}
	if got.Admin.Token != "REDACTED" || got.Sale.TokenSecret != "REDACTED" || len(got.Auth.Secrets) != 2 || got.Auth.Secrets[0] != "REDACTED" || got.Auth.Secrets[1] != "REDACTED" {
		t.Fatalf("secrets not shown as set-but-hidden: %+v\n%s", got, body)
	}
	want := []map[string]any{
		{"type": "access", "enabled": true, "scope": "all", "rules": []any{"deny 10.6.6.0/24", "allow all"}},
		{"type": "ip_limit", "enabled": true, "rate": "20r/s", "burst": 40, "nodelay": true},
		{"type": "conn_limit", "enabled": false, "max": 7},
		{"type": "user_limit", "enabled": true},
	}
	if len(got.Filters) != len(want) {
		t.Fatalf("%d filters, want %d:\n%s", len(got.Filters), len(want), body)
	}
	for i, w := range want {
		for k, v := range w {
			if g := got.Filters[i][k]; !equalYAML(g, v) {
				t.Errorf("filters[%d].%s = %#v, want %#v", i, k, g, v)
			}
		}
	}
	if limits, _ := got.Filters[3]["limits"].([]any); len(limits) != 2 {
		t.Errorf("user_limit's limits: %#v", got.Filters[3]["limits"])
	}
}

func equalYAML(a, b any) bool {
	x, _ := yaml.Marshal(a)
	y, _ := yaml.Marshal(b)
	return string(x) == string(y)
}
