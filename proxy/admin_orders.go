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
		res, err := s.CancelOrder(actx, req.ProductID, req.OrderID)
		if err != nil {
			api.AdminUnavailable.WithMessage(err.Error()).Write(ctx)
			return true
		}
		if res == cancelNotFound {
			api.AdminNoReleasableOrder.Write(ctx)
			return true
		}
		// Cancelling is idempotent: a repeat answers 200 and returns no stock.
		writeJSON(ctx, map[string]any{"ok": true, "released": true, "alreadyReleased": res == cancelAlready})
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

// CancelOrder releases an order that will not be fulfilled: one idempotent
// script returns its units to stock and to the buyer's allowance (pending
// or success -> released; released -> nothing), then the release event
// goes to Kafka so the order store marks it released, and every edge hears
// that the product has stock again. A release delivered twice returns
// stock once: the script is guarded by the order's state.
func (s *Server) CancelOrder(ctx context.Context, productID string, orderID int64) (cancelResult, error) {
	info, found, err := s.store.OrderState(ctx, productID, orderID)
	if err != nil || !found {
		return cancelNotFound, err
	}
	released, err := s.store.Release(ctx, productID, orderID)
	if err != nil {
		return cancelNotFound, err
	}
	res := cancelReleased
	if !released {
		if info.State != stock.StateReleased {
			return cancelNotFound, nil
		}
		res = cancelAlready
	}
	// Shoppers waiting on the order's event stream learn it failed.
	if err := s.store.PublishReleased(ctx, productID, orderID); err != nil {
		s.log.Warn("release not pushed; the order's streams end at their deadline", "order", orderID, "err", err)
	}
	// A cancel of an order already released publishes its release event
	// again: if the first cancel's publish failed, its retry must not be
	// a dead end (the consumer keeps one row per order whatever arrives).
	ev := order.Event{V: order.Version, Type: order.TypeRelease, Order: info.Order, ReleasedMs: s.opts.Now() / 1e6}
	if err := s.orders.pub.Publish(ctx, ev); err != nil {
		// Stock is back already; the store learns of the release when the
		// operator retries (which publishes the event again).
		return res, err
	}
	if res == cancelAlready {
		return res, nil
	}
	st := s.env.Activities.StateOf(productID)
	st.SetSoldOut(false)
	st.BumpGeneration()
	if err := s.store.PublishSoldOut(ctx, productID, false); err != nil {
		s.log.Warn("sold-out clear broadcast failed; other edges catch up on refresh", "product", productID, "err", err)
	}
	return res, nil
}

type cancelResult uint8

const (
	cancelNotFound cancelResult = iota // no order that can be released
	cancelReleased                     // released now: its units are back
	cancelAlready                      // released before: nothing changed (its event was sent again)
)

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
