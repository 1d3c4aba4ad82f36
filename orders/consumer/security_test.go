package consumer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/conf"
	"flashgate/internal/kafkatest"
	"flashgate/internal/tlstest"
	"flashgate/orders/broker"
	"flashgate/orders/order"
)

// brokerTLS is the brokers' side of TLS: the server certificate, and client
// certificates required and verified against the CA when mutual.
func brokerTLS(t *testing.T, certs tlstest.Files, mutual bool) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if mutual {
		b, err := os.ReadFile(certs.CA)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(b)
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	return cfg
}

// TestRoundTripOverSASLAndTLS publishes through the edge's publisher and
// consumes with its consumer into ClickHouse, both connecting as the
// kafka: section says, to brokers that require it; the drain check
// connects the same way.
func TestRoundTripOverSASLAndTLS(t *testing.T) {
	certs := tlstest.New(t)
	cases := []struct {
		name   string
		broker []kfake.Opt
		kafka  conf.KafkaConfig
	}{
		{"SCRAM-SHA-256", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "edge", "s3cret")},
			conf.KafkaConfig{SASL: conf.KafkaSASLConfig{Mechanism: "SCRAM-SHA-256", Username: "edge", Password: "env:FLASHGATE_TEST_KAFKA_PW"}}},
		{"SCRAM-SHA-512 over TLS", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "edge", "s3cret"), kfake.TLS(brokerTLS(t, certs, false))},
			conf.KafkaConfig{TLS: conf.KafkaTLSConfig{CAFile: certs.CA},
				SASL: conf.KafkaSASLConfig{Mechanism: "SCRAM-SHA-512", Username: "edge", Password: "s3cret"}}},
		{"PLAIN over TLS", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("PLAIN", "edge", "s3cret"), kfake.TLS(brokerTLS(t, certs, false))},
			conf.KafkaConfig{TLS: conf.KafkaTLSConfig{CAFile: certs.CA},
				SASL: conf.KafkaSASLConfig{Mechanism: "PLAIN", Username: "edge", Password: "s3cret"}}},
		{"TLS with a client certificate", []kfake.Opt{kfake.TLS(brokerTLS(t, certs, true))},
			conf.KafkaConfig{TLS: conf.KafkaTLSConfig{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, ServerName: "localhost"}}},
	}
	t.Setenv("FLASHGATE_TEST_KAFKA_PW", "s3cret")
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			brokers, _ := kafkatest.Start(t, tc.broker...)
			tc.kafka.Brokers = brokers
			sec, err := broker.SecurityFrom(tc.kafka)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			topic, dlq := fmt.Sprintf("sec%d.orders", i), fmt.Sprintf("sec%d.dlq", i)
			if err := broker.EnsureTopics(ctx, brokers, sec, broker.Topics(topic, dlq, 2)...); err != nil {
				t.Fatal(err)
			}
			pub, err := broker.NewPublisher(broker.PublisherConfig{Brokers: brokers, Security: sec, Topic: topic, DLQTopic: dlq,
				BatchTimeout: kafkaConf.BatchTimeout, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			s := openCH(t, ch.Addr())
			c := start(t, Config{Brokers: brokers, Security: sec, Topic: topic, DLQTopic: dlq, Group: fmt.Sprintf("sec%d", i), Store: s})

			const n = 50
			product := fmt.Sprintf("sec%d", i)
			evs := make([]order.Event, n)
			now := time.Now().UnixMilli()
			for j := range evs {
				evs[j] = order.Event{V: order.Version, Type: order.TypeOrder, Order: order.Order{
					ProductID: product, UserID: fmt.Sprintf("u%d", j), Qty: 1, ID: orderSeq.Add(1), PriceCents: 9900, CreatedMs: now, Edge: 1,
				}}
			}
			if err := pub.Publish(ctx, evs...); err != nil {
				t.Fatal(err)
			}
			// The publisher's dead-letter writer, and the consumer's: a
			// malformed message on the orders topic is dead-lettered as it
			// is read, over the same settings.
			if err := pub.DeadLetter(ctx, []byte("k"), []byte("not an event"), topic, "test"); err != nil {
				t.Fatal(err)
			}
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Transport: sec.Transport("test", 0), BatchTimeout: time.Millisecond}
			defer w.Close()
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("bad"), Value: []byte("{not json")}); err != nil {
				t.Fatal(err)
			}
			if err := WaitDrained(ctx, brokers, sec, topic, fmt.Sprintf("sec%d", i), 20*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if got, err := storedRows(s, []string{product}); got != n || err != nil {
				t.Fatalf("%d rows stored (%v), want %d", got, err, n)
			}
			if st := c.Stats(); st.Stored != n || st.DeadLettered != 1 {
				t.Fatalf("consumer stats %+v", st)
			}
			// The same brokers refuse a client without the settings.
			if _, err := GroupLag(ctx, brokers, broker.Security{}, topic, "x"); err == nil {
				t.Fatal("a plaintext client without credentials was served")
			}
		})
	}
}

// TestRefusedCredentialsStopTheStart: what the edge does first against
// real brokers is ensure its topics; refused credentials or an untrusted
// certificate fail there, saying so.
func TestRefusedCredentialsStopTheStart(t *testing.T) {
	certs, other := tlstest.New(t), tlstest.New(t)
	brokers, _ := kafkatest.Start(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "edge", "s3cret"), kfake.TLS(brokerTLS(t, certs, false)))
	for _, tc := range []struct {
		name  string
		kafka conf.KafkaConfig
		want  string
	}{
		{"a wrong password", conf.KafkaConfig{TLS: conf.KafkaTLSConfig{CAFile: certs.CA},
			SASL: conf.KafkaSASLConfig{Mechanism: "SCRAM-SHA-256", Username: "edge", Password: "guess"}}, "SASL Authentication"},
		{"an unknown user", conf.KafkaConfig{TLS: conf.KafkaTLSConfig{CAFile: certs.CA},
			SASL: conf.KafkaSASLConfig{Mechanism: "SCRAM-SHA-256", Username: "mallory", Password: "s3cret"}}, "SASL Authentication"},
		{"another mechanism", conf.KafkaConfig{TLS: conf.KafkaTLSConfig{CAFile: certs.CA},
			SASL: conf.KafkaSASLConfig{Mechanism: "SCRAM-SHA-512", Username: "edge", Password: "s3cret"}}, "SASL"},
		{"an untrusted broker certificate", conf.KafkaConfig{TLS: conf.KafkaTLSConfig{CAFile: other.CA},
			SASL: conf.KafkaSASLConfig{Mechanism: "SCRAM-SHA-256", Username: "edge", Password: "s3cret"}}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec, err := broker.SecurityFrom(tc.kafka)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = broker.EnsureTopics(ctx, brokers, sec, broker.Topics("refused.orders", "refused.dlq", 1)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error saying %q, got %v", tc.want, err)
			}
			if strings.Contains(err.Error(), tc.kafka.SASL.Password) {
				t.Fatalf("the password is in the error: %v", err)
			}
			t.Log(err)
		})
	}
}
