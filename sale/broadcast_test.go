package sale

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
)

// On Redis Cluster each sale's sold-out broadcasts have their own channel:
// the Service follows the sales it knows, a sale created through the admin
// API at run time included.
func TestSoldOutBroadcastFollowsAdminSalesOnCluster(t *testing.T) {
	c := redistest.NewCluster(t)
	open := func() *stock.Store {
		return stocktest.Open(t, strings.Join(c.Addrs(), ","), stocktest.Timeout(2*time.Second))
	}
	st, other := open(), open() // other is another edge
	now := time.Now()
	sale := func(p string) *catalog.Sale {
		return &catalog.Sale{ProductID: p, Name: p, PriceCents: 100, Stock: 10, Limit: 1,
			StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}
	}
	// No periodic refresh (an hour): only broadcasts set the flag.
	svc := New(Deps{Store: st, Sales: catalog.NewRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), RefreshInterval: time.Hour})
	ctx := context.Background()
	if err := svc.Apply(ctx, &Settings{Catalog: []*catalog.Sale{sale("fa")}}); err != nil {
		t.Fatal(err)
	}
	svc.Start()
	defer svc.Stop()

	// Stock is left, so a refresh (one runs each time a channel is
	// subscribed) clears the flag: only the broadcast sets it. It is sent
	// until one arrives after the subscription's refresh.
	soldOutByBroadcast := func(p string) {
		t.Helper()
		await.Until(t, 10*time.Second, p+" flagged sold out by another edge's broadcast", func() bool {
			if err := other.PublishSoldOut(ctx, p, true); err != nil {
				t.Fatal(err)
			}
			return svc.d.Sales.StateOf(p).SoldOut()
		})
	}
	soldOutByBroadcast("fa")
	if err := svc.PutActivity(ctx, sale("fb")); err != nil {
		t.Fatal(err)
	}
	soldOutByBroadcast("fb")
}
