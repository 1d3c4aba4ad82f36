package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestStart: kafka-go writes to and reads from the cluster.
func TestStart(t *testing.T) {
	brokers, c := Start(t, kfake.SeedTopics(2, "t"))
	if len(brokers) != 1 || c == nil {
		t.Fatalf("brokers %v", brokers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "t", Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "t", Partition: new(kafka.Hash).Balance(kafka.Message{Key: []byte("k")}, 0, 1), MaxWait: 50 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil || string(m.Value) != "v" {
		t.Fatalf("read %q, %v", m.Value, err)
	}
}
