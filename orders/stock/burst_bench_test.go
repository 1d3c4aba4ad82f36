package stock

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"flashgate/internal/redistest"
	"flashgate/orders/order"
)

// BenchmarkDeductBurst is the burst scenario's queue: 2,000 goroutines buy
// one product at once (64: BenchmarkDeductCoalesced's load; "soldout": the
// storm after it sold out, where a call's fixed cost dominates), and each
// Deduct's latency (queue wait plus its call) is recorded; p50/p99 are
// reported beside throughput, for one and two script calls per product in
// flight (inFlightPerProduct):
//
//	go test -run '^$' -bench DeductBurst -benchtime 200000x -count 3 ./stock/
func BenchmarkDeductBurst(b *testing.B) {
	for _, sc := range []struct {
		name  string
		stock int64
	}{{"buy", 1 << 50}, {"soldout", 0}} {
		for _, g := range []int{64, 2000} {
			for _, n := range []int{1, 2} {
				b.Run(sc.name+"/goroutines="+strconv.Itoa(g)+"/inflight="+strconv.Itoa(n), func(b *testing.B) {
					benchBurst(b, g, n, sc.stock)
				})
			}
		}
	}
}

func benchBurst(b *testing.B, goroutines, inFlight int, stock int64) {
	srv := redistest.New(b)
	ctx := context.Background()
	s, err := Open(ctx, srv.Addr(), testOptions(Options{Timeout: 10 * time.Second}))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const product = "burst"
	s.product(product).maxInFlight = inFlight
	if _, err := s.Warm(ctx, SaleStock{ProductID: product, Stock: stock, Limit: 1 << 30, EndMs: time.Now().Add(time.Hour).UnixMilli()}); err != nil {
		b.Fatal(err)
	}
	users := make([]string, 10_000)
	for i := range users {
		users[i] = "user" + strconv.Itoa(i)
	}
	want := OK
	if stock == 0 {
		want = SoldOut
	}
	if out, err := s.Deduct(ctx, attempt(product, "warmup", 1, 1)); err != nil || out.Code != want {
		b.Fatal(out, err)
	}
	lat := make([]int64, b.N) // preallocated: recording does not allocate
	var next atomic.Int64
	calls0, attempts0 := s.Stats()
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		nonce := make([]byte, 0, 16)
		for pb.Next() {
			id := orderSeq.Add(1)
			nonce = strconv.AppendInt(nonce[:0], id, 16)
			t0 := time.Now()
			now := t0.UnixMilli()
			a := Attempt{
				Order: order.Order{
					ProductID: product, UserID: users[id%int64(len(users))], Qty: 1, ID: id, PriceCents: 1999,
					CreatedMs: now, Edge: 1,
				},
				Limit: 1 << 30, TokenNonceHex: unsafe.String(&nonce[0], len(nonce)), TokenExpiresMs: now + 60_000,
			}
			out, err := s.Deduct(ctx, a)
			lat[next.Add(1)-1] = int64(time.Since(t0))
			if err != nil || out.Code != want {
				b.Error(out, err)
				return
			}
		}
	})
	el := time.Since(start)
	b.StopTimer()
	calls, attempts := s.Stats()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(float64(b.N)/el.Seconds(), "attempts/s")
	b.ReportMetric(float64(attempts-attempts0)/float64(max(calls-calls0, 1)), "attempts/call")
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
