package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/orders/broker"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/reconcile"
	"flashgate/orders/stock"
)

// hookLog collects what OnStored reported.
type hookLog struct {
	mu  sync.Mutex
	ids map[int64]int
}

func (h *hookLog) fn(m map[string][]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ids := range m {
		for _, id := range ids {
			h.ids[id]++
		}
	}
}

func (h *hookLog) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

func reconcileClean(t *testing.T, st *stock.Store, s orderstore.Store, c *Consumer, products []string) {
	t.Helper()
	rep, err := reconcile.Run(context.Background(), st, s, products, nil,
		reconcile.WithDrain(c.Drained, 30*time.Second), reconcile.WithRetry(5*time.Second, 100*time.Millisecond))
	var b strings.Builder
	rep.Print(&b)
	t.Log("\n" + b.String())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("RECONCILE products=%d oversold=0 lost=0 duplicated=0\n", len(products))
	if !strings.HasSuffix(b.String(), want) {
		t.Fatalf("last line is not %q", want)
	}
}

func TestTenThousandOrders(t *testing.T) {
	brokers, _ := startKafka(t)
	st := openStock(t)
	s := openCH(t, ch.Addr())
	products := []string{"p1", "p2"}
	evs := sell(t, st, map[string]int64{"p1": 6000, "p2": 4000})
	if len(evs) != 10_000 {
		t.Fatalf("%d events from the deductions, want 10000", len(evs))
	}
	hooks := &hookLog{ids: map[int64]int{}}
	c := start(t, Config{Brokers: brokers, Store: s, Stock: st, OnStored: hooks.fn})

	w := newWriter(brokers, testTopic)
	defer w.Close()
	t0 := time.Now()
	publish(t, w, evs)
	// kafka-go has no idempotent producer: re-sends happen. 500 of them,
	// some in the same batch as the original, some much later.
	again := make([]order.Event, 500)
	for i := range again {
		again[i] = evs[rand.IntN(len(evs))]
	}
	publish(t, w, again)

	awaitState(t, 60*time.Second, "10000 rows", func() (bool, string) {
		n, err := storedRows(s, products)
		return err == nil && n == 10_000, fmt.Sprintf("%d rows, err %v, stats %+v", n, err, c.Stats())
	})
	t.Logf("10000 orders stored in %v; stats %+v", time.Since(t0), c.Stats())
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _ := storedRows(s, products); n != 10_000 {
		t.Fatalf("%d rows after drain, want exactly 10000", n)
	}
	st1 := c.Stats()
	if st1.Stored+st1.Duplicates != 10_500 || st1.DeadLettered != 0 {
		t.Errorf("stats %+v: stored+duplicates must be 10500", st1)
	}
	awaitState(t, 10*time.Second, "every order success in Redis", func() (bool, string) {
		for _, e := range evs {
			o, ok, err := st.OrderState(context.Background(), e.ProductID, e.ID)
			if err != nil || !ok || o.State != stock.StateSuccess {
				return false, fmt.Sprintf("order %d: %+v %v %v", e.ID, o, ok, err)
			}
		}
		return true, ""
	})
	if hooks.len() != 10_000 {
		t.Errorf("OnStored reported %d orders, want 10000", hooks.len())
	}
	reconcileClean(t, st, s, c, products)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestRedeliveredEventIsOneRow(t *testing.T) {
	brokers, _ := startKafka(t)
	s := openCH(t, ch.Addr())
	c := start(t, Config{Brokers: brokers, Store: s})
	w := newWriter(brokers, testTopic)
	defer w.Close()
	e := order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
		ID: 42, ProductID: "p", UserID: "u", Qty: 1, PriceCents: 100, CreatedMs: time.Now().UnixMilli(),
	}}
	publish(t, w, []order.Event{e})
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	publish(t, w, []order.Event{e, e}) // later, and twice in one batch
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	tot, err := s.Totals(context.Background(), "p")
	if err != nil || tot != (orderstore.Totals{UnpaidOrders: 1, UnpaidUnits: 1, MaxUser: "u", MaxUserUnits: 1}) {
		t.Fatalf("totals %+v %v", tot, err)
	}
}

func TestReleaseAfterOrder(t *testing.T) {
	brokers, _ := startKafka(t)
	st := openStock(t)
	s := openCH(t, ch.Addr())
	evs := sell(t, st, map[string]int64{"r1": 3})
	c := start(t, Config{Brokers: brokers, Store: s, Stock: st})
	w := newWriter(brokers, testTopic)
	defer w.Close()
	publish(t, w, evs)
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}

	// The order's units go back to stock (once), then the release event.
	e := evs[0]
	if ok, err := st.Release(context.Background(), e.ProductID, e.ID); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	rel := e
	rel.Type, rel.ReleasedMs = order.TypeRelease, time.Now().UnixMilli()
	publish(t, w, []order.Event{rel, rel, e}) // re-sent, and the order re-sent after it
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	r, ok, err := s.Get(context.Background(), e.ProductID, e.ID)
	if err != nil || !ok || r.Status != orderstore.StatusCancelled {
		t.Fatalf("row %+v %v %v, want status 2", r, ok, err)
	}
	tot, _ := s.Totals(context.Background(), "r1")
	if tot.HeldOrders() != 2 || tot.ReleasedOrders() != 1 || tot.ReleasedUnits() != 1 {
		t.Fatalf("totals %+v: want 2 orders, 1 release counted once", tot)
	}
	if o, _, _ := st.OrderState(context.Background(), e.ProductID, e.ID); o.State != stock.StateReleased {
		t.Fatalf("Redis state %q: a re-sent order must not resurrect a released one", o.State)
	}
	reconcileClean(t, st, s, c, []string{"r1"})
}

func TestClickHouseDownTenSeconds(t *testing.T) {
	brokers, _ := startKafka(t)
	st := openStock(t)
	srv := newCH(t)
	s := openCH(t, srv.Addr())
	products := []string{"d1", "d2"}
	evs := sell(t, st, map[string]int64{"d1": 5000, "d2": 5000})
	rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	c := start(t, Config{Brokers: brokers, Store: s, Stock: st})
	w := newWriter(brokers, testTopic)
	defer w.Close()

	publish(t, w, evs[:3000])
	awaitState(t, 30*time.Second, "first rows", func() (bool, string) {
		n, _ := storedRows(s, products)
		return n > 0, ""
	})
	srv.Stop()
	down := time.Now()
	publish(t, w, evs[3000:]) // Kafka takes them; the store cannot
	time.Sleep(10*time.Second - time.Since(down))
	if c.Stats().InsertErrors == 0 {
		t.Error("no insert failed while ClickHouse was down")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("ClickHouse back after %v (restart took %v); stats %+v", time.Since(down), srv.StartTook(), c.Stats())
	back := time.Now()
	awaitState(t, 30*time.Second, "10000 rows after ClickHouse returned", func() (bool, string) {
		n, err := storedRows(s, products)
		return err == nil && n == 10_000, fmt.Sprintf("%d rows, err %v", n, err)
	})
	t.Logf("caught up %v after ClickHouse returned; stats %+v", time.Since(back), c.Stats())
	reconcileClean(t, st, s, c, products)
}

func TestMalformedGoesToDLQ(t *testing.T) {
	brokers, _ := startKafka(t)
	s := openCH(t, ch.Addr())
	c := start(t, Config{Brokers: brokers, Store: s})
	w := newWriter(brokers, testTopic)
	defer w.Close()
	now := time.Now().UnixMilli()
	good := func(id int64) kafka.Message {
		e := order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
			ID: id, ProductID: "m", UserID: "u", Qty: 1, PriceCents: 1, CreatedMs: now,
		}}
		b, _ := e.Encode()
		return kafka.Message{Key: e.Key(), Value: b}
	}
	bad := []byte(`{"v":1,"type":"order","orderId":"7","productId":"m"`)
	tooExpensive := []byte(fmt.Sprintf(`{"v":1,"type":"order","orderId":"8","productId":"m","userId":"u","quantity":1,"priceCents":10000000000,"createdMs":%d}`, now))
	publishRaw(t, w, []kafka.Message{good(1), {Key: []byte("7"), Value: bad}, {Key: []byte("8"), Value: tooExpensive}, good(2)})
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if tot, _ := s.Totals(context.Background(), "m"); tot.HeldOrders() != 2 {
		t.Fatalf("orders %d, want the 2 good ones", tot.HeldOrders())
	}
	if got := c.Stats().DeadLettered; got != 2 {
		t.Fatalf("dead-lettered %d, want 2", got)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: kafkaConf.DLQTopic, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	// Two partitions, maybe two batches: any order.
	want := map[string]bool{string(bad): true, string(tooExpensive): true}
	for range 2 {
		m, err := r.ReadMessage(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !want[string(m.Value)] {
			t.Fatalf("DLQ value %q is not one of the original messages", m.Value)
		}
		delete(want, string(m.Value))
		var reason string
		for _, h := range m.Headers {
			if h.Key == broker.HeaderReason {
				reason = string(h.Value)
			}
		}
		if !strings.Contains(reason, "malformed") && !strings.Contains(reason, "invalid row") {
			t.Fatalf("DLQ reason header %q", reason)
		}
		t.Logf("dead letter %s: %s", m.Key, reason)
	}
	// and the group moved on
	publishRaw(t, w, []kafka.Message{good(3)})
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if tot, _ := s.Totals(context.Background(), "m"); tot.HeldOrders() != 3 {
		t.Fatalf("orders %d after the dead letters, want 3", tot.HeldOrders())
	}
}

func TestLagAndDrained(t *testing.T) {
	brokers, _ := startKafka(t)
	s, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if lag, err := GroupLag(context.Background(), brokers, broker.Security{}, "no-such-topic", ordersConf.Group); lag != 0 || err != nil {
		t.Fatalf("lag of a missing topic %d %v", lag, err)
	}
	w := newWriter(brokers, testTopic)
	defer w.Close()
	var evs []order.Event
	for i := range 100 {
		evs = append(evs, order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
			ID: int64(i + 1), ProductID: "l", UserID: "u", Qty: 1, CreatedMs: 1,
		}})
	}
	publish(t, w, evs)
	if lag, err := GroupLag(context.Background(), brokers, broker.Security{}, testTopic, ordersConf.Group); lag != 100 || err != nil {
		t.Fatalf("lag before consuming %d %v, want 100", lag, err)
	}
	if err := WaitDrained(ctxT(t, 300*time.Millisecond), brokers, broker.Security{}, testTopic, ordersConf.Group, 0); err == nil || !strings.Contains(err.Error(), "100 events") {
		t.Fatalf("WaitDrained without a consumer: %v", err)
	}
	c := start(t, Config{Brokers: brokers, Store: s})
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if tot, _ := s.Totals(context.Background(), "l"); tot.HeldOrders() != 100 {
		t.Fatalf("orders %d after Drained, want 100", tot.HeldOrders())
	}
	if lag, err := c.Lag(context.Background()); lag != 0 || err != nil {
		t.Fatalf("lag %d %v", lag, err)
	}
}

// failingStore fails its first n inserts.
type failingStore struct {
	orderstore.Store
	mu sync.Mutex
	n  int
}

func (f *failingStore) Insert(ctx context.Context, rows []orderstore.Row) error {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return fmt.Errorf("store down")
	}
	f.mu.Unlock()
	return f.Store.Insert(ctx, rows)
}

func TestInsertFailureCommitsNothing(t *testing.T) {
	brokers, _ := startKafka(t)
	fs, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	s := &failingStore{Store: fs, n: 4}
	w := newWriter(brokers, testTopic)
	defer w.Close()
	publish(t, w, []order.Event{{V: 1, Type: order.TypeOrder, Order: order.Order{
		ID: 1, ProductID: "f", UserID: "u", Qty: 1, CreatedMs: 1,
	}}})
	c := start(t, Config{Brokers: brokers, Store: s, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	awaitState(t, 10*time.Second, "retries", func() (bool, string) { return c.Stats().InsertErrors >= 2, "" })
	if lag, err := c.Lag(context.Background()); lag != 1 || err != nil {
		t.Fatalf("lag %d %v while the store fails: the offset must not be committed", lag, err)
	}
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if tot, _ := fs.Totals(context.Background(), "f"); tot.HeldOrders() != 1 {
		t.Fatalf("orders %d, want 1", tot.HeldOrders())
	}
	if got := c.Stats().InsertErrors; got != 4 {
		t.Fatalf("insert errors %d, want 4", got)
	}
}

// Two members of the group split the partitions; the second one joining
// rebalances the first mid-stream (redelivering what it had not committed).
// Every order is still stored exactly once.
func TestTwoConsumersRebalance(t *testing.T) {
	brokers, _ := startKafka(t)
	st := openStock(t)
	s := openCH(t, ch.Addr())
	products := []string{"g1"}
	evs := sell(t, st, map[string]int64{"g1": 4000})
	a := start(t, Config{Brokers: brokers, Store: s, Stock: st})
	w := newWriter(brokers, testTopic)
	defer w.Close()
	publish(t, w, evs[:1000])
	b := start(t, Config{Brokers: brokers, Store: s, Stock: st})
	for lo := 1000; lo < len(evs); lo += 200 { // across the rebalance
		publish(t, w, evs[lo:lo+200])
		time.Sleep(200 * time.Millisecond)
	}
	if err := a.Drained(ctxT(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Logf("a %+v\nb %+v", a.Stats(), b.Stats())
	if n, _ := storedRows(s, products); n != 4000 {
		t.Fatalf("%d rows, want 4000", n)
	}
	if a.Stats().Messages == 0 || b.Stats().Messages == 0 {
		t.Errorf("one member consumed nothing: the partitions were not split")
	}
	reconcileClean(t, st, s, a, products)
}

// TestPaidAndExpiredEvents: a paid event and an expiry replace their
// orders' rows whatever the delivery order (re-sent, the order after
// them), keep their kind and times, and move nothing in Redis: only order
// events mark success.
func TestPaidAndExpiredEvents(t *testing.T) {
	brokers, _ := startKafka(t)
	st := openStock(t)
	s := openCH(t, ch.Addr())
	evs := sell(t, st, map[string]int64{"pe": 3})
	c := start(t, Config{Brokers: brokers, Store: s, Stock: st})
	w := newWriter(brokers, testTopic)
	defer w.Close()
	publish(t, w, evs)
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	paid, err := st.Pay(ctx, "pe", evs[0].ID, "", 0)
	if err != nil || paid.Info.State != stock.StatePaid {
		t.Fatalf("pay: %+v %v", paid, err)
	}
	// An expiry as the sweep publishes it (these orders have no deadline,
	// so Redis would never make one: the ledger takes what Kafka says).
	exp := evs[1]
	exp.Type, exp.Reason, exp.ReleasedMs = order.TypeRelease, order.ReasonExpired, time.Now().UnixMilli()
	publish(t, w, []order.Event{paid.Event(), exp, paid.Event(), evs[0], evs[1]})
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	r, ok, err := s.Get(ctx, "pe", evs[0].ID)
	if err != nil || !ok || r.Status != orderstore.StatusPaid || r.PaidMs/1000 != paid.Info.PaidMs/1000 || r.PaidMs == 0 {
		t.Fatalf("paid row %+v %v %v", r, ok, err)
	}
	r, ok, err = s.Get(ctx, "pe", evs[1].ID)
	if err != nil || !ok || r.Status != orderstore.StatusCancelled || !r.Expired {
		t.Fatalf("expired row %+v %v %v", r, ok, err)
	}
	tot, err := s.Totals(ctx, "pe")
	if err != nil || tot.PaidOrders != 1 || tot.ExpiredOrders != 1 || tot.UnpaidOrders != 1 || tot.CancelledOrders != 0 {
		t.Fatalf("totals %+v %v", tot, err)
	}
	if o, _, _ := st.OrderState(ctx, "pe", evs[0].ID); o.State != stock.StatePaid {
		t.Fatalf("Redis state %q: a re-sent order event must not touch a paid order", o.State)
	}
	if got := c.Stats(); got.Paid == 0 || got.Released == 0 {
		t.Fatalf("stats %+v: paid and released rows counted", got)
	}
}
