package proxy

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/orders/order"
	"flashgate/orders/reconcile"
	"flashgate/orders/stock"
	"flashgate/sale/api"
)

// handleAdminOrders serves order cancellation and reconciliation; it
// reports false for paths it does not know.
func (s *Server) handleAdminOrders(ctx *fasthttp.RequestCtx, path string) bool {
	switch path {
	case "/admin/orders/cancel":
		if !s.requirePost(ctx) {
			return true
		}
		var req struct {
			ProductID string `json:"productId"`
			OrderID   int64  `json:"orderId,string"`
		}
		if rej := decodeAdmin(ctx, &req); rej != nil {
			rej.Write(ctx)
			return true
		}
		if !order.ValidProductID(req.ProductID) || req.OrderID <= 0 {
			api.AdminCancelUsage.Write(ctx)
			return true
		}
		s.audit(ctx, "cancel_order", "product", req.ProductID, "order", req.OrderID)
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		set, err := s.sale.Cancel(actx, req.ProductID, req.OrderID)
		switch {
		case errors.Is(err, stock.ErrUnknownOrder):
			api.AdminNoReleasableOrder.Write(ctx)
		case errors.Is(err, stock.ErrRecovering):
			api.Recovering.Write(ctx)
		case err != nil && set.Info.State == stock.StateReleased:
			// Stock is back already; the store learns of the release
			// when the operator retries (which publishes it again) or
			// from the outbox relay.
			api.ReleaseUnpublished.WithMessage(err.Error()).Write(ctx)
		case err != nil:
			api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
		case set.Info.State == stock.StatePaid:
			api.OrderPaid.Write(ctx)
		case set.Info.State != stock.StateReleased:
			api.AdminNoReleasableOrder.Write(ctx)
		default:
			// Cancelling is idempotent: a repeat answers 200 and returns no stock.
			api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"ok": true, "released": true, "alreadyReleased": !set.Changed}))
		}
	case "/admin/orders/paid":
		s.handleAdminPaid(ctx)
	case "/admin/reconcile":
		actx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rep, err := s.Reconcile(actx)
		var buf bytes.Buffer
		rep.Print(&buf)
		if err != nil {
			// Not a rejection: the answer is the report either way, the
			// text that proxy reconcile prints and bench parses; 409
			// says it is not clean, its last line why.
			ctx.SetStatusCode(fasthttp.StatusConflict)
			buf.WriteString("error: " + err.Error() + "\n")
		}
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBody(buf.Bytes())
	default:
		return false
	}
	return true
}

// Reconcile checks this edge's sales against the order store after the
// pipeline drained (see package reconcile for the definitions).
func (s *Server) Reconcile(ctx context.Context) (reconcile.Report, error) {
	if s.orders.store == nil {
		return reconcile.Report{}, errNoOrderStore
	}
	rep, err := reconcileOrders(ctx, s.snap.Load().Doc.Config, s.orders.brokers, s.store, s.orders.store, s.productIDs(), 30*time.Second)
	if rep.Drained {
		s.m.reconcileMismatch.Set(rep.Oversold + rep.Lost + rep.Duplicated)
		s.m.reconcileUnix.Set(time.Now().Unix())
	}
	return rep, err
}

var errNoOrderStore = errors.New("this edge runs no order consumer (orders.consumer: false): run `proxy reconcile` where the order store is reachable")
