package deadline

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/broker"
	"flashgate/orders/consumer"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
)

var (
	kafkaConf  = conf.Defaults().Kafka
	ordersConf = conf.Defaults().Orders
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// edge is what one edge brings to the sweep: its own Redis client and its
// own Kafka publisher.
type edge struct {
	st  *stock.Store
	pub *broker.Publisher
}

func newEdge(t *testing.T, redis string, brokers []string) edge {
	t.Helper()
	st := stocktest.Open(t, redis)
	pub, err := broker.NewPublisher(broker.PublisherConfig{Brokers: brokers, Topic: kafkaConf.Topic, DLQTopic: kafkaConf.DLQTopic,
		BatchTimeout: kafkaConf.BatchTimeout, Timeout: kafkaConf.Timeout, Outbox: st, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return edge{st, pub}
}

func startKafka(t *testing.T) []string {
	t.Helper()
	brokers, _ := kafkatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := broker.EnsureTopics(ctx, brokers, broker.Security{}, broker.Topics(kafkaConf.Topic, kafkaConf.DLQTopic, kafkaConf.Partitions)...); err != nil {
		t.Fatal(err)
	}
	return brokers
}

// sell makes n orders of product p, one per buyer, due payIn from now plus
// i ms for the i-th (so the deadlines are spread), stores them as the
// consumer would (success, deadline in the due set) and publishes their
// order events.
func sell(t *testing.T, e edge, p string, n int, payIn time.Duration) []order.Order {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(payIn).UnixMilli()
	out := make([]order.Order, n)
	evs := make([]order.Event, n)
	var outbox []string
	for i := range out {
		now := time.Now().UnixMilli()
		o := order.Order{ID: int64(1_000_000 + i), ProductID: p, UserID: "u" + strconv.Itoa(i), Qty: 1, PriceCents: 100,
			CreatedMs: now, Edge: 1, PayByMs: max(base+int64(i), now+1)}
		res, err := e.st.Deduct(ctx, stock.Attempt{Order: o, Limit: 1, TokenNonceHex: strconv.FormatInt(o.ID, 16), TokenExpiresMs: now + 60_000})
		if err != nil || res.Code != stock.OK {
			t.Fatalf("deduct %d: %+v %v", i, res, err)
		}
		out[i], evs[i] = o, broker.OrderEvent(&o)
		outbox = append(outbox, res.OutboxID)
	}
	if err := e.pub.Publish(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := e.st.AckOutbox(ctx, p, outbox...); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, n)
	for i := range out {
		ids[i] = out[i].ID
	}
	for lo := 0; lo < n; lo += 500 {
		if _, err := e.st.MarkSuccess(ctx, p, ids[lo:min(lo+500, n)]...); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestTwoSweepersReleaseEachOrderOnce: 1,000 orders due within a second,
// 100 of them paid first, two edges sweeping the one due set in small
// batches: every unpaid order is released exactly once (one edge's
// OnReleased, one release event in Kafka, one expired row in the ledger),
// the paid ones are kept, the units are back in stock, nothing stays in
// the outbox, and each release's lateness is recorded.
func TestTwoSweepersReleaseEachOrderOnce(t *testing.T) {
	const n, paidEvery = 1000, 10
	redis := redistest.Start(t)
	brokers := startKafka(t)
	a, b := newEdge(t, redis, brokers), newEdge(t, redis, brokers)
	ctx := context.Background()
	stocktest.Warm(t, a.st, "dl", n, 1)
	sold := sell(t, a, "dl", n, 1500*time.Millisecond)
	paid := map[int64]bool{}
	for i := 0; i < n; i += paidEvery {
		s, err := b.st.Pay(ctx, "dl", sold[i].ID, "", 0)
		if err != nil || s.Info.State != stock.StatePaid {
			t.Fatalf("pay %d: %+v %v", sold[i].ID, s, err)
		}
		if err := b.pub.PublishAndAck(ctx, s.Event(), s.OutboxID); err != nil {
			t.Fatal(err)
		}
		paid[sold[i].ID] = true
	}

	var mu sync.Mutex
	released := map[int64]int{}
	var sweepers []*Sweeper
	for _, e := range []edge{a, b} {
		sw, err := New(Config{Store: e.st, Publisher: e.pub, Products: func() []string { return []string{"dl", "cold"} },
			Every: 20 * time.Millisecond, Batch: 64, Log: quiet(),
			OnReleased: func(p string, ss []stock.Settlement) {
				mu.Lock()
				defer mu.Unlock()
				for _, s := range ss {
					if p != "dl" || s.Info.State != stock.StateExpired || !s.Changed || s.OutboxID == "" {
						t.Errorf("OnReleased(%s, %+v)", p, s)
					}
					released[s.Info.ID]++
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		sw.Start()
		t.Cleanup(sw.Close)
		sweepers = append(sweepers, sw)
	}
	want := n - len(paid)
	await.Until(t, 30*time.Second, "every unpaid order released", func() bool {
		return sweepers[0].Stats().Released+sweepers[1].Stats().Released >= uint64(want)
	})
	for _, sw := range sweepers {
		sw.Close()
	}

	mu.Lock()
	for _, o := range sold {
		switch got := released[o.ID]; {
		case paid[o.ID] && got != 0:
			t.Errorf("paid order %d released %d times", o.ID, got)
		case !paid[o.ID] && got != 1:
			t.Errorf("order %d released %d times, want once", o.ID, got)
		}
	}
	mu.Unlock()
	var lateCount uint64
	for i, sw := range sweepers {
		st := sw.Stats()
		t.Logf("sweeper %d: %d released, %d sweeps, max lateness %d ms, %d publish errors", i, st.Released, st.Sweeps, st.MaxLatenessMs, st.PublishErrors)
		if st.PublishErrors != 0 || st.Errors != 0 {
			t.Errorf("sweeper %d: %+v", i, st)
		}
		lateCount += st.Lateness.Count()
	}
	if lateCount != uint64(want) {
		t.Errorf("lateness recorded for %d releases, want %d", lateCount, want)
	}
	info, _, err := a.st.SaleInfo(ctx, "dl")
	if err != nil || info.Remaining != int64(want) || info.Expired != int64(want) || info.Released != int64(want) || info.Paid != int64(len(paid)) {
		t.Fatalf("sale %+v %v: want %d back in stock and expired, %d paid", info, err, want, len(paid))
	}
	if left, err := a.st.OutboxLen(ctx, "dl"); err != nil || left != 0 {
		t.Errorf("outbox holds %d entries (%v): the sweep acknowledges what Kafka took", left, err)
	}
	if _, total, err := a.st.NextDeadlines(ctx, "dl", 1); err != nil || total != 0 {
		t.Errorf("the due set holds %d members (%v)", total, err)
	}

	// The ledger: each order once, with its outcome; Kafka holds exactly
	// one event per order and settlement.
	store, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c, err := consumer.New(consumer.Config{Brokers: brokers, Topic: kafkaConf.Topic, DLQTopic: kafkaConf.DLQTopic, Group: ordersConf.Group,
		BatchSize: ordersConf.BatchSize, BatchTime: ordersConf.BatchTime, Store: store, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	defer func() { cancel(); <-done }()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	if err := c.Drained(dctx); err != nil {
		t.Fatal(err)
	}
	tot, err := store.Totals(ctx, "dl")
	if err != nil || tot.ExpiredOrders != int64(want) || tot.PaidOrders != int64(len(paid)) || tot.UnpaidOrders != 0 || tot.CancelledOrders != 0 {
		t.Fatalf("ledger %+v %v", tot, err)
	}
	if m := c.Stats().Messages; m != uint64(2*n) {
		t.Errorf("Kafka holds %d events, want %d: one order event and one settlement per order", m, 2*n)
	}
}

// TestSweepSkipsSalesNotOpen: a product that is not warmed, or fenced for
// a rebuild, is skipped without an error and nothing is released.
func TestSweepSkipsSalesNotOpen(t *testing.T) {
	redis := redistest.Start(t)
	brokers := startKafka(t)
	e := newEdge(t, redis, brokers)
	ctx := context.Background()
	stocktest.Warm(t, e.st, "fz", 5, 1)
	sold := sell(t, e, "fz", 5, 50*time.Millisecond)
	if _, err := e.st.Fence(ctx, "fz", stock.FenceID(time.Now().UnixMilli(), 1, "test")); err != nil {
		t.Fatal(err)
	}
	sw, err := New(Config{Store: e.st, Publisher: e.pub, Products: func() []string { return []string{"none", "fz"} }, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	await.Until(t, 5*time.Second, "every deadline passed", func() bool { return time.Now().UnixMilli() > sold[len(sold)-1].PayByMs+10 })
	if n, err := sw.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("Sweep = %d, %v; want nothing released, no error", n, err)
	}
	if _, total, err := e.st.NextDeadlines(ctx, "fz", 1); err != nil || total != 5 {
		t.Fatalf("the fenced sale's deadlines: %d, %v; want all 5 kept", total, err)
	}
}

// TestKafkaDownLeavesReleasesToTheRelay: with Kafka unreachable the sweep
// still releases (units back, OnReleased told) and counts the events it
// could not publish; their outbox entries stay, and the relay of an edge
// that reaches Kafka sends them.
func TestKafkaDownLeavesReleasesToTheRelay(t *testing.T) {
	redis := redistest.Start(t)
	brokers := startKafka(t)
	e := newEdge(t, redis, brokers)
	ctx := context.Background()
	stocktest.Warm(t, e.st, "kd", 3, 1)
	sold := sell(t, e, "kd", 3, 50*time.Millisecond)
	// A publisher whose broker does not answer (nothing listens there).
	down, err := broker.NewPublisher(broker.PublisherConfig{Brokers: []string{"127.0.0.1:1"}, Topic: kafkaConf.Topic, DLQTopic: kafkaConf.DLQTopic,
		BatchTimeout: kafkaConf.BatchTimeout, Timeout: 300 * time.Millisecond, Outbox: e.st, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	var told int
	sw, err := New(Config{Store: e.st, Publisher: down, Products: func() []string { return []string{"kd"} }, Log: quiet(),
		OnReleased: func(_ string, ss []stock.Settlement) { told += len(ss) }})
	if err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the deadlines to release", func() bool {
		_, err := sw.Sweep(ctx)
		return err == nil && sw.Stats().Released == 3
	})
	if st := sw.Stats(); st.PublishErrors != 3 || told != 3 {
		t.Fatalf("stats %+v, told %d: want 3 unpublished releases, all told", st, told)
	}
	if info, _, err := e.st.SaleInfo(ctx, "kd"); err != nil || info.Remaining != 3 {
		t.Fatalf("sale %+v %v: the units are back whatever Kafka does", info, err)
	}
	if n, err := e.st.OutboxLen(ctx, "kd"); err != nil || n != 3 {
		t.Fatalf("outbox %d %v: want the 3 release entries kept", n, err)
	}
	r, err := broker.NewRelay(broker.RelayConfig{Store: e.st, Publisher: e.pub, Products: func() []string { return []string{"kd"} },
		Interval: 20 * time.Millisecond, MinAge: kafkaConf.Timeout + 100*time.Millisecond, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	defer r.Close()
	await.Until(t, 30*time.Second, "the relay to send the releases", func() bool {
		n, err := e.st.OutboxLen(ctx, "kd")
		return err == nil && n == 0
	})
	for _, o := range sold {
		if got, ok, err := e.st.OrderState(ctx, "kd", o.ID); err != nil || !ok || got.State != stock.StateExpired {
			t.Errorf("order %d: %+v %v %v", o.ID, got, ok, err)
		}
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Store, Publisher and Products") {
		t.Fatalf("New without Store, Publisher and Products: %v", err)
	}
	redis := redistest.Start(t)
	e := newEdge(t, redis, startKafka(t))
	products := func() []string { return nil }
	for _, cfg := range []Config{{Every: -time.Second}, {Batch: -1}} {
		cfg.Store, cfg.Publisher, cfg.Products = e.st, e.pub, products
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("New(%+v): %v, want a refusal naming Every and Batch", cfg, err)
		}
	}
	sw, err := New(Config{Store: e.st, Publisher: e.pub, Products: products})
	if err != nil || sw.cfg.Every != DefaultEvery || sw.cfg.Batch != DefaultBatch {
		t.Fatalf("defaults: %+v %v", sw, err)
	}
	sw.Start()
	sw.Start() // a second Start does nothing
	sw.Close()
	sw.Close()
}
