package conf

import (
	"errors"
	"strings"
	"testing"

	"flashgate/conf/field"
	"flashgate/internal/tlstest"
)

func TestClickHouseErrorsNameTheField(t *testing.T) {
	certs := tlstest.New(t)
	const real = "  addr: \"c1:9000,c2:9000\"\n"
	cases := []struct {
		name, ch  string
		path, msg string
	}{
		{"a database that needs quoting", real + "  database: \"x`y\"\n", "clickhouse.database", "letters, digits and _"},
		{"a cluster name that needs quoting", real + "  cluster: \"a b\"\n", "clickhouse.cluster", "letters, digits and _"},
		{"a cluster of the embedded store", "  cluster: main\n", "clickhouse.cluster", "embedded order store is one file"},
		{"a path without {shard}", real + "  cluster: main\n  zookeeper_path: /ch/{table}\n", "clickhouse.zookeeper_path", "must contain {shard} and {table}"},
		{"a path without {table}", real + "  cluster: main\n  zookeeper_path: /ch/{shard}\n", "clickhouse.zookeeper_path", "must contain {shard} and {table}"},
		{"a relative path", real + "  cluster: main\n  zookeeper_path: ch/{shard}/{table}\n", "clickhouse.zookeeper_path", "an absolute path"},
		{"a quote in the replica", real + "  cluster: main\n  replica: \"r'1\"\n", "clickhouse.replica", "letters, digits"},
		{"a negative retention", real + "  retention_months: -1\n", "clickhouse.retention_months", "between 0 (keep every order) and 1200"},
		{"retention on the embedded store", "  retention_months: 12\n", "clickhouse.retention_months", "embedded order store keeps every order"},
		{"tls on the embedded store", "  tls:\n    enabled: true\n", "clickhouse.tls", "embedded order store has no TLS"},
		{"an unreadable CA file", real + "  tls:\n    ca_file: /nonexistent/ca.pem\n", "clickhouse.tls.ca_file", "no such file"},
		{"a certificate without its key", real + "  tls:\n    cert_file: " + certs.ClientCert + "\n", "clickhouse.tls.key_file", "required with tls.cert_file"},
		{"a password from a missing env", real + "  password: env:FLASHGATE_TEST_NOPE\n", "clickhouse.password", "not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("clickhouse:\n"+tc.ch), "t.yaml")
			var fe field.Errors
			if !errors.As(err, &fe) {
				t.Fatalf("want field errors, got %v", err)
			}
			for _, e := range fe {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.msg) {
					return
				}
			}
			t.Fatalf("want %s: ...%s..., got %v", tc.path, tc.msg, err)
		})
	}
}

func TestClickHouseClusterSettingsValid(t *testing.T) {
	certs := tlstest.New(t)
	c, err := Parse([]byte("clickhouse:\n  addr: \"c1:9440,c2:9440\"\n  cluster: orders_2x2\n  retention_months: 24\n"+
		"  tls:\n    ca_file: "+certs.CA+"\n    cert_file: "+certs.ClientCert+"\n    key_file: "+certs.ClientKey+"\n    server_name: ch.internal\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Config.ClickHouse
	if ch.ZooKeeperPath != DefaultZooKeeperPath || ch.Replica != DefaultReplica || ch.RetentionMonths != 24 || !ch.TLS.On() {
		t.Fatalf("section %+v", ch)
	}
	cfg, errs := ch.TLS.Config()
	if len(errs) > 0 || cfg.ServerName != "ch.internal" || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("tls %+v %v", cfg, errs)
	}
}
