package consumer

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"flashgate/orders/order"
	"flashgate/orders/orderstore"
)

// discardStore is a stand-in for the order store that stores nothing: it
// takes the store's own CPU out of BenchmarkConsumerCPU's "nop" case, so
// what is left is the consumer's (fetch, decode, dedupe, mark, commit).
type discardStore struct{ orderstore.Store }

func (discardStore) Insert(context.Context, []orderstore.Row) error { return nil }

// BenchmarkConsumerCPU measures the order consumer's cost per order end to
// end: b.N order events of 8 products wait in the orders topic (kfake, 4
// partitions), then one consumer stores them (the file store, or
// discardStore), marks them in a real redis-server and commits. Counted
// from the first stored batch (the group is joined, the connections are
// up) to the last: the process's CPU per order (user+sys, so it includes
// kfake serving the fetches and commits in this process, but not Redis),
// the wall time per order and the allocations per order (also kfake's).
// It needs -benchtime Nx with N of at least two batches.
//
//	go test -run '^$' -bench ConsumerCPU -benchtime 30000x -count 6 ./orders/consumer/
//
// Measured here (2 cores shared with other work; medians of 6 alternating
// runs), before and after order.Decode stopped using encoding/json:
//
//	nop   cpu 4.9 -> 2.6 µs/order  allocs 17.2 -> 7.3/order
//	file  cpu 8.4 -> 5.2 µs/order  allocs 18.2 -> 8.2/order
//
// Of what is left, kafka-go's Reader costs ~1.1 µs per message fetched and
// committed (one message at a time through a channel, key and value
// copied); franz-go's kgo client took ~0.4 µs on the same backlog.
func BenchmarkConsumerCPU(b *testing.B) {
	for _, store := range []string{"nop", "file"} {
		b.Run(store, func(b *testing.B) {
			if b.N < 2*ordersConf.BatchSize {
				// The first batch is not counted: too few to measure (also
				// the testing package's probe run with b.N = 1).
				return
			}
			brokers, _ := startKafka(b)
			st := openStock(b)
			var s orderstore.Store = discardStore{}
			if store == "file" {
				f, err := orderstore.OpenFile(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { f.Close() })
				s = f
			}
			var evs []order.Event
			for p := range 8 {
				n := b.N / 8
				if p < b.N%8 {
					n++
				}
				evs = append(evs, benchEvents(n, fmt.Sprintf("cpu%d", p))...)
			}
			w := newWriter(brokers, testTopic)
			publish(b, w, evs)
			w.Close()

			var (
				mu              sync.Mutex
				stored, skipped int
				cpu0            time.Duration
				wall0           time.Time
				mem0            runtime.MemStats
			)
			done := make(chan struct{})
			b.ResetTimer()
			start(b, Config{Brokers: brokers, Store: s, Stock: st, OnStored: func(m map[string][]int64) {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, ids := range m {
					n += len(ids)
				}
				if stored == 0 {
					skipped = n
					cpu0, wall0 = processCPU(b), time.Now()
					runtime.ReadMemStats(&mem0)
				}
				stored += n
				if stored == b.N {
					close(done)
				}
			}})
			select {
			case <-done:
			case <-time.After(time.Minute):
				b.Fatal("not stored in a minute")
			}
			cpu, wall := processCPU(b)-cpu0, time.Since(wall0)
			var mem1 runtime.MemStats
			runtime.ReadMemStats(&mem1)
			b.StopTimer()
			n := float64(b.N - skipped)
			b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/order")
			b.ReportMetric(float64(wall.Nanoseconds())/n, "wall-ns/order")
			b.ReportMetric(float64(mem1.Mallocs-mem0.Mallocs)/n, "allocs/order")
			b.ReportMetric(float64(mem1.TotalAlloc-mem0.TotalAlloc)/n, "B/order")
		})
	}
}

// processCPU is the CPU time (user+sys) this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
