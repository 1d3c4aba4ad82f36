package kafkatest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestMain(m *testing.M) {
	ServeChild()
	os.Exit(m.Run())
}

// TestProcessKillStart: a message acknowledged before the broker process
// was killed is there after its restart on the same port; while it is
// dead, nothing answers there.
func TestProcessKillStart(t *testing.T) {
	p := StartProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.CreateTopics(kafka.TopicConfig{Topic: "t", NumPartitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	w := &kafka.Writer{Addr: kafka.TCP(p.Addr()), Topic: "t", BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	p.Kill()
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("the killed broker's port still answers")
	}
	p.Start(t)
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{p.Addr()}, Topic: "t", Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil || string(m.Value) != "before" {
		t.Fatalf("after the restart: %q, %v", m.Value, err)
	}
}
