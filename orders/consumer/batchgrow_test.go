package consumer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"flashgate/orders/broker"
)

// mergeEvents reads the server's MergedRows and MergesTimeMilliseconds.
func mergeEvents(b *testing.B) (rows, ms uint64) {
	b.Helper()
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	err = c.QueryRow(context.Background(), "SELECT sumIf(value, event = 'MergedRows'), sumIf(value, event = 'MergesTimeMilliseconds') FROM system.events").Scan(&rows, &ms)
	if err != nil {
		b.Fatal(err)
	}
	return rows, ms
}

// BenchmarkSteadyStreamInserts offers b.N events at ~2000/s (20 every
// 10 ms), the load at which 50 ms batches cost ClickHouse 40-55 % of a core
// in merges, and counts the inserts the consumer makes for them, with the
// batch time fixed at 50 ms and growing up to 400 ms (orders.batch_time_max).
// It reports inserts/s, rows per insert, the store latency (p50, p99) and
// what ClickHouse spent merging meanwhile (system.events: rows merged per
// stored row, merge milliseconds per second).
//
//	go test -run '^$' -bench SteadyStreamInserts -benchtime 20000x ./orders/consumer/
//
// Measured here (2 cores shared with kfake, redis-server and
// clickhouse-server 18.16; batch_size 500):
//
//	fixed50ms  15.6 inserts/s  128 rows/insert  p50  47 ms  p99 100 ms  15.6 merged rows/row  23 merge ms/s
//	grow400ms   4.0 inserts/s  488 rows/insert  p50 145 ms  p99 308 ms   4.4 merged rows/row   8 merge ms/s
func BenchmarkSteadyStreamInserts(b *testing.B) {
	for _, bc := range []struct {
		name string
		max  time.Duration
	}{{"fixed50ms", 0}, {"grow400ms", 400 * time.Millisecond}} {
		b.Run(bc.name, func(b *testing.B) {
			brokers, _ := startKafka(b)
			st := openStock(b)
			s := openCH(b, ch.Addr())
			w := newWriter(brokers, testTopic)
			defer w.Close()
			var mu sync.Mutex
			created := map[int64]time.Time{}
			var lat []time.Duration
			done := make(chan struct{})
			c := start(b, Config{Brokers: brokers, Store: s, Stock: st, BatchTime: 50 * time.Millisecond, BatchTimeMax: bc.max,
				OnStored: func(m map[string][]int64) {
					now := time.Now()
					mu.Lock()
					defer mu.Unlock()
					for _, ids := range m {
						for _, id := range ids {
							if t0, ok := created[id]; ok {
								lat = append(lat, now.Sub(t0))
								delete(created, id)
							}
						}
					}
					if len(lat) == b.N {
						close(done)
					}
				}})
			publish(b, w, benchEvents(10, "warmup"))
			if err := WaitDrained(context.Background(), brokers, broker.Security{}, testTopic, ordersConf.Group, 20*time.Millisecond); err != nil {
				b.Fatal(err)
			}
			before := c.Stats().Batches
			m0, ms0 := mergeEvents(b)
			b.ResetTimer()
			t0 := time.Now()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for sent := 0; sent < b.N; {
				<-tick.C
				evs := benchEvents(min(20, b.N-sent), "steady")
				mu.Lock()
				for i := range evs {
					created[evs[i].ID] = time.Now()
				}
				mu.Unlock()
				publish(b, w, evs)
				sent += len(evs)
			}
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				b.Fatal("not stored in 2 minutes")
			}
			el := time.Since(t0)
			inserts := c.Stats().Batches - before
			m1, ms1 := mergeEvents(b)
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(float64(b.N)/el.Seconds(), "orders/s")
			b.ReportMetric(float64(inserts)/el.Seconds(), "inserts/s")
			b.ReportMetric(float64(b.N)/float64(inserts), "rows/insert")
			b.ReportMetric(q(0.5), "p50_ms")
			b.ReportMetric(q(0.99), "p99_ms")
			b.ReportMetric(float64(m1-m0)/float64(b.N), "merged_rows/row")
			b.ReportMetric(float64(ms1-ms0)/el.Seconds(), "merge_ms/s")
		})
	}
}
