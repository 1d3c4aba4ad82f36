package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashgate/internal/chtest"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/orders/orderstore"
)

var (
	pushStreams = flag.Int("e2e.push_streams", 10_000, "shoppers waiting on event streams in TestPushTenThousandStreams")
	pushStore   = flag.String("e2e.push_store", "clickhouse", "order store of TestPushTenThousandStreams: clickhouse or file")
)

// TestPushTenThousandStreams is issue #7's "done": 10,000 shoppers who
// bought through two edge processes wait on event streams spread over
// both; the real consumer stores their orders in ClickHouse (or the file
// store with -e2e.push_store=file) and publishes each batch; every shopper
// receives their own outcome within one second of their order being
// stored, and the stream then ends. It also reports each edge's memory per
// open stream.
func TestPushTenThousandStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 streams; -short skips it")
	}
	n := *pushStreams
	if pushRace && n > 3000 {
		t.Logf("race detector: %d streams instead of %d", 3000, n)
		n = 3000
	}
	// This process holds the shoppers' ends; each edge process its own.
	if err := raiseNoFile(n + 1000); err != nil {
		t.Skipf("cannot hold %d streams: %v", n, err)
	}
	r := redistest.New(t)
	brokers, _ := kafkatest.Start(t)
	var store orderstore.Store
	switch *pushStore {
	case "clickhouse":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := orderstore.OpenClickHouse(ctx, chtest.Start(t), "flashgate", orderstore.ClickHouseOptions{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		store = s
	case "file":
		s, err := orderstore.OpenFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		store = s
	default:
		t.Fatalf("-e2e.push_store=%q: clickhouse or file", *pushStore)
	}
	t.Cleanup(func() { store.Close() })

	products := []string{"pa", "pb"}
	acts := activities(sale(products[0], n, 1), sale(products[1], n, 1))
	var edges [2]*pushEdgeProc
	for i := range edges {
		path := writeConfig(t, fmt.Sprintf("node_id: %d\nredis: {addr: %q}\n", 100+i, r.Addr()), pushPipeline(brokers), acts)
		edges[i] = startPushEdgeProc(t, path)
	}
	j := newJWTs(t, sessionSecret)

	// Shopper i buys product i%2 on edge (i/2)%2 and waits on that edge.
	type shopper struct {
		user, product, order string
		edge                 int
	}
	shoppers := make([]shopper, n)
	start := time.Now()
	{
		api := [2]*edge{{t: t, addr: edges[0].addr, api: newAPIClient()}, {t: t, addr: edges[1].addr, api: newAPIClient()}}
		work := make(chan int)
		var wg sync.WaitGroup
		var failed sync.Map
		for range 256 {
			wg.Go(func() {
				for i := range work {
					s := shopper{user: "pl-" + strconv.Itoa(i), product: products[i%2], edge: (i / 2) % 2}
					res, err := api[s.edge].attempt(j.get(s.user), s.product, 1)
					if err != nil || res.status != 200 {
						failed.Store(i, fmt.Sprint(res, err))
						continue
					}
					s.order = jsonStr(res.body, "orderId")
					shoppers[i] = s
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		failed.Range(func(k, v any) bool { t.Fatalf("purchase %v: %v", k, v); return false })
	}
	t.Logf("%d purchases through 2 edges in %v", n, time.Since(start).Round(time.Millisecond))

	var before [2]pushEdgeStats
	for i, e := range edges {
		before[i] = e.stats(t)
	}

	// Every shopper opens the stream and reads the pending state; then
	// waits for the outcome.
	type result struct {
		at   time.Time
		data string
		err  error
	}
	results := make([]result, n)
	var opened, done sync.WaitGroup
	openErrs := make(chan error, n)
	sem := make(chan struct{}, 512) // dials in flight; the backlog is finite
	start = time.Now()
	for i := range shoppers {
		opened.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			s := shoppers[i]
			sem <- struct{}{}
			st, err := openPushStream(edges[s.edge].addr, "orderId="+s.order+"&productId="+s.product, j.get(s.user))
			var first string
			if err == nil {
				if st.status != 200 {
					err = fmt.Errorf("status %d %s", st.status, st.body)
				} else if first, err = st.next(30 * time.Second); err == nil && jsonStr([]byte(first), "status") != "pending" {
					err = fmt.Errorf("first event %s", first)
				}
			}
			<-sem
			opened.Done()
			if err != nil {
				openErrs <- fmt.Errorf("shopper %d: %w", i, err)
				return
			}
			defer st.close()
			data, err := st.next(2 * time.Minute)
			results[i] = result{at: time.Now(), data: data, err: err}
			if err == nil {
				if ev, end := st.next(10 * time.Second); end != io.EOF {
					results[i].err = fmt.Errorf("after the outcome: %q %v, want the end", ev, end)
				}
			}
		}()
	}
	opened.Wait()
	close(openErrs)
	for err := range openErrs {
		t.Fatal(err)
	}
	t.Logf("%d streams open and pending in %v", n, time.Since(start).Round(time.Millisecond))

	// Memory per open stream in each edge process, once the idle workers
	// of the burst are gone (max idle 1s there).
	for i, e := range edges {
		var st pushEdgeStats
		waitFor(15*time.Second, func() bool {
			st = e.stats(t)
			return st.Goroutines <= before[i].Goroutines+50
		})
		open := st.Hub.Open
		if open < int64(n/2) {
			t.Fatalf("edge %d holds %d streams, want %d", i, open, n/2)
		}
		per := float64(int64(st.HeapStack)-int64(before[i].HeapStack)) / float64(open)
		t.Logf("edge %d: %d open streams, %.0f B per stream (HeapInuse+StackInuse), %d goroutines (%d before)",
			i, open, per, st.Goroutines, before[i].Goroutines)
		if per > 16<<10 {
			t.Errorf("edge %d: %.0f B per stream, budget 16384", i, per)
		}
	}

	// Now store: the consumer publishes each batch after it is stored.
	var mu sync.Mutex
	stored := map[string]time.Time{}
	start = time.Now()
	pushConsumer(t, brokers, r.Addr(), store, func(batch map[string][]int64, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for p, ids := range batch {
			for _, id := range ids {
				stored[p+"/"+strconv.FormatInt(id, 10)] = at
			}
		}
	})
	done.Wait()
	took := time.Since(start)

	var lat []time.Duration
	for i, res := range results {
		s := shoppers[i]
		if res.err != nil {
			t.Fatalf("shopper %d (%s on edge %d): %v", i, s.order, s.edge, res.err)
		}
		if jsonStr([]byte(res.data), "status") != "success" || jsonStr([]byte(res.data), "orderId") != s.order {
			t.Fatalf("shopper %d got %s, want success for order %s", i, res.data, s.order)
		}
		mu.Lock()
		at, ok := stored[s.product+"/"+s.order]
		mu.Unlock()
		if !ok {
			t.Fatalf("shopper %d got an outcome for %s/%s, which the consumer never reported stored", i, s.product, s.order)
		}
		lat = append(lat, res.at.Sub(at))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	t.Logf("store=%s: %d outcomes in %v after the consumer started; stored -> received: p50 %v, p99 %v, max %v",
		*pushStore, n, took.Round(time.Millisecond), pct(0.5), pct(0.99), lat[len(lat)-1])
	if max := lat[len(lat)-1]; max > time.Second {
		t.Fatalf("slowest outcome arrived %v after its order was stored, want within 1s", max)
	}
	var pushes uint64
	for i, e := range edges {
		var st pushEdgeStats
		waitFor(5*time.Second, func() bool { st = e.stats(t); return st.Hub.Open == 0 })
		if st.Hub.Open != 0 || st.Hub.DropsSlow+st.Hub.DropsGone != 0 {
			t.Errorf("edge %d after the outcomes: %+v", i, st.Hub)
		}
		pushes += st.Hub.Pushes
	}
	if pushes != uint64(n) {
		t.Errorf("%d pushes over both edges, want %d", pushes, n)
	}
}
