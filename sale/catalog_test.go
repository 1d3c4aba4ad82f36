package sale

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
)

// What the durable catalogue records of restocks and admin-created sales,
// as a rebuild after Redis lost a sale's meta reads it (durableSale).
func TestDurableCatalogueRecordsStockAndRestocks(t *testing.T) {
	ctx := context.Background()
	srv := redistest.New(t)
	st := stocktest.Open(t, srv.Addr())
	store, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := New(Deps{Store: st, Sales: catalog.NewRegistry(), Catalog: store,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	now := time.Now()
	act := func(p string, stock int64) *catalog.Sale {
		return &catalog.Sale{ProductID: p, Name: p, PriceCents: 100, Stock: stock, Limit: 1,
			StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}
	}
	if err := svc.Apply(ctx, &Settings{Catalog: []*catalog.Sale{act("rs", 10)}}); err != nil {
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
	fresh := New(Deps{Store: st, Sales: catalog.NewRegistry(), Catalog: store,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if got, err := fresh.durableSale(ctx, "ad"); err != nil || got != (durableSale{Known: true, Initial: 7}) {
		t.Fatalf("after the restart: %+v %v", got, err)
	}
}

// A sale whose stock Redis lost answers 503 RECOVERING while it is closed
// (here for good: there is no ledger to rebuild it from), not "opening".
func TestLostSaleAnswersRecovering(t *testing.T) {
	r := newDoRig(t, stock.Options{}, NewBreakers(1000, time.Second, nil, nil), "lp")
	answer := func(user string) (int, string) {
		now := time.Now()
		req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: now.UnixNano(), Endpoint: api.EndpointDo,
			UserID: []byte(user), ProductID: []byte("lp"), Qty: 1, TokenExpiresMs: now.Add(time.Minute).UnixMilli(),
			Checked: api.TokenValid}
		binary.BigEndian.PutUint64(req.TokenNonce[:], nonceSeq.Add(1))
		r.svc.Handle(req)
		var body struct{ Code string }
		json.Unmarshal(req.Ctx.Response.Body(), &body)
		return req.Ctx.Response.StatusCode(), body.Code
	}
	if status, _ := answer("before"); status != 200 {
		t.Fatalf("purchase before the loss: %d", status)
	}
	r.srv.Restart()
	await.NoError(t, 10*time.Second, "a refresh that finds the sale lost", func() error {
		err := r.svc.Refresh(context.Background(), false)
		if err == nil {
			t.Fatal("a lost sale reopened without a ledger")
		}
		if !strings.Contains(err.Error(), "no ledger") {
			return err // the client reconnecting
		}
		return nil
	})
	if status, code := answer("after"); status != 503 || code != "RECOVERING" {
		t.Fatalf("purchase of the lost sale: %d %s, want 503 RECOVERING", status, code)
	}
}
