package conf

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"flashgate/conf/field"
	"flashgate/internal/yamlmerge"
)

// TestDemoLoginRefusedWithRealServers: the shipped edge.yaml turns demo
// login on; an operator who points it at a real Redis, Kafka or ClickHouse
// and changes nothing else must get a config error naming auth.demo_login,
// not an edge where anyone signs in as anyone. The embedded demo keeps it,
// and demo_login_force keeps it on purpose.
func TestDemoLoginRefusedWithRealServers(t *testing.T) {
	for _, tc := range []struct {
		name, override string
		refused        string // "" = loads
	}{
		{"embedded demo", "", ""},
		{"real redis", "redis: {addr: \"10.0.0.5:6379\"}", "(redis)"},
		{"redis URL with a password", "redis: {addr: \"redis://:hunter2-pw@10.0.0.5:6379\"}", "(redis)"},
		{"redis sentinel", "redis: {sentinel: {master_set: m, addrs: [\"10.0.0.5:26379\"]}}", "(redis)"},
		{"real kafka", "kafka: {brokers: [\"k1:9092\"]}", "(kafka)"},
		{"real clickhouse", "clickhouse: {addr: \"127.0.0.1:9000\"}", "(clickhouse)"},
		{"all three", "redis: {addr: \"r:6379\"}\nkafka: {brokers: [\"k1:9092\"]}\nclickhouse: {addr: \"c:9000\"}", "(redis, kafka, clickhouse)"},
		{"forced on a test rig", "redis: {addr: \"10.0.0.5:6379\"}\nauth: {demo_login_force: true}", ""},
		{"off with real servers", "redis: {addr: \"10.0.0.5:6379\"}\nauth: {demo_login: false}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(shippedWith(t, tc.override), "edge.yaml")
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe field.Errors
			if !errors.As(err, &fe) {
				t.Fatalf("loaded (or not a field error: %v); want auth.demo_login refused", err)
			}
			for _, e := range fe {
				if e.Path == "auth.demo_login" && e.Line > 0 && strings.Contains(e.Msg, tc.refused) && strings.Contains(e.Msg, "demo_login_force") {
					if strings.Contains(err.Error(), "hunter2") {
						t.Fatalf("the error quotes the URL's password: %v", err)
					}
					return
				}
			}
			t.Fatalf("no auth.demo_login error naming %s in: %v", tc.refused, err)
		})
	}
}

// shippedWith is the shipped edge.yaml with override (YAML) merged over it.
func shippedWith(t *testing.T, override string) []byte {
	t.Helper()
	var doc, ov map[string]any
	if err := yaml.Unmarshal(DefaultYAML, &doc); err != nil {
		t.Fatal(err)
	}
	if override != "" {
		if err := yaml.Unmarshal([]byte(override), &ov); err != nil {
			t.Fatal(err)
		}
		yamlmerge.Into(doc, ov)
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
