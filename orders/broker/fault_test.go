package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"flashgate/internal/await"
	"flashgate/internal/stocktest"
)

// TestPublishAmbiguousTimeouts: REQUEST_TIMED_OUT on produce is applied and
// then failed; kafka-go retries, so publishes succeed and the events land
// (some twice: no idempotent producer, the consumer dedupes).
func TestPublishAmbiguousTimeouts(t *testing.T) {
	brokers, c := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, testEvent(1)); err != nil {
		t.Fatal(err)
	}
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: 3})
	var wg sync.WaitGroup
	for i := range int64(20) {
		wg.Go(func() {
			if err := p.Publish(ctx, testEvent(100+i)); err != nil {
				t.Errorf("publish %d: %v", 100+i, err)
			}
		})
	}
	wg.Wait()
	if h.Hits() != 3 {
		t.Errorf("fault hit %d times, want 3", h.Hits())
	}
	_, counts := readOrders(t, brokers)
	dups := 0
	for i := range int64(20) {
		switch n := counts[100+i]; {
		case n < 1:
			t.Errorf("acknowledged order %d lost", 100+i)
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("3 ambiguous timeouts: %d duplicates", dups)
}

// TestPublishDroppedConnections: the broker drops the connection on the
// first produce requests; kafka-go retries on a new one.
func TestPublishDroppedConnections(t *testing.T) {
	brokers, c := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dropped atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if dropped.Add(1) <= 3 {
			c.KeepControl()
			return nil, errors.New("dropped by the test"), true // closes the connection
		}
		c.DropControl()
		return nil, nil, false
	})
	for i := range int64(5) {
		if err := p.Publish(ctx, testEvent(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	if dropped.Load() < 3 {
		t.Errorf("only %d produce requests seen", dropped.Load())
	}
	_, counts := readOrders(t, brokers)
	for i := range int64(5) {
		if counts[10+i] < 1 {
			t.Errorf("order %d lost", 10+i)
		}
	}
}

// TestPublishFailuresKeepOutbox: while Kafka refuses writes, the direct
// path's publishes fail (the edge answers 503) and their outbox entries
// stay; publishes that did succeed are in Kafka. The relay cannot re-send
// either until Kafka is back, then it does: every order ends up in Kafka
// and the outbox is empty.
func TestPublishFailuresKeepOutbox(t *testing.T) {
	s := openStore(t, "real")
	brokers, c := startKafka(t)
	pub := newPublisher(t, PublisherConfig{Brokers: brokers, Outbox: s, MaxAttempts: 2, Timeout: time.Second})
	stocktest.Warm(t, s, "p1", 1000, 1000)
	ctx := context.Background()
	if err := pub.Publish(ctx, testEvent(1)); err != nil { // connect
		t.Fatal(err)
	}

	// Some produce requests fail for good (a non-retriable error), while
	// 40 shoppers publish concurrently.
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: 4})
	type result struct {
		id  int64
		err error
	}
	results := make(chan result, 40)
	var wg sync.WaitGroup
	for range 40 {
		a, oid := deduct(t, s, "p1")
		wg.Go(func() {
			results <- result{a.ID, pub.PublishAndAck(ctx, OrderEvent(&a.Order), oid)}
		})
	}
	wg.Wait()
	close(results)
	var acked, failed []int64
	for r := range results {
		if r.err != nil {
			failed = append(failed, r.id)
		} else {
			acked = append(acked, r.id)
		}
	}
	if h.Hits() == 0 || len(failed) == 0 {
		t.Fatalf("fault hits %d, %d failed publishes: the test did not inject anything", h.Hits(), len(failed))
	}
	t.Logf("%d acknowledged, %d failed", len(acked), len(failed))
	_, counts := readOrders(t, brokers)
	for _, id := range acked {
		if counts[id] != 1 {
			t.Errorf("acknowledged order %d in Kafka %d times", id, counts[id])
		}
	}
	await.Until(t, 20*time.Second, "the acker", func() bool { return pub.Stats().Acked == uint64(len(acked)) })
	if n := outboxLen(t, s, "p1"); n != int64(len(failed)) {
		t.Fatalf("outbox holds %d entries, want the %d unacknowledged", n, len(failed))
	}

	// Now Kafka refuses everything: the relay claims but cannot publish.
	down := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: -1})
	r := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: func() []string { return []string{"p1"} }, MinAge: 200 * time.Millisecond})
	r.Start()
	await.Until(t, 20*time.Second, "a failed relay publish", func() bool { return r.Stats().Errors > 0 })
	if n := outboxLen(t, s, "p1"); n != int64(len(failed)) {
		t.Fatalf("outbox holds %d entries while Kafka is down, want %d", n, len(failed))
	}
	down.Remove()
	await.Until(t, 20*time.Second, "the relay to empty the outbox", func() bool { return outboxLen(t, s, "p1") == 0 })
	_, counts = readOrders(t, brokers)
	for _, id := range append(acked, failed...) {
		if counts[id] < 1 {
			t.Errorf("order %d lost", id)
		}
	}
	t.Logf("relay %+v", r.Stats())
}

// TestPublishLeaderMoves: with leaders shuffled between three brokers while
// publishing, every publish succeeds within its timeout (MetadataTTL 1s).
func TestPublishLeaderMoves(t *testing.T) {
	brokers, c := startKafka(t, kfake.NumBrokers(3))
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var worst atomic.Int64
	var wg sync.WaitGroup
	for w := range int64(8) {
		wg.Go(func() {
			for i := range int64(50) {
				start := time.Now()
				if err := p.Publish(ctx, testEvent(1000+w*100+i)); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				if d := int64(time.Since(start)); d > worst.Load() {
					worst.Store(d)
				}
				if w == 0 && i%10 == 5 {
					c.ShufflePartitionLeaders()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("slowest publish with leaders moving: %v", time.Duration(worst.Load()))
	_, counts := readOrders(t, brokers)
	for w := range int64(8) {
		for i := range int64(50) {
			if counts[1000+w*100+i] < 1 {
				t.Errorf("order %d lost", 1000+w*100+i)
			}
		}
	}
}
