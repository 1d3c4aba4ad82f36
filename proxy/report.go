package proxy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/reconcile"
	"flashgate/orders/stock"
	"flashgate/proxy/report"
	"flashgate/sale/api"
)

// PathReport is the sale report: ?productId=P, the HTML page, or its JSON
// with &format=json (what `proxy report` fetches when the stores are the
// edge's embedded ones).
const PathReport = "/admin/report"

// reportReconcileDrain bounds how long a report's reconcile waits for the
// consumer group to drain.
const reportReconcileDrain = 20 * time.Second

// RunReport is `proxy report` against real Redis, Kafka and ClickHouse.
func RunReport(ctx context.Context, cfg *conf.Config, log *slog.Logger, productID string) (*report.Report, error) {
	st, store, err := openLedger(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	defer store.Close()
	return buildReport(ctx, cfg, cfg.Kafka.Brokers, st, store, productID)
}

func buildReport(ctx context.Context, cfg *conf.Config, brokers []string, st *stock.Store, store orderstore.Store, productID string) (*report.Report, error) {
	return report.Build(ctx, report.Sources{Orders: store, Stock: st,
		Reconcile: func(ctx context.Context, p string) (reconcile.Report, error) {
			return reconcileOrders(ctx, cfg, brokers, st, store, []string{p}, reportReconcileDrain)
		}}, productID)
}

// errNoSuchSale: nothing of the product anywhere.
var errNoSuchSale = errors.New("no sale of this product: no order, no sale in Redis, no timeline")

// Report builds the sale report on this edge (its order store and Redis).
func (s *Server) Report(ctx context.Context, productID string) (*report.Report, error) {
	if s.orders.store == nil {
		return nil, errNoOrderStore
	}
	rep, err := buildReport(ctx, s.snap.Load().Doc.Config, s.orders.brokers, s.store, s.orders.store, productID)
	if err != nil {
		return nil, err
	}
	if rep.Orders.Orders == 0 && !rep.Sale.Known && rep.Edges == nil {
		return nil, errNoSuchSale
	}
	return rep, nil
}

// serveReport answers GET /admin/report.
func (s *Server) serveReport(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		api.MethodNotAllowed.Write(ctx)
		return
	}
	id := ctx.QueryArgs().Peek("productId")
	if !order.ValidProductID(id) {
		api.BadRequest.WithMessage("productId: a product id").Write(ctx)
		return
	}
	actx, cancel := context.WithTimeout(context.Background(), reportReconcileDrain+5*time.Second)
	defer cancel()
	rep, err := s.Report(actx, string(id))
	switch {
	case errors.Is(err, errNoSuchSale):
		api.NotFound.WithMessage(err.Error()).Write(ctx)
		return
	case err != nil:
		api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
		return
	}
	if string(ctx.QueryArgs().Peek("format")) == "json" {
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(rep))
		return
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		api.Internal.WithMessage(err.Error()).Write(ctx)
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetBody(page.Bytes())
}
