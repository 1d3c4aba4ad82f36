package sale

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/activity"
)

// What the durable catalogue records of restocks and admin-created sales,
// as a rebuild after Redis lost a sale's meta reads it (durableSale).
func TestDurableCatalogueRecordsStockAndRestocks(t *testing.T) {
	ctx := context.Background()
	srv := redistest.New(t)
	st, err := stock.Open(ctx, srv.Addr(), stock.Options{Timeout: 10 * time.Second, QueueTimeout: 10 * time.Second,
		OrderTTL: conf.Defaults().Sale.OrderTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	store, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := New(Deps{Store: st, Activities: activity.NewRegistry(), Catalog: store,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	now := time.Now()
	act := func(p string, stock int64) *activity.Activity {
		return &activity.Activity{ProductID: p, Name: p, PriceCents: 100, Stock: stock, Limit: 1,
			StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}
	}
	if err := svc.Apply(ctx, &Settings{Catalog: []*activity.Activity{act("rs", 10)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Restock(ctx, "rs", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Restock(ctx, "rs", 2); err != nil {
		t.Fatal(err)
	}
	// Redis refuses a restock of a sale it does not have: the record is
	// withdrawn, so no rebuild ever counts those units.
	if _, err := svc.Restock(ctx, "nosuch", 3); !errors.Is(err, stock.ErrNotWarmed) {
		t.Fatalf("restock of an unknown sale: %v", err)
	}
	if err := svc.PutActivity(ctx, act("ad", 7)); err != nil {
		t.Fatal(err)
	}
	if err := svc.PutActivity(ctx, act("ad", 50)); err != nil { // a live sale's stock stays
		t.Fatal(err)
	}
	if info, _, _ := st.SaleInfo(ctx, "ad"); info.Initial != 7 || info.Remaining != 7 {
		t.Fatalf("ad in Redis %+v", info)
	}
	for p, want := range map[string]durableSale{
		"rs":     {Known: true, Restocked: 7},
		"ad":     {Known: true, Initial: 7},
		"nosuch": {},
		"cfg":    {},
	} {
		got, err := svc.durableSale(ctx, p)
		if err != nil || got != want {
			t.Errorf("durableSale(%s) = %+v %v, want %+v", p, got, err, want)
		}
	}
	recs, _ := store.ReadCatalog(ctx, "nosuch")
	if len(recs) != 1 || recs[0].Units != 0 {
		t.Errorf("the refused restock's record %+v, want withdrawn (units 0)", recs)
	}

	// Redis lost the meta and the catalog: an edge restarted later still
	// has the admin sale's first stock, and its restocks, to rebuild from.
	srv.Restart()
	fresh := New(Deps{Store: st, Activities: activity.NewRegistry(), Catalog: store,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if got, err := fresh.durableSale(ctx, "ad"); err != nil || got != (durableSale{Known: true, Initial: 7}) {
		t.Fatalf("after the restart: %+v %v", got, err)
	}
}
