package sale_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/chtest"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/catalog"
)

// These tests prove that the sale catalogue and the degrade switch are
// shared by every edge and survive both an edge restart and a Redis that
// restarted empty: real redis-server, both order stores (the embedded file
// and a real ClickHouse) as the durable catalogue.

func openRedisStore(t *testing.T, addr string) *stock.Store {
	t.Helper()
	return stocktest.Open(t, addr)
}

// durableEdge is one edge's sale service on the shared Redis and durable
// catalogue, with the config catalogue acts; a new one is an edge restarted.
func durableEdge(t *testing.T, st *stock.Store, cat orderstore.Catalog, acts ...*catalog.Sale) *sale.Service {
	t.Helper()
	return refreshingEdge(t, 0, st, cat, acts...)
}

// refreshingEdge is durableEdge whose refresh loop, once started, runs every
// refresh (0: the default).
func refreshingEdge(t *testing.T, refresh time.Duration, st *stock.Store, cat orderstore.Catalog, acts ...*catalog.Sale) *sale.Service {
	t.Helper()
	svc := sale.New(sale.Deps{Store: st, Sales: catalog.NewRegistry(), Log: discard, Catalog: cat, RefreshInterval: refresh})
	await.NoError(t, 10*time.Second, "the edge's first warm-up", func() error {
		return svc.Apply(context.Background(), &sale.Settings{Catalog: acts})
	})
	return svc
}

func TestDegradeHoldsOnEveryEdgeAndAcrossRestarts(t *testing.T) {
	for _, kind := range []string{"file", "clickhouse"} {
		t.Run(kind, func(t *testing.T) { testDegradeShared(t, kind) })
	}
}

func testDegradeShared(t *testing.T, kind string) {
	ctx := context.Background()
	srv := redistest.New(t)
	store := openStoreKind(t, kind)
	acts := []*catalog.Sale{newActivity("d1", 10, 1), newActivity("d2", 10, 1)}
	a := durableEdge(t, openRedisStore(t, srv.Addr()), store, acts...)
	b := refreshingEdge(t, 20*time.Millisecond, openRedisStore(t, srv.Addr()), store, acts...)
	b.Start() // the refresh loop picks the switch up
	var stopB sync.Once
	t.Cleanup(func() { stopB.Do(b.Stop) })
	degraded := func(s *sale.Service, p string) bool { return s.Degraded([]byte(p)) }

	stored, err := a.SetDegraded(ctx, "d1", true)
	if err != nil || !stored.Redis || !stored.Durable || stored.Missed != nil {
		t.Fatalf("degrade d1 on edge A: %+v %v", stored, err)
	}
	if !degraded(a, "d1") || degraded(a, "d2") {
		t.Fatal("edge A does not apply its own switch at once")
	}
	await.Until(t, 10*time.Second, "edge B degrades d1", func() bool { return degraded(b, "d1") })
	if degraded(b, "d2") {
		t.Fatal("edge B degraded d2 too")
	}
	if _, err := b.SetDegraded(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !degraded(a, "d2") {
		t.Fatal("edge A missed the switch of every product set on edge B")
	}
	if _, err := a.SetDegraded(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "edge B lifts the switch of every product", func() bool { return !degraded(b, "d2") })

	// An edge restarted knows it from its first refresh.
	c := durableEdge(t, openRedisStore(t, srv.Addr()), store, acts...)
	if !degraded(c, "d1") || degraded(c, "d2") {
		t.Fatalf("restarted edge: d1 %v d2 %v, want true false", degraded(c, "d1"), degraded(c, "d2"))
	}

	// Redis restarted empty, every edge restarted too: the durable
	// catalogue keeps d1 closed, and the first edge back gives Redis its
	// switches again.
	stopB.Do(b.Stop)
	srv.Restart()
	st := openRedisStore(t, srv.Addr())
	if all, ps, err := st.DegradeState(ctx); err != nil || all.Version != 0 || len(ps) != 0 {
		t.Fatalf("Redis did not lose its memory: %+v %v %v", all, ps, err)
	}
	d := durableEdge(t, st, store, acts...)
	if !degraded(d, "d1") || degraded(d, "d2") {
		t.Fatalf("edge after Redis lost its memory: d1 %v d2 %v, want true false", degraded(d, "d1"), degraded(d, "d2"))
	}
	all, ps, err := st.DegradeState(ctx)
	if err != nil || all.On || all.Version == 0 || !ps["d1"].On {
		t.Fatalf("switches not restored to Redis: all %+v, %v, %v", all, ps, err)
	}
	// An edge that kept running through the loss keeps d1 closed as well.
	if err := a.Refresh(ctx, false); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Log(err) // the client reconnecting; the switch is from memory anyway
	}
	if !degraded(a, "d1") || degraded(a, "d2") {
		t.Fatal("edge A lifted d1 when Redis lost its memory")
	}
}

// A durable catalogue that does not answer: the admin change fails with
// ErrCatalogUnavailable and nothing changes, in Redis or on the edge.
func TestAdminChangeWithoutTheDurableCatalogueChangesNothing(t *testing.T) {
	ctx := context.Background()
	chSrv := chtest.New(t)
	store, err := orderstore.OpenClickHouse(ctx, chSrv.Addr(), "cat", orderstore.ClickHouseOptions{DialTimeout: 200 * time.Millisecond, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	srv := redistest.New(t)
	st := openRedisStore(t, srv.Addr())
	svc := durableEdge(t, st, store, newActivity("cfg", 10, 1))
	if err := svc.PutActivity(ctx, newActivity("made", 5, 1)); err != nil {
		t.Fatal(err)
	}
	chSrv.Stop()

	if err := svc.PutActivity(ctx, newActivity("more", 5, 1)); !errors.Is(err, sale.ErrCatalogUnavailable) {
		t.Fatalf("PutActivity with ClickHouse down: %v, want ErrCatalogUnavailable", err)
	}
	if _, err := svc.Restock(ctx, "made", 3); !errors.Is(err, sale.ErrCatalogUnavailable) {
		t.Fatalf("Restock with ClickHouse down: %v, want ErrCatalogUnavailable", err)
	}
	m, err := st.Catalog(ctx)
	if _, created := m["more"]; err != nil || created || len(m) != 1 {
		t.Fatalf("Redis catalog after the refused changes: %v %v", m, err)
	}
	if info, ok, err := st.SaleInfo(ctx, "made"); err != nil || !ok || info.Remaining != 5 || info.Restocked != 0 {
		t.Fatalf("a refused restock changed the sale: %+v %v %v", info, ok, err)
	}
	if _, ok, _ := st.SaleInfo(ctx, "more"); ok {
		t.Fatal("a refused activity was opened")
	}

	// The switch is the emergency brake: Redis alone takes it, and the
	// durable catalogue is given it once it answers.
	stored, err := svc.SetDegraded(ctx, "made", true)
	if err != nil || !stored.Redis || stored.Durable || stored.Missed == nil {
		t.Fatalf("degrade with ClickHouse down: %+v %v", stored, err)
	}
	if !svc.Degraded([]byte("made")) {
		t.Fatal("not degraded")
	}
	if err := chSrv.Start(); err != nil {
		t.Fatal(err)
	}
	await.NoError(t, 30*time.Second, "the switch recorded in the durable catalogue", func() error {
		if err := svc.Refresh(ctx, false); err != nil {
			return err
		}
		recs, err := store.ReadCatalog(ctx, "made")
		if err != nil {
			return err
		}
		if e := orderstore.Entries(recs)["made"]; !e.Degraded {
			return errors.New("not recorded yet")
		}
		return nil
	})
}

// A Redis restarted empty under a sale created through the admin API: the
// edges keep it (never "unknown product"), Redis gets its catalog entry
// back, and it reopens through the ledger rebuild with exactly what is
// left and every buyer's count.
func TestAdminSaleComesBackAfterRedisRestartedEmpty(t *testing.T) {
	for _, kind := range []string{"file", "clickhouse"} {
		t.Run(kind, func(t *testing.T) { testAdminSaleComesBack(t, kind) })
	}
}

func testAdminSaleComesBack(t *testing.T, kind string) {
	ctx := context.Background()
	srv := redistest.New(t)
	r := newRig(t, openRedisStore(t, srv.Addr()), openStoreKind(t, kind))
	var reg *catalog.Registry
	withCatalog := func() {
		reg = catalog.NewRegistry()
		r.svc = sale.New(sale.Deps{Store: r.st, Sales: reg, Log: discard, Catalog: r.store,
			Ledger: orderstore.Ledger{Store: r.store, Drain: r.drain}})
	}
	withCatalog()
	r.startConsumer()
	const limit = 2
	if err := r.apply(); err != nil { // no activity in the config file
		t.Fatal(err)
	}
	if err := r.svc.PutActivity(ctx, newActivity("as", 20, limit)); err != nil {
		t.Fatal(err)
	}
	held := int64(0)
	for i := range 3 {
		if c := r.code("as", "u"+strconv.Itoa(i), 2, limit); c != stock.OK {
			t.Fatalf("u%d: %v", i, c)
		}
		held += 2
	}
	r.stopConsumer() // u3's unit is in Kafka, not stored yet
	if c := r.code("as", "u3", 1, limit); c != stock.OK {
		t.Fatal(c)
	}
	held++

	srv.Restart()
	r.useStock(openRedisStore(t, srv.Addr())) // an edge that restarted with Redis
	withCatalog()
	if m, err := r.st.Catalog(ctx); err != nil || len(m) != 0 {
		t.Fatalf("Redis kept its catalog: %v %v", m, err)
	}
	// Closed while the ledger is behind, and known all the same: the
	// recovery fences it and waits in the drain.
	drains := r.drains.Load()
	await.NoError(t, 30*time.Second, "fenced while the ledger is behind", func() error {
		rctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		r.svc.Apply(rctx, &sale.Settings{}) // the client may be reconnecting
		if info, _, err := r.st.SaleInfo(ctx, "as"); err != nil || info.Fence == "" {
			return fmt.Errorf("not fenced: %+v %v", info, err)
		}
		return nil
	})
	await.Until(t, 30*time.Second, "a recovery waiting for the drain", func() bool { return r.drains.Load() > drains })
	if _, ok := reg.GetString("as"); !ok {
		t.Fatal("the admin-created sale is unknown while it is being recovered")
	}
	if _, c := r.deduct("as", "early", 1, limit); c != stock.NotReady && c != stock.Recovering {
		t.Fatalf("the lost sale open before its rebuild: %v", c)
	}
	r.startConsumer()
	await.NoError(t, 30*time.Second, "the sale rebuilt", func() error {
		if err := r.apply(); err != nil {
			return err
		}
		if info, ok, err := r.st.SaleInfo(ctx, "as"); err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("still closed: %+v %v %v", info, ok, err)
		}
		return nil
	})
	if _, ok := reg.GetString("as"); !ok {
		t.Fatal("the admin-created sale is unknown after Redis lost its memory")
	}
	if m, _ := r.st.Catalog(ctx); m["as"].Activity == "" {
		t.Fatalf("catalog entry not restored to Redis: %v", m)
	}
	info := r.info("as")
	if info.Remaining != 20-held || info.Initial != 20 || info.Limit != limit {
		t.Fatalf("rebuilt as %+v, want remaining %d of 20", info, 20-held)
	}
	for _, u := range []string{"u0", "u1", "u2"} {
		if c := r.code("as", u, 1, limit); c != stock.LimitReached {
			t.Errorf("%s after the rebuild: %v, want LIMIT_REACHED", u, c)
		}
	}
	if sold := r.sellOut("as", 30, limit); held+sold != 20 {
		t.Fatalf("held %d + sold after the rebuild %d != 20", held, sold)
	}
	r.reconcileClean("as")
}
