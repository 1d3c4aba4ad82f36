package conf

import (
	"errors"
	"strings"
	"testing"

	"flashgate/conf/field"
	"flashgate/internal/tlstest"
)

func TestKafkaErrorsNameTheField(t *testing.T) {
	certs := tlstest.New(t)
	const real = "  brokers: [\"k1:9092\"]\n"
	sasl := func(m, user, pw string) string {
		return real + "  sasl:\n    mechanism: " + m + "\n    username: " + user + "\n    password: " + pw + "\n"
	}
	cases := []struct {
		name, kafka string
		path, msg   string
	}{
		{"a negative replication factor", real + "  replication_factor: -1\n", "kafka.replication_factor", "between 1 and 32767"},
		{"replicas on the embedded broker", "  replication_factor: 3\n", "kafka.replication_factor", "embedded broker is one node"},
		{"a negative min.insync.replicas", real + "  min_insync_replicas: -1\n", "kafka.min_insync_replicas", "0 (the broker's default) or positive"},
		{"min.insync.replicas above the replication factor", real + "  replication_factor: 2\n  min_insync_replicas: 3\n", "kafka.min_insync_replicas", "more than kafka.replication_factor (2)"},
		{"min.insync.replicas above the default factor", real + "  min_insync_replicas: 2\n", "kafka.min_insync_replicas", "more than kafka.replication_factor (1)"},
		{"tls on the embedded broker", "  tls:\n    enabled: true\n", "kafka.tls", "embedded broker has no TLS"},
		{"a certificate without its key", real + "  tls:\n    cert_file: " + certs.ClientCert + "\n", "kafka.tls.key_file", "required with tls.cert_file"},
		{"an unreadable CA file", real + "  tls:\n    ca_file: /nonexistent/ca.pem\n", "kafka.tls.ca_file", "no such file"},
		{"a key that is not the certificate's", real + "  tls:\n    cert_file: " + certs.ClientCert + "\n    key_file: " + certs.ServerKey + "\n", "kafka.tls.key_file", "does not match"},
		{"an unknown mechanism", sasl("GSSAPI", "u", "p"), "kafka.sasl.mechanism", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"credentials without a mechanism", real + "  sasl:\n    username: u\n    password: p\n", "kafka.sasl.mechanism", "is required"},
		{"sasl on the embedded broker", "  sasl:\n    mechanism: PLAIN\n    username: u\n    password: p\n", "kafka.sasl", "embedded broker has no SASL"},
		{"no username", sasl("SCRAM-SHA-256", `""`, "p"), "kafka.sasl.username", "is required"},
		{"no password", sasl("SCRAM-SHA-512", "u", `""`), "kafka.sasl.password", "is required"},
		{"a password from a missing env", sasl("PLAIN", "u", "env:FLASHGATE_TEST_NOPE"), "kafka.sasl.password", "not set"},
		{"a username from a missing env", sasl("PLAIN", "env:FLASHGATE_TEST_NOPE", "p"), "kafka.sasl.username", "not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("kafka:\n"+tc.kafka), "t.yaml")
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

func TestKafkaProductionSettingsValid(t *testing.T) {
	certs := tlstest.New(t)
	t.Setenv("FLASHGATE_TEST_KAFKA_PW", "s3cret")
	c, err := Parse([]byte("kafka:\n  brokers: [\"k1:9093\", \"k2:9093\", \"k3:9093\"]\n  replication_factor: 3\n  min_insync_replicas: 2\n"+
		"  tls:\n    ca_file: "+certs.CA+"\n    cert_file: "+certs.ClientCert+"\n    key_file: "+certs.ClientKey+"\n    server_name: kafka.internal\n"+
		"  sasl:\n    mechanism: SCRAM-SHA-512\n    username: edge\n    password: env:FLASHGATE_TEST_KAFKA_PW\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k := c.Config.Kafka
	if k.ReplicationFactor != 3 || k.MinInsyncReplicas != 2 {
		t.Fatalf("replication %d/%d", k.ReplicationFactor, k.MinInsyncReplicas)
	}
	tc, errs := k.TLS.Config()
	if len(errs) > 0 || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "kafka.internal" {
		t.Fatalf("tls config %+v, %v", tc, errs)
	}
	if user, pw, err := k.SASL.Credentials(); user != "edge" || pw != "s3cret" || err != nil {
		t.Fatalf("credentials %q %q %v", user, pw, err)
	}
	// Left out: one copy, the broker's min.insync.replicas, plaintext.
	d := Defaults().Kafka
	if d.ReplicationFactor != 1 || d.MinInsyncReplicas != 0 || d.TLS.On() || d.SASL.Mechanism != "" {
		t.Fatalf("defaults %+v", d)
	}
	if tc, _ := d.TLS.Config(); tc != nil {
		t.Fatalf("plaintext by default, got %+v", tc)
	}
	// enabled alone: TLS against the system's roots.
	on := KafkaTLSConfig{Enabled: true}
	if tc, errs := on.Config(); tc == nil || tc.RootCAs != nil || len(errs) > 0 {
		t.Fatalf("enabled alone: %+v %v", tc, errs)
	}
}
