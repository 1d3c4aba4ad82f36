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
		if !decodeAdmin(ctx, &req) {
			return true
		}
		if !order.ValidProductID(req.ProductID) || req.OrderID <= 0 {
			api.AdminCancelUsage.Write(ctx)
			return true
		}
		s.audit(ctx, "cancel_order", "product", req.ProductID, "order", req.OrderID)
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		set, err := s.CancelOrder(actx, req.ProductID, req.OrderID)
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
			writeJSON(ctx, map[string]any{"ok": true, "released": true, "alreadyReleased": !set.Changed})
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

// CancelOrder releases an order that will not be fulfilled: one
// state-guarded script returns its units to stock and to the buyer's
// allowance (pending or success -> released; anything final -> nothing),
// then the release event goes to Kafka so the order store marks it
// cancelled, and every edge hears that the product has stock again. A
// cancel delivered twice returns stock once; a paid order is never
// released (its state answers paid). A cancel of an order already
// cancelled publishes its release event again: if the first cancel's
// publish failed, its retry must not be a dead end.
func (s *Server) CancelOrder(ctx context.Context, productID string, orderID int64) (stock.Settlement, error) {
	set, err := s.store.Cancel(ctx, productID, orderID)
	if err != nil || set.Info.State != stock.StateReleased {
		return set, err
	}
	return set, s.settled(ctx, productID, set)
}

// settled finishes a settlement Redis made (or found made, for a retry):
// a release clears the edge (ReleasedOnEdge, with the broadcast), the
// event goes to Kafka (acknowledging its outbox entry when this call wrote
// it) and the streams waiting on the order hear its outcome.
func (s *Server) settled(ctx context.Context, productID string, set stock.Settlement) error {
	kind := stock.KindPaid
	switch set.Info.State {
	case stock.StateReleased:
		kind = stock.KindCancelled
	case stock.StateExpired:
		kind = stock.KindExpired
	}
	if kind != stock.KindPaid && set.Changed {
		s.ReleasedOnEdge(ctx, productID, true)
	}
	if err := s.store.PublishChange(ctx, productID, kind, set.Info.ID); err != nil {
		s.log.Warn("settlement not pushed; the order's streams end at their deadline", "order", set.Info.ID, "err", err)
	}
	ev := set.Event()
	if set.Changed {
		return s.orders.pub.PublishAndAck(ctx, ev, set.OutboxID)
	}
	return s.orders.pub.Publish(ctx, ev)
}

// ReleasedOnEdge is the one place that clears what this edge knows about a
// product after units went back to stock (a cancel, a payment too late,
// the deadline sweep): the sold-out flag, and the "at the limit" answers
// of the bought cache (by the product's generation); broadcast tells the
// other edges, which do the same on hearing it (the sweep broadcasts
// itself, so it passes false).
func (s *Server) ReleasedOnEdge(ctx context.Context, productID string, broadcast bool) {
	st := s.env.Sales.StateOf(productID)
	st.SetSoldOut(false)
	st.BumpGeneration()
	if !broadcast {
		return
	}
	if err := s.store.PublishSoldOut(ctx, productID, false); err != nil {
		s.log.Warn("sold-out clear broadcast failed; other edges catch up on refresh", "product", productID, "err", err)
	}
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
