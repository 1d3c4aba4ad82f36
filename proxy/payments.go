package proxy

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/metrics"
	"flashgate/orders/order"
	"flashgate/orders/orderid"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/api"
	"flashgate/sale/payhook"
)

// Payment confirmation: the payment system tells the edge an order was
// paid, through the admin API (POST /admin/orders/paid, behind the admin
// token) or a payment provider's signed webhook on the shopper listener
// (POST /api/payments/webhook). Both end in sale.Service.Pay: one script call in
// Redis decides between the payment and the pay deadline, so exactly one
// of them wins, and the caller is told which.

// payTimeout bounds a payment call: one script call and one publish.
const payTimeout = 10 * time.Second

// handleAdminPaid serves POST /admin/orders/paid {"productId","orderId"}.
func (s *Server) handleAdminPaid(ctx *fasthttp.RequestCtx) {
	if !s.requirePost(ctx) {
		return
	}
	var req struct {
		ProductID string `json:"productId"`
		OrderID   int64  `json:"orderId,string"`
	}
	if rej := decodeAdmin(ctx, &req); rej != nil {
		rej.Write(ctx)
		return
	}
	if !order.ValidProductID(req.ProductID) || req.OrderID <= 0 {
		api.AdminCancelUsage.Write(ctx)
		return
	}
	s.audit(ctx, "order_paid", "product", req.ProductID, "order", req.OrderID)
	actx, cancel := context.WithTimeout(context.Background(), payTimeout)
	defer cancel()
	set, err := s.pay(actx, req.ProductID, req.OrderID, "", 0)
	s.answerPaid(ctx, req.ProductID, req.OrderID, set, err, true)
}

// paymentWebhook serves the payment provider's POST /api/payments/webhook:
// the signature and timestamp are checked before the body is believed, and
// the body is never logged.
func (s *Server) paymentWebhook(ctx *fasthttp.RequestCtx, snap *Snapshot) {
	v := snap.Payhook
	if v == nil {
		api.WebhookOff.Write(ctx)
		return
	}
	if !ctx.IsPost() {
		api.MethodNotAllowed.Write(ctx)
		return
	}
	body := ctx.PostBody()
	if rej := v.Verify(ctx.Request.Header.Peek(payhook.HeaderTimestamp), ctx.Request.Header.Peek(payhook.HeaderSignature), body, time.Unix(0, s.opts.Now())); rej != nil {
		s.m.webhookRefused.Inc()
		rej.Write(ctx)
		return
	}
	ev, rej := payhook.ParseEvent(body)
	if rej != nil {
		rej.Write(ctx)
		return
	}
	if !ev.Pays() {
		// Another kind of event: acknowledged, so the provider does not
		// send it again and again.
		api.WriteJSON(ctx, fasthttp.StatusOK, jsonOf(map[string]any{"status": "ignored", "type": ev.Type}))
		return
	}
	actx, cancel := context.WithTimeout(context.Background(), payTimeout)
	defer cancel()
	set, err := s.pay(actx, ev.ProductID, ev.OrderID, ev.ID, v.ReplayTTL())
	s.answerPaid(ctx, ev.ProductID, ev.OrderID, set, err, false)
}

// pay records a payment through the sale (sale.Service.Pay) and counts
// what this edge's call did: a payment, or an expiry it fired by coming too
// late (Changed is only ever set by the call that made the change).
func (s *Server) pay(ctx context.Context, productID string, orderID int64, replayID string, replayTTL time.Duration) (stock.Settlement, error) {
	set, err := s.sale.Pay(ctx, productID, orderID, replayID, replayTTL)
	if set.Changed && !set.Replayed {
		switch set.Info.State {
		case stock.StatePaid:
			s.m.ordersPaid.Inc()
		case stock.StateExpired:
			s.m.ordersExpired.Inc()
		}
	}
	return set, err
}

// answerPaid writes the answer of a payment call. admin: the operator's
// listener, which is told the store's error; the webhook's caller is not.
func (s *Server) answerPaid(ctx *fasthttp.RequestCtx, productID string, orderID int64, set stock.Settlement, err error, admin bool) {
	switch {
	case errors.Is(err, stock.ErrUnknownOrder):
		api.UnknownPayOrder.Write(ctx)
		return
	case errors.Is(err, stock.ErrRecovering):
		api.Recovering.Write(ctx)
		return
	case err != nil && set.Info.State == stock.StatePaid:
		// Redis decided; Kafka did not acknowledge the event. The outbox
		// relay delivers it, and a retry publishes it again.
		s.log.Warn("paid event not acknowledged; left to the outbox relay", "product", productID, "order", orderID, "err", err)
		api.PaidUnconfirmed.Write(ctx)
		return
	case err != nil:
		if !admin {
			s.log.Warn("payment webhook: the store failed", "product", productID, "order", orderID, "err", err)
			api.Busy.Write(ctx)
			return
		}
		rej := api.AdminUnavailable
		if errors.Is(err, stock.ErrNotWarmed) {
			rej = api.UnknownPayOrder
		}
		rej.WithMessage(err.Error()).Write(ctx)
		return
	case set.Replayed:
		api.Replayed.Write(ctx)
		return
	}
	b := make([]byte, 0, 160)
	switch set.Info.State {
	case stock.StatePaid:
		b = append(b, `{"status":"paid","productId":"`...)
	case stock.StateExpired, stock.StateReleased, stock.StateFailed:
		b = api.TooLate.AppendOpen(b)
		b = append(b, `,"status":"`...)
		b = append(b, sale.ShopperStatus(set.Info.State)...)
		b = append(b, `","productId":"`...)
	default:
		// Not a state a pay call leaves; nothing to promise.
		s.log.Warn("payment left the order unsettled", "product", productID, "order", orderID, "state", set.Info.State)
		api.Busy.Write(ctx)
		return
	}
	b = append(b, productID...)
	b = append(b, `","orderId":"`...)
	b = orderid.AppendDecimal(b, orderID)
	b = append(b, '"')
	if set.Info.State == stock.StatePaid {
		b = append(b, `,"already":`...)
		b = strconv.AppendBool(b, !set.Changed)
		b = append(b, `,"paidMs":`...)
		b = strconv.AppendInt(b, set.Info.PaidMs, 10)
	}
	b = append(b, '}')
	status := fasthttp.StatusOK
	if set.Info.State != stock.StatePaid {
		status = api.TooLate.Status
	}
	api.WriteJSON(ctx, status, b)
}

// registerDeadlineMetrics exports the deadline sweep's figures and the
// expiries this edge's payment calls fired.
func (s *Server) registerDeadlineMetrics() {
	s.m.reg.Register("flashgate_orders_expired_total", "Orders this edge released at their pay deadline (its sweep, and payments that came too late).", "counter", func(w *metrics.Writer) {
		w.Value(float64(s.sweeper.Stats().Released + s.m.ordersExpired.Value()))
	})
	s.m.reg.Register("flashgate_pay_deadline_lateness_seconds", "How long after its deadline (Redis' clock) this edge's sweep released an order.", "histogram", func(w *metrics.Writer) {
		w.Histogram(s.sweeper.Stats().Lateness)
	})
	s.m.reg.Register("flashgate_pay_deadline_sweep_errors_total", "Deadline sweeps that failed (Redis), and releases whose event Kafka did not take from here (the relay re-sends them).", "counter", func(w *metrics.Writer) {
		st := s.sweeper.Stats()
		w.Value(float64(st.Errors), metrics.Label{Name: "what", Value: "sweep"})
		w.Value(float64(st.PublishErrors), metrics.Label{Name: "what", Value: "publish"})
	})
}
