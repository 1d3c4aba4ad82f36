package orders

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func testEvent(id int64) Event {
	return Event{V: Version, Type: TypeOrder, OrderID: id, ProductID: "p1", UserID: "alice", Qty: 1, PriceCents: 9900, CreatedMs: time.Now().UnixMilli(), Edge: 1}
}

// TestPublishAcknowledged: once PublishOrder returned, a consumer-group
// reader sees exactly the event, keyed by its order id.
func TestPublishAcknowledged(t *testing.T) {
	brokers, _ := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := testEvent(120850008860790784)
	start := time.Now()
	if err := p.PublishOrder(ctx, want); err != nil {
		t.Fatal(err)
	}
	t.Logf("first publish (connect, metadata, produce): %v", time.Since(start))
	start = time.Now()
	if err := p.PublishOrder(ctx, testEvent(2)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a publish took %v: is BatchTimeout in ms?", d)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "test", Topic: DefaultTopic, MaxWait: 50 * time.Millisecond, StartOffset: kafka.FirstOffset})
	defer r.Close()
	got := map[int64]Event{}
	for len(got) < 2 {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Decode(m.Value)
		if err != nil || string(m.Key) != string(e.Key()) {
			t.Fatalf("message %q key %q: %v", m.Value, m.Key, err)
		}
		if _, dup := got[e.OrderID]; dup {
			t.Fatalf("order %d delivered twice", e.OrderID)
		}
		got[e.OrderID] = e
	}
	if got[want.OrderID] != want {
		t.Errorf("read %+v, want %+v", got[want.OrderID], want)
	}
	if n := len(readAll(t, brokers, DefaultTopic)); n != 2 {
		t.Errorf("topic holds %d messages, want 2", n)
	}
	if s := p.Stats(); s.Published != 2 || s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestPublishConcurrent: 64 synchronous publishers share batches; every
// event lands exactly once. It logs the rate (see BenchmarkPublish64 for
// the measured number).
func TestPublishConcurrent(t *testing.T) {
	brokers, _ := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.PublishOrder(ctx, testEvent(1)); err != nil { // connect first
		t.Fatal(err)
	}
	const workers, each = 64, 50
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := p.PublishOrder(ctx, testEvent(int64(1000+w*each+i))); err != nil {
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

// BenchmarkPublish64 measures acknowledged events/s with 64 concurrent
// synchronous publishers against in-process kfake (acks=all, one broker, 6
// partitions, BatchTimeout 1/2/5ms):
//
//	go test ./orders/ -run '^$' -bench Publish -benchtime 20000x
//
// Measured on the 2-core dev machine, kfake in the same process, machine
// busy (load ~5), 3 runs each: 64 publishers ~28k events/s at 2ms (12-13
// events per produce request), 25-38k at 1ms, 11-14k at 5ms — the rate is
// publishers / (BatchTimeout + produce round trip), so it grows with
// concurrency: 256 publishers at 2ms, 50-90k events/s (~40 per request).
func BenchmarkPublish64(b *testing.B) {
	for _, bt := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond} {
		b.Run("batch="+bt.String(), func(b *testing.B) { benchPublish(b, 64, bt) })
	}
}

// BenchmarkPublish256: the same with 256 publishers (a sync publisher's
// rate is bounded by publishers / (BatchTimeout + produce round trip)).
func BenchmarkPublish256(b *testing.B) { benchPublish(b, 256, 2*time.Millisecond) }

func benchPublish(b *testing.B, publishers int, batchTimeout time.Duration) {
	brokers, _ := startKafka(b)
	p := newPublisher(b, PublisherConfig{Brokers: brokers, BatchTimeout: batchTimeout})
	ctx := context.Background()
	if err := p.PublishOrder(ctx, testEvent(1)); err != nil {
		b.Fatal(err)
	}
	p.Stats() // reset kafka-go's deltas
	var seq sync.Mutex
	next := int64(1)
	b.SetParallelism((publishers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			seq.Lock()
			next++
			id := next
			seq.Unlock()
			if err := p.PublishOrder(ctx, testEvent(id)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	el := time.Since(start)
	b.StopTimer()
	st := p.Stats().Writer
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64(st.BatchSize.Avg), "events/batch")
}
