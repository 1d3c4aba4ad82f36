package proxy

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/conf"
	"flashgate/internal/kafkatest"
	"flashgate/orders/broker"
)

// TestPipelineRefusesWeakKafka: the edge's start against real brokers
// stops, naming what is wrong, on an existing topic with fewer replicas
// than kafka.replication_factor and on refused SASL credentials. Both fail
// at topic creation, before Redis is touched, so no store is needed.
func TestPipelineRefusesWeakKafka(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("an existing topic with replication factor 1, 3 configured", func(t *testing.T) {
		brokers, _ := kafkatest.Start(t, kfake.NumBrokers(3))
		cfg := conf.Defaults()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := broker.EnsureTopics(ctx, brokers, broker.Security{}, broker.Topic{Name: cfg.Kafka.Topic, Partitions: cfg.Kafka.Partitions}); err != nil {
			t.Fatal(err)
		}
		cfg.Kafka.Brokers, cfg.Kafka.ReplicationFactor = brokers, 3
		_, err := openPipeline(cfg, nil, nil, nil, quiet)
		if err == nil || !strings.Contains(err.Error(), "topic "+cfg.Kafka.Topic+" exists with replication factor 1, kafka.replication_factor wants 3") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("refused credentials", func(t *testing.T) {
		brokers, _ := kafkatest.Start(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "edge", "right-password"))
		cfg := conf.Defaults()
		cfg.Kafka.Brokers = brokers
		cfg.Kafka.SASL = conf.KafkaSASLConfig{Mechanism: "SCRAM-SHA-256", Username: "edge", Password: "wrong-password"}
		_, err := openPipeline(cfg, nil, nil, nil, quiet)
		if err == nil || !strings.Contains(err.Error(), "SASL Authentication Failed") || strings.Contains(err.Error(), "wrong-password") {
			t.Fatalf("got %v", err)
		}
	})
}
