package sale

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"flashgate/orders/orderid"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/activity"
	"flashgate/sale/api"
	"flashgate/sale/ptoken"
	"flashgate/sale/session"
)

var contentJSON = []byte("application/json")

func writeJSON(ctx *fasthttp.RequestCtx, body []byte) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentTypeBytes(contentJSON)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetBody(body)
}

// view is a string over b without copying; only for calls that copy what
// they keep (stock.Store.Deduct does).
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Handle answers a sale API call that passed the filter chain.
func (s *Service) Handle(r *api.Call) {
	st := s.settings.Load()
	ctx := r.Ctx
	if st == nil {
		api.Warming.Write(ctx)
		return
	}
	switch r.Endpoint {
	case api.EndpointStatus:
		s.status(r, st)
	case api.EndpointLogin:
		s.login(r, st)
	case api.EndpointToken:
		s.token(r, st)
	case api.EndpointDo:
		s.do(r, st)
	case api.EndpointResult:
		s.result(r)
	case api.EndpointEvents:
		s.events(r)
	}
}

// entry finds the product if sale_window did not already.
func (s *Service) entry(r *api.Call) (activity.Entry, bool) {
	if r.Activity.Activity != nil {
		return r.Activity, true
	}
	return s.Activities.Get(r.ProductID)
}

func (s *Service) status(r *api.Call, st *Settings) {
	e, ok := s.entry(r)
	if !ok {
		api.UnknownProduct.Write(r.Ctx)
		return
	}
	nowMs := r.NowNano / 1e6
	s.hit(e, nowMs, st)
	r.Scratch = e.AppendStatus(r.Scratch[:0], nowMs)
	writeJSON(r.Ctx, r.Scratch)
}

func (s *Service) hit(e activity.Entry, nowMs int64, st *Settings) {
	if e.Hit(nowMs, st.Hotspot) {
		s.hotspots.Inc()
		s.Log.Warn("hotspot: product above the request threshold", "product", e.ProductID, "threshold_rps", st.Hotspot)
	}
}

func (s *Service) login(r *api.Call, st *Settings) {
	if !st.DemoLogin {
		api.DemoLoginOff.Write(r.Ctx)
		return
	}
	uid := string(r.UserID)
	tok, err := st.Sessions.Sign(uid, time.Unix(0, r.NowNano))
	if err != nil {
		api.BadUserID.Write(r.Ctx)
		return
	}
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(session.CookieName)
	c.SetValue(tok)
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteLaxMode)
	c.SetMaxAge(int(st.SessionTTL / time.Second))
	c.SetSecure(st.CookieSecure)
	r.Ctx.Response.Header.SetCookie(c)
	b := append(r.Scratch[:0], `{"userId":"`...)
	b = append(b, uid...)
	b = append(b, `"}`...)
	r.Scratch = b
	writeJSON(r.Ctx, b)
}

// open checks what the filters check, for an edge whose config left a sale
// filter out: the sale's own rules do not depend on the chain.
func (s *Service) open(r *api.Call) (activity.Entry, *api.Rejection) {
	if len(r.UserID) == 0 {
		return activity.Entry{}, api.Unauthenticated
	}
	e, ok := s.entry(r)
	if !ok {
		return e, api.UnknownProduct
	}
	switch e.PhaseAt(r.NowNano/1e6, false) {
	case activity.Upcoming:
		return e, api.NotStarted
	case activity.Ended:
		return e, api.Ended
	}
	if e.SoldOut() {
		return e, api.SoldOut
	}
	if s.Degraded(r.ProductID) {
		return e, api.Busy
	}
	return e, nil
}

func (s *Service) token(r *api.Call, st *Settings) {
	e, rej := s.open(r)
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	s.hit(e, r.NowNano/1e6, st)
	exp := r.NowNano/1e6 + st.TokenTTL.Milliseconds()
	b := append(r.Scratch[:0], `{"token":"`...)
	b = st.Tokens.Mint(b, r.UserID, r.ProductID, exp)
	b = append(b, `","expiresMs":`...)
	b = strconv.AppendInt(b, exp, 10)
	b = append(b, '}')
	r.Scratch = b
	writeJSON(r.Ctx, b)
}

func (s *Service) do(r *api.Call, st *Settings) {
	e, rej := s.open(r)
	if rej == nil && r.TokenExpiresMs == 0 {
		// No purchase_token filter in the chain: check the token here.
		nonce, exp, err := st.Tokens.Check(r.Token, r.UserID, r.ProductID, r.NowNano/1e6)
		if err != nil {
			rej = api.BadToken
		}
		r.TokenNonce, r.TokenExpiresMs = nonce, exp
	}
	if rej == nil && r.Qty > e.Limit {
		rej = api.LimitReached
	}
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	nowMs := r.NowNano / 1e6
	s.hit(e, nowMs, st)
	allowed, probe := s.Breaker.Admit()
	if !allowed {
		s.outcomes[outDegraded].Inc()
		api.Busy.Write(r.Ctx)
		return
	}
	var nonceHex [2 * ptoken.NonceLen]byte
	ptoken.NonceHex(nonceHex[:0], r.TokenNonce)
	a := stock.Attempt{
		ProductID: e.ProductID, UserID: view(r.UserID), Qty: r.Qty, Limit: e.Limit,
		OrderID: s.IDs.Next(), Price: e.PriceCents, NowMs: nowMs,
		TokenNonceHex: view(nonceHex[:]), TokenExpiresMs: r.TokenExpiresMs, Node: s.Node,
	}
	out, err := s.Store.Deduct(context.Background(), a)
	if err != nil {
		// One failure per failed script call, not per attempt it carried
		// (one stall would open the breaker); nothing for an attempt that
		// was never sent (ErrNotSent, ErrInvalid, ErrClosed).
		if errors.Is(err, stock.ErrCallFailed) {
			s.Breaker.Failure()
		} else if probe {
			s.Breaker.Abstain()
		}
		s.outcomes[outError].Inc()
		if errors.Is(err, stock.ErrNotSent) {
			// Nothing happened; counted above. One line per attempt would
			// be thousands of lines in a burst, on the hot path; checked
			// first so that a disabled level does not box the arguments.
			if s.Log.Enabled(context.Background(), slog.LevelDebug) {
				s.Log.Debug("deduction not sent", "product", e.ProductID, "order", a.OrderID, "err", err)
			}
		} else {
			s.Log.Warn("deduction failed", "product", e.ProductID, "order", a.OrderID, "unknown_outcome", errors.Is(err, stock.ErrUnknown), "err", err)
		}
		api.Busy.Write(r.Ctx)
		return
	}
	s.Breaker.Success()
	if out.Remaining >= 0 {
		e.SetRemaining(out.Remaining)
	}
	switch out.Code {
	case stock.OK:
		s.outcomes[outOK].Inc()
		if s.Bought != nil {
			gen := e.Generation()
			s.Bought.Set(r.ProductID, r.UserID, gen, s.Bought.Get(r.ProductID, r.UserID, gen)+r.Qty)
		}
		if out.Remaining == 0 {
			s.markSoldOut(e)
		}
		if s.Orders != nil {
			a.UserID = string(r.UserID) // the pipeline may keep it past this request
			if err := s.Orders.Publish(context.Background(), &a, out.OutboxID); err != nil {
				// The outbox entry the script wrote is still there: the
				// relay will deliver it. The shopper may poll the result.
				s.Log.Warn("order event not acknowledged; left to the outbox relay", "order", a.OrderID, "err", err)
				s.answerOrder(r, a.OrderID, e.ProductID, api.OrderUnconfirmed)
				return
			}
		}
		s.answerOrder(r, a.OrderID, e.ProductID, nil)
	case stock.SoldOut:
		s.outcomes[outSoldOut].Inc()
		// SOLD_OUT also answers a quantity larger than what is left: only
		// an empty stock makes the product sold out for everyone.
		if out.Remaining == 0 {
			s.markSoldOut(e)
			api.SoldOut.Write(r.Ctx)
		} else {
			api.NotEnoughStock.Write(r.Ctx)
		}
	case stock.LimitReached:
		s.outcomes[outLimit].Inc()
		if s.Bought != nil {
			s.Bought.Set(r.ProductID, r.UserID, e.Generation(), e.Limit)
		}
		api.LimitReached.Write(r.Ctx)
	case stock.BadToken:
		s.outcomes[outBadToken].Inc()
		api.BadToken.Write(r.Ctx)
	default:
		s.outcomes[outNotReady].Inc()
		api.Warming.Write(r.Ctx)
	}
}

// answerOrder writes {"orderId","productId","status":"pending"}; with a
// rejection (api.OrderUnconfirmed) it is that answer, which still names the
// order so the page can follow it.
func (s *Service) answerOrder(r *api.Call, id int64, product string, rej *api.Rejection) {
	b := r.Scratch[:0]
	status := fasthttp.StatusOK
	if rej != nil {
		b = append(rej.AppendOpen(b), ',')
		status = rej.Status
	} else {
		b = append(b, '{')
	}
	b = append(b, `"orderId":"`...)
	b = orderid.AppendDecimal(b, id)
	b = append(b, `","productId":"`...)
	b = append(b, product...)
	b = append(b, `","status":"pending"}`...)
	r.Scratch = b
	writeJSON(r.Ctx, b)
	r.Ctx.SetStatusCode(status)
}

// markSoldOut sets the local flag and tells the other edges, once per
// transition, off the request path.
func (s *Service) markSoldOut(e activity.Entry) {
	if !e.SetSoldOut(true) {
		return
	}
	s.Log.Info("sold out", "product", e.ProductID)
	id := e.ProductID
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.Store.PublishSoldOut(ctx, id, true); err != nil {
			s.Log.Warn("sold-out broadcast failed; other edges will catch up on refresh", "product", id, "err", err)
		}
	}()
}

func (s *Service) result(r *api.Call) {
	if len(r.UserID) == 0 {
		api.Unauthenticated.Write(r.Ctx)
		return
	}
	o, ok, err := s.Store.OrderState(context.Background(), view(r.ProductID), r.OrderID)
	if err != nil {
		api.Busy.Write(r.Ctx)
		return
	}
	if !ok && s.Results != nil {
		// The Redis state expired (or Redis lost it): the order store knows.
		row, found, err := s.Results.Get(context.Background(), string(r.ProductID), r.OrderID)
		if err != nil {
			api.Busy.Write(r.Ctx)
			return
		}
		if found {
			o, ok = stock.OrderInfo{OrderID: row.OrderID, ProductID: row.ProductID, UserID: row.UserID,
				Qty: row.Qty, Price: row.PriceCents, CreatedMs: row.CreatedMs, State: stock.StateSuccess}, true
			if row.Status == orderstore.StatusReleased {
				o.State = stock.StateReleased
			}
		}
	}
	// Another shopper's order is indistinguishable from no order.
	if !ok || o.UserID != string(r.UserID) {
		api.UnknownOrder.Write(r.Ctx)
		return
	}
	r.Scratch = AppendResult(r.Scratch[:0], o)
	writeJSON(r.Ctx, r.Scratch)
}

// AppendResult renders {status, order} for result polls and pushes.
// Released and failed orders are "failed" to the shopper, with a reason.
func AppendResult(b []byte, o stock.OrderInfo) []byte {
	status, reason := o.State, ""
	switch o.State {
	case stock.StateReleased:
		status, reason = "failed", "released"
	case stock.StateFailed:
		status, reason = "failed", "failed"
	}
	b = append(b, `{"status":"`...)
	b = append(b, status...)
	b = append(b, '"')
	if reason != "" {
		b = append(b, `,"reason":"`...)
		b = append(b, reason...)
		b = append(b, '"')
	}
	b = append(b, `,"order":{"orderId":"`...)
	b = orderid.AppendDecimal(b, o.OrderID)
	b = append(b, `","productId":"`...)
	b = append(b, o.ProductID...)
	b = append(b, `","quantity":`...)
	b = strconv.AppendInt(b, int64(o.Qty), 10)
	b = append(b, `,"price":"`...)
	b = activity.AppendPrice(b, o.Price)
	b = append(b, `","createdMs":`...)
	b = strconv.AppendInt(b, o.CreatedMs, 10)
	return append(b, `}}`...)
}
