package consumer

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"flashgate/orders/broker"
	"flashgate/orders/order"
)

// Measured here (2 cores shared by the test binary, clickhouse-server 18.16,
// kfake and redis-server; batch 500 / 50ms):
//
//	BenchmarkConsumerBacklog  -benchtime=50000x  ~30,500 orders/s (one consumer)
//	BenchmarkEndToEndLatency  -benchtime=50000x  5,000/s offered: p50 36 ms, p99 72 ms, max 145 ms
//
// The latency is dominated by BatchTime (a batch waits up to 50 ms for more
// after its first message): lower it for latency, raise BatchSize for
// throughput.

func benchEvents(n int, product string) []order.Event {
	evs := make([]order.Event, n)
	for i := range evs {
		evs[i] = order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
			ID: orderSeq.Add(1), ProductID: product, UserID: "user" + string(rune('a'+i%26)), Qty: 1,
			PriceCents: 9900, CreatedMs: time.Now().UnixMilli(), Edge: 1,
		}}
	}
	return evs
}

// BenchmarkConsumerBacklog: b.N events already in Kafka, then the
// consumer starts; the time until the last one is stored (ClickHouse rows,
// MarkSuccess in Redis) gives orders/s of one consumer.
func BenchmarkConsumerBacklog(b *testing.B) {
	brokers, _ := startKafka(b)
	st := openStock(b)
	s := openCH(b, ch.Addr())
	evs := benchEvents(b.N, "bench")
	w := newWriter(brokers, testTopic)
	defer w.Close()
	publish(b, w, evs)

	var mu sync.Mutex
	stored := 0
	done := make(chan struct{})
	b.ResetTimer()
	start(b, Config{Brokers: brokers, Store: s, Stock: st, OnStored: func(m map[string][]int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, ids := range m {
			stored += len(ids)
		}
		if stored == b.N {
			close(done)
		}
	}})
	t0 := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("not stored in 5 minutes")
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "orders/s")
}

// BenchmarkEndToEndLatency offers b.N events at ~5000/s (50 every 10ms,
// each created just before its publish, acknowledged by Kafka) and reports
// the latency from the event's creation to its row being stored (the
// OnStored call), p50 and p99, and the achieved orders/s.
func BenchmarkEndToEndLatency(b *testing.B) {
	brokers, _ := startKafka(b)
	st := openStock(b)
	s := openCH(b, ch.Addr())
	w := newWriter(brokers, testTopic)
	defer w.Close()

	var mu sync.Mutex
	created := map[int64]int64{} // order id -> created unix µs
	var lat []time.Duration
	done := make(chan struct{})
	start(b, Config{Brokers: brokers, Store: s, Stock: st, OnStored: func(m map[string][]int64) {
		now := time.Now().UnixMicro()
		mu.Lock()
		defer mu.Unlock()
		for _, ids := range m {
			for _, id := range ids {
				if c, ok := created[id]; ok {
					lat = append(lat, time.Duration(now-c)*time.Microsecond)
					delete(created, id)
				}
			}
		}
		if len(lat) == b.N {
			close(done)
		}
	}})
	// Warm the path (group join, connections) before measuring.
	publish(b, w, benchEvents(10, "warmup"))
	if err := WaitDrained(context.Background(), brokers, broker.Security{}, testTopic, ordersConf.Group, 20*time.Millisecond); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	t0 := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < b.N; {
		<-tick.C
		n := min(50, b.N-sent)
		evs := benchEvents(n, "lat")
		mu.Lock()
		for i := range evs {
			// Event creation: the edge's deduction time, in µs here for
			// a finer measurement than the event's createdMs.
			created[evs[i].ID] = time.Now().UnixMicro()
		}
		mu.Unlock()
		publish(b, w, evs)
		sent += n
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatal("not stored in 2 minutes")
	}
	el := time.Since(t0)
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(b.N)/el.Seconds(), "orders/s")
	b.ReportMetric(q(0.5), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(q(1), "max_ms")
}

// BenchmarkQuietLatency is a quiet sale: b.N orders one at a time, each
// published at a random moment after the one before was stored, and the
// time from its publish (Kafka acknowledged it, as the edge answers) to
// its row being stored (OnStored): p50, p99, max. With fetches that wait
// (the consumer's), an order waits in the broker for up to the batch time
// and then a tenth of it for its batch (fillTime); with fetches that
// return at once (at-once) it is fetched at once and then waits the whole
// batch time. The batch time is conf's (orders.batch_time, 50 ms).
//
//	go test -run '^$' -bench QuietLatency -benchtime 100x ./orders/consumer/
func BenchmarkQuietLatency(b *testing.B) {
	for _, client := range []struct {
		name   string
		source func(*Consumer) (source, error)
	}{{"kafka-go", newKafkaGoSource}, {"kafka-go-at-once", atOnce(newKafkaGoSourceFetch)}} {
		b.Run(client.name, func(b *testing.B) { benchQuietLatency(b, client.source) })
	}
}

func benchQuietLatency(b *testing.B, newSource func(*Consumer) (source, error)) {
	brokers, _ := startKafka(b)
	st := openStock(b)
	w := newWriter(brokers, testTopic)
	defer w.Close()
	stored := make(chan time.Time, 1)
	start(b, Config{Brokers: brokers, Store: discardStore{}, Stock: st, newSource: newSource, BatchTimeMax: ordersConf.BatchTimeMax,
		OnStored: func(map[string][]int64) { stored <- time.Now() }})
	// The group joined: a first order stored.
	publish(b, w, benchEvents(1, "quiet"))
	select {
	case <-stored:
	case <-time.After(30 * time.Second):
		b.Fatal("not stored in 30 s")
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Duration(rand.Int64N(int64(200 * time.Millisecond)))) // a random phase against the fetches
		publish(b, w, benchEvents(1, "quiet"))
		acked := time.Now()
		select {
		case at := <-stored:
			lat = append(lat, at.Sub(acked))
		case <-time.After(10 * time.Second):
			b.Fatal("not stored in 10 s")
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(q(1), "max_ms")
}
