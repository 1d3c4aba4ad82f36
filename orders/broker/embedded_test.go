package broker

import (
	"context"
	"flashgate/orders/order"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestEmbeddedPersists: messages and committed group offsets survive a
// stop and a start on the same directory; the directory is locked while in
// use.
func TestEmbeddedPersists(t *testing.T) {
	dir := t.TempDir()
	brokers, stop, err := StartEmbeddedWith(EmbeddedConfig{DataDir: dir, Topics: testTopics()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	if _, _, err := StartEmbeddedWith(EmbeddedConfig{DataDir: dir, Topics: testTopics()}); err == nil {
		t.Fatal("a second broker started on the same directory")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	pub, err := NewPublisher(withKafkaConf(PublisherConfig{Brokers: brokers}))
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range int64(n) {
		if err := pub.Publish(ctx, testEvent(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	pub.Close()
	// A consumer group reads and commits 4.
	committed := map[int64]bool{}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "store", Topic: kafkaConf.Topic, MaxWait: 50 * time.Millisecond, StartOffset: kafka.FirstOffset})
	for len(committed) < 4 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
		e, _ := order.Decode(m.Value)
		committed[e.ID] = true
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	stop()
	stopped = true

	brokers, stop, err = StartEmbeddedWith(EmbeddedConfig{DataDir: dir, Topics: testTopics()})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	evs, counts := readOrders(t, brokers)
	if len(evs) != n {
		t.Fatalf("%d orders after restart, want %d", len(evs), n)
	}
	for id, c := range counts {
		if c != 1 {
			t.Errorf("order %d %d times", id, c)
		}
	}
	// The group resumes after its commits: it reads exactly the other 6.
	r = kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "store", Topic: kafkaConf.Topic, MaxWait: 50 * time.Millisecond, StartOffset: kafka.FirstOffset})
	defer r.Close()
	rest := map[int64]bool{}
	for len(rest) < n-len(committed) {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := order.Decode(m.Value)
		if committed[e.ID] {
			t.Fatalf("order %d was committed before the restart and is delivered again", e.ID)
		}
		rest[e.ID] = true
	}
	if len(readAll(t, brokers, kafkaConf.DLQTopic)) != 0 {
		t.Error("DLQ not empty")
	}
}
