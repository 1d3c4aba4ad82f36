package broker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/orders/order"
)

func testEvent(id int64) order.Event {
	return order.Event{V: order.Version, Type: order.TypeOrder, Order: order.Order{
		ID: id, ProductID: "p1", UserID: "alice", Qty: 1, PriceCents: 9900,
		CreatedMs: time.Now().UnixMilli(), Edge: 1,
	}}
}

// TestPublishAcknowledged: once Publish returned, a consumer-group
// reader sees exactly the event, keyed by its order id.
func TestPublishAcknowledged(t *testing.T) {
	brokers, _ := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := testEvent(120850008860790784)
	start := time.Now()
	if err := p.Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	t.Logf("first publish (connect, metadata, produce): %v", time.Since(start))
	start = time.Now()
	if err := p.Publish(ctx, testEvent(2)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a publish took %v", d)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "test", Topic: kafkaConf.Topic, MaxWait: 50 * time.Millisecond, StartOffset: kafka.FirstOffset})
	defer r.Close()
	got := map[int64]order.Event{}
	for len(got) < 2 {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := order.Decode(m.Value)
		if err != nil || string(m.Key) != string(e.Key()) {
			t.Fatalf("message %q key %q: %v", m.Value, m.Key, err)
		}
		if _, dup := got[e.ID]; dup {
			t.Fatalf("order %d delivered twice", e.ID)
		}
		got[e.ID] = e
	}
	if got[want.ID] != want {
		t.Errorf("read %+v, want %+v", got[want.ID], want)
	}
	if n := len(readAll(t, brokers, kafkaConf.Topic)); n != 2 {
		t.Errorf("topic holds %d messages, want 2", n)
	}
	if s := p.Stats(); s.Published != 2 || s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestPublishConcurrent: 64 synchronous publishers share produce
// requests; every event lands exactly once. It logs the rate (see
// BenchmarkPublish for measured numbers).
func TestPublishConcurrent(t *testing.T) {
	brokers, _ := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Publish(ctx, testEvent(1)); err != nil { // connect first
		t.Fatal(err)
	}
	const workers, each = 64, 50
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := p.Publish(ctx, testEvent(int64(1000+w*each+i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := p.Stats().Writer
	t.Logf("%d events from %d publishers in %v: %.0f events/s; %d produce requests, avg batch %d",
		workers*each, workers, el, float64(workers*each)/el.Seconds(), st.Writes, st.BatchSize.Avg)
	_, counts := readOrders(t, brokers)
	if len(counts) != workers*each+1 {
		t.Fatalf("%d distinct orders in Kafka, want %d", len(counts), workers*each+1)
	}
	for id, n := range counts {
		if n != 1 {
			t.Errorf("order %d written %d times", id, n)
		}
	}
}

// TestNewCallAllocs: encoding an event into a pooled call allocates
// nothing once the pool holds a call (the event is appended to the call's
// own buffer, kept across recycles), and a refused event leaves no call
// behind.
func TestNewCallAllocs(t *testing.T) {
	p := &Publisher{cfg: PublisherConfig{Timeout: time.Second}}
	ev := testEvent(120850008860790784)
	ctx := context.Background()
	warm, err := p.newCall(ctx, &ev, time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ev.Encode()
	if string(warm.val) != string(want) {
		t.Fatalf("call value %s, want %s", warm.val, want)
	}
	warm.recycle()
	if n := testing.AllocsPerRun(1000, func() {
		c, err := p.newCall(ctx, &ev, 1)
		if err != nil {
			t.Fatal(err)
		}
		c.recycle()
	}); n != 0 {
		t.Errorf("newCall allocates %v times per event", n)
	}
	bad := ev
	bad.UserID = "no spaces"
	if _, err := p.newCall(ctx, &bad, 1); !errors.Is(err, order.ErrMalformed) {
		t.Errorf("newCall of an invalid event: %v", err)
	}
}
