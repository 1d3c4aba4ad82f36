package orders

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPublish compares kafka-go's Writer (BatchTimeout 2ms, the path
// before the group commit; and 100µs, the simplest alternative) with the
// group commit, N concurrent synchronous
// publishers against in-process kfake (one broker, 6 partitions, acks=all):
//
//	go test ./orders/ -run '^$' -bench 'Publish$' -benchtime 20000x
//
// The machine is noisy: run the variants alternately, e.g.
//
//	go test -c -o /tmp/orders.test ./orders/
//	for i in 1 2 3; do for v in writer group; do
//	  /tmp/orders.test -test.run '^$' -test.bench "Publish\$/pubs=2048/$v" -test.benchtime 20000x
//	done; done
//
// Metrics: events/s acknowledged; p50-us and p99-us of one PublishOrder;
// events/req, events per produce request; cpu-us/event, the process's CPU
// (user+system) per event — kfake runs in the same process, so this and
// allocs/op include the broker's share, the same for both variants.
func BenchmarkPublish(b *testing.B) {
	for _, pubs := range []int{1, 64, 2048} {
		for _, v := range []struct {
			name   string
			writer bool
			batch  time.Duration
		}{{"writer", true, 2 * time.Millisecond}, {"writer100us", true, 100 * time.Microsecond}, {"group", false, 0}} {
			b.Run("pubs="+strconv.Itoa(pubs)+"/"+v.name, func(b *testing.B) { benchPublish(b, pubs, v.writer, v.batch) })
		}
	}
}

func benchPublish(b *testing.B, publishers int, writer bool, batchTimeout time.Duration) {
	brokers, _ := startKafka(b)
	cfg := PublisherConfig{Brokers: brokers, useWriter: writer, BatchTimeout: batchTimeout}
	p := newPublisher(b, cfg)
	ctx := context.Background()
	// Connect and warm both the pools and the connections.
	var wg sync.WaitGroup
	for i := range min(publishers, 64) {
		wg.Go(func() {
			if err := p.PublishOrder(ctx, testEvent(int64(1+i))); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	p.Stats() // reset the deltas
	var next atomic.Int64
	lat := make([][]time.Duration, publishers)
	b.ReportAllocs()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	start := time.Now()
	for w := range publishers {
		wg.Go(func() {
			mine := make([]time.Duration, 0, b.N/publishers+1)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					break
				}
				t0 := time.Now()
				if err := p.PublishOrder(ctx, testEvent(1000+i)); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			lat[w] = mine
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()) + time.Duration(ru1.Stime.Nano()-ru0.Stime.Nano())
	all := slices.Concat(lat...)
	slices.Sort(all)
	st := p.Stats().Writer
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/event")
	if st.Writes > 0 {
		b.ReportMetric(float64(st.Messages)/float64(st.Writes), "events/req")
	}
}
