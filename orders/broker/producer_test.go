package broker

import (
	"context"
	"errors"
	"flashgate/internal/await"
	"flashgate/orders/order"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaHash is the partition kafka-go's Writer (Balancer: &kafka.Hash{})
// chose for key, the mapping existing topics were written with.
func kafkaHash(key []byte, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return (&kafka.Hash{}).Balance(kafka.Message{Key: key}, parts...)
}

// TestPartitionMatchesKafkaHash: the group commit's partitioner is
// kafka.Hash's (FNV-1a, Sarama-compatible — not murmur2), for order-id keys
// and arbitrary bytes, for any partition count.
func TestPartitionMatchesKafkaHash(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := [][]byte{{}, []byte("0"), []byte("-1"), []byte("120850008860790784")}
	for range 5000 {
		keys = append(keys, strconv.AppendInt(nil, r.Int64(), 10))
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		keys = append(keys, b)
	}
	for _, n := range []int{1, 2, 3, 6, 7, 12, 64, 1000} {
		for _, k := range keys {
			if got, want := partition(k, int32(n)), kafkaHash(k, n); int(got) != want {
				t.Fatalf("key %q, %d partitions: partition %d, kafka.Hash %d", k, n, got, want)
			}
		}
	}
}

func TestPartitionAllocs(t *testing.T) {
	k := []byte("120850008860790784")
	if n := testing.AllocsPerRun(100, func() { partition(k, 6) }); n != 0 {
		t.Errorf("partition allocates %v times", n)
	}
}

// TestPublishConcurrentExactlyOnce: 512 concurrent publishers; every
// acknowledged event is in Kafka exactly once, in the partition kafka.Hash
// picks for its key; several events of one key sent in one Publish keep
// their order.
func TestPublishConcurrentExactlyOnce(t *testing.T) {
	brokers, _ := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers})
	// Broker timestamps have millisecond precision.
	start := time.Now().Add(-time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers, each = 512, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := p.Publish(ctx, testEvent(int64(1_000_000+w*each+i))); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	// One order's events in one call: same partition, same order.
	const seqID = 42
	var seq []order.Event
	for i := range 5 {
		e := testEvent(seqID)
		e.CreatedMs = int64(i + 1)
		seq = append(seq, e)
	}
	wg.Go(func() {
		if err := p.Publish(ctx, seq...); err != nil {
			t.Errorf("publish sequence: %v", err)
		}
	})
	wg.Wait()
	if t.Failed() {
		return
	}
	recs := readAll(t, brokers, kafkaConf.Topic)
	counts := map[int64]int{}
	var got []int64
	for _, r := range recs {
		e, err := order.Decode(r.value)
		if err != nil {
			t.Fatal(err)
		}
		counts[e.ID]++
		// Time-based retention deletes by record timestamp: a 1970 one
		// would make a lagging consumer lose the events. (kafka-go's
		// encoder stamps records that carry no time; this holds it.)
		if r.time.Before(start) || r.time.After(time.Now()) {
			t.Errorf("order %s has timestamp %v, want the publish time (after %v)", r.key, r.time, start)
		}
		if want := kafkaHash([]byte(r.key), kafkaConf.Partitions); r.partition != want {
			t.Errorf("order %s in partition %d, kafka.Hash picks %d", r.key, r.partition, want)
		}
		if e.ID == seqID {
			got = append(got, e.CreatedMs) // readAll reads a partition in offset order
		}
	}
	for w := range workers * each {
		if n := counts[int64(1_000_000+w)]; n != 1 {
			t.Errorf("order %d in Kafka %d times", 1_000_000+w, n)
		}
	}
	if len(got) != 5 || got[0] != 1 || got[1] != 2 || got[2] != 3 || got[3] != 4 || got[4] != 5 {
		t.Errorf("events of one order in Kafka as %v, want [1 2 3 4 5]", got)
	}
	st := p.Stats()
	if st.Published != workers*each+5 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d events in %d produce requests", st.Published, st.Requests)
}

// TestPublishRefused: a broker that refuses or drops every produce request,
// or never answers, makes Publish return an error — never nil — within
// about its Timeout.
func TestPublishRefused(t *testing.T) {
	cases := []struct {
		name   string
		inject func(c *kfake.Cluster, stuck <-chan struct{})
	}{
		{"non-retriable error", func(c *kfake.Cluster, _ <-chan struct{}) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: -1})
		}},
		{"retriable error forever", func(c *kfake.Cluster, _ <-chan struct{}) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: -1})
		}},
		{"connection dropped", func(c *kfake.Cluster, _ <-chan struct{}) {
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				return nil, errors.New("dropped by the test"), true
			})
		}},
		{"no answer", func(c *kfake.Cluster, stuck <-chan struct{}) {
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				<-stuck // the whole broker stops until the test ends
				c.DropControl()
				return nil, nil, false
			})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			brokers, c := startKafka(t)
			const timeout = 700 * time.Millisecond
			p := newPublisher(t, PublisherConfig{Brokers: brokers, Timeout: timeout, WriteTimeout: 400 * time.Millisecond})
			stuck := make(chan struct{})
			t.Cleanup(func() { close(stuck) }) // runs before p.Close and the cluster's Close
			ctx := context.Background()
			if err := p.Publish(ctx, testEvent(1)); err != nil { // connected, metadata known
				t.Fatal(err)
			}
			tc.inject(c, stuck)
			var wg sync.WaitGroup
			var nils, slow atomic.Int32
			for i := range int64(20) {
				wg.Go(func() {
					start := time.Now()
					err := p.Publish(ctx, testEvent(100+i))
					if err == nil {
						nils.Add(1)
					}
					// Timeout, plus at most one produce request the
					// sender was already in when the caller gave up.
					if d := time.Since(start); d > timeout+time.Second {
						slow.Add(1)
						t.Logf("publish %d took %v: %v", 100+i, d, err)
					}
				})
			}
			wg.Wait()
			if n := nils.Load(); n != 0 {
				t.Errorf("%d publishes returned nil against a broker that acknowledged nothing", n)
			}
			if n := slow.Load(); n != 0 {
				t.Errorf("%d publishes outlived their timeout", n)
			}
			if st := p.Stats(); st.Failed != 20 || st.Published != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestPublishMultiPartialFailure: Publish of several events reports each
// event's outcome (kafka.WriteErrors) when only some partitions fail.
func TestPublishMultiPartialFailure(t *testing.T) {
	brokers, c := startKafka(t)
	p := newPublisher(t, PublisherConfig{Brokers: brokers, MaxAttempts: 1})
	ctx := context.Background()
	if err := p.Publish(ctx, testEvent(1)); err != nil {
		t.Fatal(err)
	}
	var evs []order.Event
	for i := range int64(60) {
		evs = append(evs, testEvent(500+i))
	}
	// Refuse exactly one produce request: one partition's events fail.
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: 1})
	err := p.Publish(ctx, evs...)
	var werr kafka.WriteErrors
	if !errors.As(err, &werr) || len(werr) != len(evs) {
		t.Fatalf("Publish: %v, want kafka.WriteErrors of %d", err, len(evs))
	}
	if h.Hits() != 1 || werr.Count() == 0 || werr.Count() == len(evs) {
		t.Fatalf("fault hits %d, %d of %d failed", h.Hits(), werr.Count(), len(evs))
	}
	_, counts := readOrders(t, brokers)
	for i, e := range werr {
		if e == nil && counts[evs[i].ID] != 1 {
			t.Errorf("order %d acknowledged but in Kafka %d times", evs[i].ID, counts[evs[i].ID])
		}
	}
}

// TestCloseWhileQueued: Close while publishes wait behind requests the
// broker holds: every publish returns (nil only if it is in Kafka), Close
// returns, later publishes fail with ErrPublisherClosed.
func TestCloseWhileQueued(t *testing.T) {
	for _, release := range []bool{true, false} {
		name := "broker answers after Close began"
		if !release {
			name = "broker never answers"
		}
		t.Run(name, func(t *testing.T) {
			brokers, c := startKafka(t)
			p := newPublisher(t, PublisherConfig{Brokers: brokers, Timeout: 1500 * time.Millisecond, WriteTimeout: time.Second})
			stuck := make(chan struct{})
			var once sync.Once
			unstick := func() { once.Do(func() { close(stuck) }) }
			t.Cleanup(unstick)
			ctx := context.Background()
			if err := p.Publish(ctx, testEvent(1)); err != nil {
				t.Fatal(err)
			}
			// The broker stops at the next produce request (its one
			// goroutine blocks in the control function): every
			// partition's sender has a request in flight, the rest queue.
			var held atomic.Int32
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				held.Add(1)
				<-stuck
				c.DropControl()
				return nil, nil, false
			})
			const n = 200
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { errs[i] = p.Publish(ctx, testEvent(int64(100+i))) })
			}
			await.Until(t, 20*time.Second, "publishes queued behind requests in flight", func() bool {
				queued := 0
				for _, q := range *p.pr.queues.Load() {
					q.mu.Lock()
					queued += len(q.pending)
					q.mu.Unlock()
				}
				return held.Load() == 1 && queued > 0
			})
			closed := make(chan error, 1)
			go func() { closed <- p.Close() }()
			await.Until(t, 20*time.Second, "Close to stop new publishes", func() bool {
				p.pr.queuesMu.Lock()
				defer p.pr.queuesMu.Unlock()
				return p.pr.closed
			})
			if err := p.Publish(ctx, testEvent(99)); !errors.Is(err, ErrPublisherClosed) {
				t.Errorf("publish during Close: %v, want ErrPublisherClosed", err)
			}
			if release {
				unstick()
			}
			returned := make(chan struct{})
			go func() { wg.Wait(); close(returned) }()
			select {
			case <-returned:
			case <-time.After(15 * time.Second):
				t.Fatal("publishes still waiting 15s after Close")
			}
			select {
			case <-closed:
			case <-time.After(15 * time.Second):
				t.Fatal("Close still waiting 15s after the publishes returned")
			}
			unstick()
			var ok []int64
			refused, unknown := 0, 0 // refused: Close came first, nothing sent
			for i, err := range errs {
				switch {
				case err == nil:
					ok = append(ok, int64(100+i))
				case errors.Is(err, ErrPublisherClosed):
					refused++
				default:
					unknown++
				}
			}
			t.Logf("%d publishes acknowledged, %d refused by Close, %d unknown", len(ok), refused, unknown)
			if release && (unknown != 0 || len(ok) == 0) {
				t.Errorf("broker answered within the publishes' timeout, yet %d acknowledged, %d unknown", len(ok), unknown)
			}
			if !release && len(ok) != 0 {
				t.Errorf("%d publishes returned nil against a broker that answered nothing", len(ok))
			}
			if len(ok) > 0 {
				_, counts := readOrders(t, brokers)
				for _, id := range ok {
					if counts[id] != 1 {
						t.Errorf("acknowledged order %d in Kafka %d times", id, counts[id])
					}
				}
			}
		})
	}
}
