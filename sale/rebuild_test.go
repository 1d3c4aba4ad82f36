package sale_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/chtest"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/broker"
	"flashgate/orders/consumer"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/reconcile"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/catalog"
)

// These tests prove promise 4 of docs/architecture.md end to end: real redis-server (or
// the embedded one), a Kafka-protocol broker (kfake), the real consumer and
// order store, and the sale service's warm-up.

var seq atomic.Int64

func init() { seq.Store(time.Now().UnixNano() / 1000) }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// rig is one edge's pipeline: stock store, publisher, consumer, ledger.
type rig struct {
	t       *testing.T
	brokers []string
	store   orderstore.Store
	st      *stock.Store
	pub     *broker.Publisher
	svc     *sale.Service
	acts    []*catalog.Sale

	consMu   sync.Mutex
	stopCons context.CancelFunc
	consDone chan struct{}
	drains   atomic.Int64 // ledger drains started
	// mark makes the consumer mark stored orders success in Redis (and so
	// put their deadlines in the due set), as an edge's consumer does.
	mark bool
}

// edge is the configuration the rig's pipeline runs with: conf's defaults.
var edge = conf.Defaults()

func newRig(t *testing.T, st *stock.Store, store orderstore.Store) *rig {
	brokers, _ := kafkatest.Start(t, kfake.SeedTopics(4, edge.Kafka.Topic))
	r := &rig{t: t, brokers: brokers, store: store}
	r.useStock(st)
	t.Cleanup(r.stopConsumer)
	return r
}

// useStock points the edge at a (new) stock store: a new publisher, a new
// sale service with its own registry (a restarted process).
func (r *rig) useStock(st *stock.Store) {
	r.t.Helper()
	k := edge.Kafka
	pub, err := broker.NewPublisher(broker.PublisherConfig{Brokers: r.brokers, Topic: k.Topic, DLQTopic: k.DLQTopic,
		BatchTimeout: k.BatchTimeout, Timeout: k.Timeout, Outbox: st, Log: discard})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { pub.Close() })
	r.st, r.pub = st, pub
	r.svc = sale.New(sale.Deps{Store: st, Sales: catalog.NewRegistry(), Log: discard,
		Ledger: orderstore.Ledger{Store: r.store, Drain: r.drain}})
}

func (r *rig) drain(ctx context.Context) error {
	r.drains.Add(1)
	return consumer.WaitDrained(ctx, r.brokers, broker.Security{}, edge.Kafka.Topic, edge.Orders.Group, 50*time.Millisecond)
}

func (r *rig) startConsumer() {
	r.t.Helper()
	cfg := consumer.Config{Brokers: r.brokers, Topic: edge.Kafka.Topic, DLQTopic: edge.Kafka.DLQTopic,
		Group: edge.Orders.Group, BatchSize: edge.Orders.BatchSize, BatchTime: 10 * time.Millisecond, Store: r.store, Log: discard}
	if r.mark {
		cfg.Stock = r.st
	}
	c, err := consumer.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	r.consMu.Lock()
	r.stopCons, r.consDone = cancel, done
	r.consMu.Unlock()
}

func (r *rig) stopConsumer() {
	r.consMu.Lock()
	defer r.consMu.Unlock()
	if r.stopCons != nil {
		r.stopCons()
		<-r.consDone
		r.stopCons = nil
	}
}

func (r *rig) apply() error {
	return r.svc.Apply(context.Background(), &sale.Settings{Catalog: r.acts})
}

func newActivity(p string, stock int64, limit int) *catalog.Sale {
	now := time.Now()
	return &catalog.Sale{ProductID: p, Name: p, PriceCents: 100, Stock: stock, Limit: limit,
		StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}
}

func newAttempt(p, user string, qty, limit int) stock.Attempt {
	id := seq.Add(1)
	now := time.Now().UnixMilli()
	return stock.Attempt{
		Order: order.Order{
			ProductID: p, UserID: user, Qty: qty, ID: id, PriceCents: 100, CreatedMs: now, Edge: 1,
		},
		Limit: limit, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: now + 60_000,
	}
}

// buy is the edge's purchase path: the script, then the order event to
// Kafka (acknowledged) before the shopper would hear "pending".
func (r *rig) buy(p, user string, qty, limit int) (stock.Attempt, stock.Code) {
	r.t.Helper()
	a, code := r.deduct(p, user, qty, limit)
	if code == stock.OK {
		r.publish(a)
	}
	return a, code
}

// deduct runs the script only: an edge that dies (or whose Kafka write
// fails) before the event is published.
func (r *rig) deduct(p, user string, qty, limit int) (stock.Attempt, stock.Code) {
	r.t.Helper()
	a := newAttempt(p, user, qty, limit)
	out, err := r.st.Deduct(context.Background(), a)
	if err != nil {
		r.t.Fatalf("deduct %s/%s: %v", p, user, err)
	}
	a.TokenNonceHex = out.OutboxID // remembered for publish
	return a, out.Code
}

func (r *rig) publish(a stock.Attempt) {
	r.t.Helper()
	if err := r.pub.PublishAndAck(context.Background(), broker.OrderEvent(&a.Order), a.TokenNonceHex); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) release(a stock.Attempt) {
	r.t.Helper()
	ctx := context.Background()
	if ok, err := r.st.Release(ctx, a.ProductID, a.ID); !ok || err != nil {
		r.t.Fatalf("release %d: %v %v", a.ID, ok, err)
	}
	ev := broker.OrderEvent(&a.Order)
	ev.Type, ev.ReleasedMs = order.TypeRelease, time.Now().UnixMilli()
	if err := r.pub.Publish(ctx, ev); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) code(p, user string, qty, limit int) stock.Code {
	_, c := r.buy(p, user, qty, limit)
	return c
}

// sellOut sends n concurrent new shoppers at p (1 unit each) and returns
// how many succeeded.
func (r *rig) sellOut(p string, n, limit int) int64 {
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.code(p, "new"+strconv.Itoa(i), 1, limit) == stock.OK {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return ok.Load()
}

func (r *rig) info(p string) stock.SaleInfo {
	r.t.Helper()
	info, ok, err := r.st.SaleInfo(context.Background(), p)
	if err != nil || !ok {
		r.t.Fatalf("sale %s: %v %v", p, ok, err)
	}
	return info
}

func (r *rig) reconcileClean(products ...string) {
	r.t.Helper()
	rep, err := reconcile.Run(context.Background(), r.st, r.store, products, nil,
		reconcile.WithDrain(r.drain, 30*time.Second), reconcile.WithRetry(5*time.Second, 100*time.Millisecond))
	var b strings.Builder
	rep.Print(&b)
	r.t.Log("\n" + b.String())
	if err != nil {
		r.t.Fatal(err)
	}
}

func openStoreKind(t *testing.T, kind string) orderstore.Store {
	t.Helper()
	var s orderstore.Store
	var err error
	switch kind {
	case "file":
		s, err = orderstore.OpenFile(t.TempDir())
	case "clickhouse":
		s, err = orderstore.OpenClickHouse(context.Background(), chtest.Start(t), "rebuild", orderstore.ClickHouseOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A real Redis restarted empty: the sale stays closed until the consumer
// drained, then reopens with exactly what is left, every buyer's count
// restored, and reconcile balances. In both ledgers (stock.Options.OrderKeys):
// the sales are warmed again by the rebuilding edge, in its ledger.
func TestRedisLossRebuildsFromLedger(t *testing.T) {
	for _, kind := range []string{"file", "clickhouse"} {
		for _, orderKeys := range []bool{false, true} {
			if kind == "clickhouse" && orderKeys {
				continue // the ledger is Redis' side: the file store proves it
			}
			name := kind + "/batches"
			if orderKeys {
				name = kind + "/orders"
			}
			t.Run(name, func(t *testing.T) { testRedisLoss(t, kind, orderKeys) })
		}
	}
}

func testRedisLoss(t *testing.T, kind string, orderKeys bool) {
	ctx := context.Background()
	srv := redistest.New(t)
	st := stocktest.Open(t, srv.Addr(), stocktest.OrderKeys(orderKeys))
	r := newRig(t, st, openStoreKind(t, kind))
	r.startConsumer()
	const limit = 2
	r.acts = []*catalog.Sale{newActivity("lp", 30, limit), newActivity("rp", 4, limit)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}

	// Before the loss. lp: 8 shoppers at the limit, 4 with one unit, u0
	// bought twice and gave one back: 20 held, 1 released.
	var units int64 // units shoppers hold, whatever Redis says
	for i := range 8 {
		if c := r.code("lp", "u"+strconv.Itoa(i), 2, limit); c != stock.OK {
			t.Fatalf("u%d: %v", i, c)
		}
		units += 2
	}
	rel, _ := r.buy("lp", "u8", 1, limit)
	r.buy("lp", "u8", 1, limit)
	r.release(rel)
	for i := 9; i < 12; i++ {
		r.buy("lp", "u"+strconv.Itoa(i), 1, limit)
	}
	units += 4
	// rp: 4 + a restock of 4, 6 sold: the restock dies with the meta, the
	// ledger proves at least 2 of it.
	if _, err := r.svc.Restock(ctx, "rp", 4); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if c := r.code("rp", "r"+strconv.Itoa(i), 2, limit); c != stock.OK {
			t.Fatalf("rp r%d: %v", i, c)
		}
	}
	// Acknowledged by Kafka, not stored yet: the consumer is down.
	r.stopConsumer()
	for i := range 3 {
		if c := r.code("lp", "v"+strconv.Itoa(i), 2, limit); c != stock.OK {
			t.Fatalf("v%d: %v", i, c)
		}
		units += 2
	}
	if units != 26 {
		t.Fatal(units)
	}

	// Redis loses its memory.
	srv.Stop()
	srv.Start()

	// The first refresh on the empty server fences both sales; they stay
	// closed while the pipeline has not drained (the recovery waits in
	// the drain).
	await.NoError(t, 30*time.Second, "fenced", func() error {
		r.svc.Refresh(ctx, false) // the client may be reconnecting
		for _, p := range []string{"lp", "rp"} {
			if info, _, err := st.SaleInfo(ctx, p); err != nil || info.Fence == "" {
				return fmt.Errorf("%s not fenced: %+v %v", p, info, err)
			}
		}
		return nil
	})
	await.Until(t, 30*time.Second, "a recovery waiting for the drain", func() bool { return r.drains.Load() > 0 })
	for _, p := range []string{"lp", "rp"} {
		if _, c := r.deduct(p, "early", 1, limit); c != stock.Recovering {
			t.Fatalf("%s open before the rebuild: %v", p, c)
		}
	}

	r.startConsumer()
	await.NoError(t, 30*time.Second, "reopened after the drain", func() error {
		r.svc.Refresh(ctx, false)
		for _, p := range []string{"lp", "rp"} {
			if info, ok, err := st.SaleInfo(ctx, p); err != nil || !ok || info.Fence != "" {
				return fmt.Errorf("%s still closed: %+v %v %v", p, info, ok, err)
			}
		}
		return nil
	})

	info := r.info("lp")
	if info.Remaining != 30-units || info.Initial != 30 || info.Restocked != 0 || info.Released != 1 || info.Limit != limit {
		t.Fatalf("lp rebuilt as %+v, want remaining %d", info, 30-units)
	}
	if info := r.info("rp"); info.Remaining != 0 || info.Initial != 4 || info.Restocked != 2 {
		t.Fatalf("rp rebuilt as %+v", info)
	}
	// Every buyer at the limit is refused by the script; u8 has one left.
	for _, u := range []string{"u0", "u7", "v0", "v2", "u8"} {
		if c := r.code("lp", u, 2, limit); c != stock.LimitReached {
			t.Errorf("%s buying 2 after the rebuild: %v, want LIMIT_REACHED", u, c)
		}
	}
	if c := r.code("lp", "u8", 1, limit); c != stock.OK {
		t.Fatalf("u8's last unit: %v", c)
	}
	units++
	if c := r.code("lp", "u8", 1, limit); c != stock.LimitReached {
		t.Errorf("u8 over the limit: %v", c)
	}
	if c := r.code("rp", "r9", 1, limit); c != stock.SoldOut {
		t.Errorf("rp after the rebuild: %v, want SOLD_OUT", c)
	}
	// What is left sells exactly once.
	sold := r.sellOut("lp", 20, limit)
	if units+sold != 30 {
		t.Fatalf("held %d + sold after %d != 30", units, sold)
	}
	if r.info("lp").Remaining != 0 {
		t.Fatal("not sold out")
	}
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}
	tot, err := r.store.Totals(ctx, "lp")
	if err != nil || tot.HeldUnits() != 30 || tot.MaxUserUnits > limit {
		t.Fatalf("ledger %+v %v", tot, err)
	}
	r.reconcileClean("lp", "rp")
}

// The embedded default after kill -9: the last periodic snapshot is loaded
// without its stale stock and buyer keys, and the sale is rebuilt from the
// ledger plus the outbox entries that survived.
func TestEmbeddedCrashRebuildsFromLedger(t *testing.T) {
	ctx := context.Background()
	dataDir, crashDir := t.TempDir(), t.TempDir()
	st1 := stocktest.Open(t, "embedded", stocktest.Snapshots(dataDir, 20*time.Millisecond))
	fs, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	r := newRig(t, st1, fs)
	r.startConsumer()
	const limit = 3
	r.acts = []*catalog.Sale{newActivity("ep", 20, limit)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}

	a1, _ := r.buy("ep", "alice", 2, limit)
	a2, _ := r.buy("ep", "bob", 1, limit)
	// Deducted, never published (Kafka failed: the shopper got 503 with
	// the order id); its outbox entry is in the snapshot.
	a3, c := r.deduct("ep", "carol", 2, limit)
	if c != stock.OK {
		t.Fatal(c)
	}
	waitSnapshotWith(t, dataDir, a3.ID)
	copyFile(t, filepath.Join(dataDir, "stock.json"), filepath.Join(crashDir, "stock.json"))

	// After the last save, before the crash.
	r.buy("ep", "alice", 1, limit)   // alice at the limit
	r.release(a2)                    // bob's order released: the snapshot still says pending
	r.deduct("ep", "dave", 3, limit) // never published, outbox entry dies with the crash
	r.buy("ep", "erin", 2, limit)
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}

	// kill -9 and restart: a new store from the crash's file, a new edge.
	st2 := stocktest.Open(t, "embedded", stocktest.Snapshots(crashDir, -1))
	if st2.LostOnOpen() != 1 {
		t.Fatalf("LostOnOpen %d", st2.LostOnOpen())
	}
	r.useStock(st2)
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	// Held: alice 3 + erin 2 stored, carol 2 in the outbox; bob released;
	// dave's order never existed as far as anyone was told.
	info := r.info("ep")
	if info.Remaining != 13 || info.Initial != 20 || info.Released != 1 {
		t.Fatalf("rebuilt as %+v, want remaining 13", info)
	}
	for u, want := range map[string]int64{"alice": 3, "carol": 2, "erin": 2, "bob": 0, "dave": 0} {
		if n, _ := st2.Bought(ctx, "ep", u); n != want {
			t.Errorf("%s: bought %d, want %d", u, n, want)
		}
	}
	for id, want := range map[int64]string{a1.ID: stock.StateSuccess, a2.ID: stock.StateReleased, a3.ID: stock.StatePending} {
		if o, ok, _ := st2.OrderState(ctx, "ep", id); !ok || o.State != want {
			t.Errorf("order %d: %+v, want %s", id, o, want)
		}
	}
	// bob's order cannot be released twice.
	if ok, err := st2.Release(ctx, "ep", a2.ID); ok || err != nil {
		t.Fatalf("second release of bob's order: %v %v", ok, err)
	}
	if c := r.code("ep", "alice", 1, limit); c != stock.LimitReached {
		t.Errorf("alice after the crash: %v", c)
	}
	if c := r.code("ep", "carol", 2, limit); c != stock.LimitReached {
		t.Errorf("carol after the crash: %v", c)
	}
	if c := r.code("ep", "carol", 1, limit); c != stock.OK {
		t.Errorf("carol's last unit: %v", c)
	}

	// The relay delivers carol's surviving outbox entry.
	relay, err := broker.NewRelay(broker.RelayConfig{Store: st2, Publisher: r.pub, Products: func() []string { return []string{"ep"} },
		Interval: 50 * time.Millisecond, MinAge: 100 * time.Millisecond, Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	relay.Start()
	defer relay.Close()
	await.NoError(t, 30*time.Second, "carol's order stored by the relay", func() error {
		if _, ok, err := fs.Get(ctx, "ep", a3.ID); !ok || err != nil {
			return errors.New("not yet")
		}
		return nil
	})

	sold := r.sellOut("ep", 30, limit)
	if sold != 12 {
		t.Fatalf("sold %d after the rebuild, want 12", sold)
	}
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}
	tot, _ := fs.Totals(ctx, "ep")
	if tot.HeldUnits() != 20 || tot.MaxUserUnits > limit {
		t.Fatalf("ledger %+v", tot)
	}
	r.reconcileClean("ep")
}

// waitSnapshotWith waits until the embedded server's periodic save holds
// the order's outbox entry.
func waitSnapshotWith(t *testing.T, dir string, orderID int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var snap struct {
			Keys []struct {
				Key    string `json:"key"`
				Stream []struct {
					Values []string `json:"values"`
				} `json:"stream"`
			} `json:"keys"`
		}
		if b, err := os.ReadFile(filepath.Join(dir, "stock.json")); err == nil && json.Unmarshal(b, &snap) == nil {
			for _, k := range snap.Keys {
				for _, e := range k.Stream {
					// An order's entry, or a batch entry (ledger b) among
					// whose orders it is.
					f := map[string]string{}
					for i := 0; i+1 < len(e.Values); i += 2 {
						f[e.Values[i]] = e.Values[i+1]
					}
					evs, _ := (&stock.OutboxEntry{Fields: f}).Events()
					for _, ev := range evs {
						if ev.ID == orderID {
							return
						}
					}
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no periodic snapshot with the order")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Without a ledger nobody knows what a crashed sale sold: it stays closed,
// whatever path tries to warm it (refresh, or an admin update).
func TestLostSaleWithoutLedgerStaysClosed(t *testing.T) {
	ctx := context.Background()
	dir, crashDir := t.TempDir(), t.TempDir()
	st1 := stocktest.Open(t, "embedded", stocktest.Snapshots(dir, 10*time.Millisecond))
	a := newActivity("nl", 10, 2)
	settings := &sale.Settings{Catalog: []*catalog.Sale{a}}
	if err := sale.New(sale.Deps{Store: st1, Sales: catalog.NewRegistry(), Log: discard}).Apply(ctx, settings); err != nil {
		t.Fatal(err)
	}
	at := newAttempt("nl", "u", 1, 2)
	if out, err := st1.Deduct(ctx, at); err != nil || out.Code != stock.OK {
		t.Fatal(out, err)
	}
	waitSnapshotWith(t, dir, at.ID)
	copyFile(t, filepath.Join(dir, "stock.json"), filepath.Join(crashDir, "stock.json"))

	st2 := stocktest.Open(t, "embedded", stocktest.Snapshots(crashDir, -1))
	svc := sale.New(sale.Deps{Store: st2, Sales: catalog.NewRegistry(), Log: discard})
	if err := svc.Apply(ctx, settings); err == nil || !strings.Contains(err.Error(), "no ledger") {
		t.Fatalf("Apply after a crash without a ledger: %v", err)
	}
	b := *a
	b.Stock = 50
	if err := svc.PutActivity(ctx, &b); err == nil {
		t.Fatal("PutActivity reopened a lost sale")
	}
	if out, err := st2.Deduct(ctx, newAttempt("nl", "v", 1, 2)); err != nil || out.Code != stock.NotReady {
		t.Fatalf("lost sale open: %v %v", out.Code, err)
	}
}

// A sale fenced (its meta names another Redis process) while an edge
// without a ledger runs beside one with it: the first stays out of the
// rebuild (and keeps the sale closed), the second rebuilds and reopens it.
func TestFencedSaleWithAnEdgeWithoutLedger(t *testing.T) {
	ctx := context.Background()
	srv := redistest.New(t)
	st := openRedisStore(t, srv.Addr())
	r := newRig(t, st, openStoreKind(t, "file"))
	r.startConsumer()
	r.acts = []*catalog.Sale{newActivity("fl", 10, 2)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	if c := r.code("fl", "u0", 1, 2); c != stock.OK {
		t.Fatal(c)
	}
	bare := sale.New(sale.Deps{Store: st, Sales: catalog.NewRegistry(), Log: discard, Node: 2})
	if err := bare.Apply(ctx, &sale.Settings{Catalog: r.acts}); err != nil {
		t.Fatal(err)
	}
	// What a restart from a snapshot looks like to the deduction script.
	c := redistest.Client(t, srv.Addr())
	if err := c.Do(ctx, c.B().Hset().Key(stock.MetaKey("fl")).FieldValue().FieldValue("runid", "00ff").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, code := r.deduct("fl", "u1", 1, 2); code != stock.Recovering {
		t.Fatalf("deduction on an unverified server: %v", code)
	}
	if err := bare.Refresh(ctx, false); err != nil {
		t.Fatal(err)
	}
	bare.Stop() // waits for its recovery goroutine: it must end, not rebuild
	if info, _, _ := st.SaleInfo(ctx, "fl"); info.Fence == "" {
		t.Fatal("an edge without a ledger reopened the sale")
	}
	await.NoError(t, 30*time.Second, "rebuilt by the edge with the ledger", func() error {
		r.svc.Refresh(ctx, false)
		if info, ok, err := st.SaleInfo(ctx, "fl"); err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("still fenced: %+v %v", info, err)
		}
		return nil
	})
	if c := r.code("fl", "u1", 1, 2); c != stock.OK {
		t.Fatalf("after the rebuild: %v", c)
	}
}

// An edge that starts after Redis lost everything (meta included) while no
// edge ran: nothing in Redis says the sale existed, but the ledger does, so
// it is rebuilt, not warmed as new with its configured stock.
func TestFreshEdgeAfterRedisLostEverything(t *testing.T) {
	ctx := context.Background()
	srv := redistest.New(t)
	r := newRig(t, openRedisStore(t, srv.Addr()), openStoreKind(t, "file"))
	r.startConsumer()
	r.acts = []*catalog.Sale{newActivity("fe", 10, 1)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if c := r.code("fe", "u"+strconv.Itoa(i), 1, 1); c != stock.OK {
			t.Fatalf("u%d: %v", i, c)
		}
	}
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}
	r.svc.Stop()
	srv.Restart()
	r.useStock(openRedisStore(t, srv.Addr())) // a new process: it has seen nothing
	await.NoError(t, 30*time.Second, "reopened from the ledger", func() error {
		if err := r.apply(); err != nil {
			return err
		}
		if info, ok, err := r.st.SaleInfo(ctx, "fe"); err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("not open: %+v %v %v", info, ok, err)
		}
		return nil
	})
	if info := r.info("fe"); info.Remaining != 6 {
		t.Fatalf("a fresh edge reopened the sale with %d left, want 6 (10 - 4 sold)", info.Remaining)
	}
	if c := r.code("fe", "u0", 1, 1); c != stock.LimitReached {
		t.Fatalf("u0 buying again after the loss: %v", c)
	}
}
