package sale

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"flashgate/filters"
	"flashgate/orders/order"
	"flashgate/orders/orderid"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/activity"
	"flashgate/sale/ptoken"
	"flashgate/sale/session"
)

var (
	errUnauthenticated = filters.NewRejection(401, "UNAUTHENTICATED", "please sign in")
	errBadToken        = filters.NewRejection(403, "BAD_TOKEN", "invalid or expired purchase token")
	errUnknownProduct  = filters.NewRejection(404, "UNKNOWN_PRODUCT", "no such product")
	errUnknownOrder    = filters.NewRejection(404, "NOT_FOUND", "no such order")
	errNotStarted      = filters.NewRejection(403, "NOT_STARTED", "the sale has not started")
	errEnded           = filters.NewRejection(403, "ENDED", "the sale has ended")
	errSoldOut         = filters.NewRejection(410, "SOLD_OUT", "sold out")
	errNotEnough       = filters.NewRejection(410, "SOLD_OUT", "not enough stock left for this quantity")
	errLimit           = filters.NewRejection(409, "LIMIT_REACHED", "purchase limit reached")
	errDegraded        = filters.NewRejection(503, "DEGRADED", "the sale is busy, please try again")
	errWarming         = filters.NewRejection(503, "DEGRADED", "the sale is opening, please try again")
	errNoLogin         = filters.NewRejection(404, "NOT_FOUND", "demo sign-in is disabled")
	errNoEvents        = filters.NewRejection(404, "NOT_FOUND", "event streams are not available; poll /api/seckill/result")
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
func (s *Service) Handle(r *filters.Request) {
	st := s.settings.Load()
	ctx := r.Ctx
	if st == nil {
		errWarming.Write(ctx)
		return
	}
	switch r.Endpoint {
	case filters.EndpointStatus:
		s.status(r, st)
	case filters.EndpointLogin:
		s.login(r, st)
	case filters.EndpointToken:
		s.token(r, st)
	case filters.EndpointDo:
		s.do(r, st)
	case filters.EndpointResult:
		s.result(r)
	case filters.EndpointEvents:
		s.events(r)
	}
}

// entry finds the product if sale_window did not already.
func (s *Service) entry(r *filters.Request) (activity.Entry, bool) {
	if r.Activity.Activity != nil {
		return r.Activity, true
	}
	return s.Activities.Get(r.ProductID)
}

func (s *Service) status(r *filters.Request, st *Settings) {
	e, ok := s.entry(r)
	if !ok {
		errUnknownProduct.Write(r.Ctx)
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

func (s *Service) login(r *filters.Request, st *Settings) {
	if !st.DemoLogin {
		errNoLogin.Write(r.Ctx)
		return
	}
	uid := string(r.UserID)
	tok, err := st.Sessions.Sign(uid, time.Unix(0, r.NowNano))
	if err != nil {
		errBadUserID.Write(r.Ctx)
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
func (s *Service) open(r *filters.Request) (activity.Entry, *filters.Rejection) {
	if len(r.UserID) == 0 {
		return activity.Entry{}, errUnauthenticated
	}
	e, ok := s.entry(r)
	if !ok {
		return e, errUnknownProduct
	}
	switch e.PhaseAt(r.NowNano/1e6, false) {
	case activity.Upcoming:
		return e, errNotStarted
	case activity.Ended:
		return e, errEnded
	}
	if e.SoldOut() {
		return e, errSoldOut
	}
	if s.Degraded(r.ProductID) {
		return e, errDegraded
	}
	return e, nil
}

func (s *Service) token(r *filters.Request, st *Settings) {
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

func (s *Service) do(r *filters.Request, st *Settings) {
	e, rej := s.open(r)
	if rej == nil && r.TokenExpiresMs == 0 {
		// No purchase_token filter in the chain: check the token here.
		nonce, exp, err := st.Tokens.Check(r.Token, r.UserID, r.ProductID, r.NowNano/1e6)
		if err != nil {
			rej = errBadToken
		}
		r.TokenNonce, r.TokenExpiresMs = nonce, exp
	}
	if rej == nil && r.Qty > e.Limit {
		rej = errLimit
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
		errDegraded.Write(r.Ctx)
		return
	}
	var nonceHex [2 * ptoken.NonceLen]byte
	ptoken.NonceHex(nonceHex[:0], r.TokenNonce)
	a := stock.Attempt{
		Order: order.Order{ID: s.IDs.Next(), ProductID: e.ProductID, UserID: view(r.UserID), Qty: r.Qty,
			PriceCents: e.PriceCents, CreatedMs: nowMs, Edge: s.Node},
		Limit: e.Limit, TokenNonceHex: view(nonceHex[:]), TokenExpiresMs: r.TokenExpiresMs,
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
				s.Log.Debug("deduction not sent", "product", e.ProductID, "order", a.ID, "err", err)
			}
		} else {
			s.Log.Warn("deduction failed", "product", e.ProductID, "order", a.ID, "unknown_outcome", errors.Is(err, stock.ErrUnknown), "err", err)
		}
		errDegraded.Write(r.Ctx)
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
			if err := s.Orders.Publish(context.Background(), &a.Order, out.OutboxID); err != nil {
				// The outbox entry the script wrote is still there: the
				// relay will deliver it. The shopper may poll the result.
				s.Log.Warn("order event not acknowledged; left to the outbox relay", "order", a.ID, "err", err)
				s.answerOrder(r, a.ID, e.ProductID, 503)
				return
			}
		}
		s.answerOrder(r, a.ID, e.ProductID, 200)
	case stock.SoldOut:
		s.outcomes[outSoldOut].Inc()
		// SOLD_OUT also answers a quantity larger than what is left: only
		// an empty stock makes the product sold out for everyone.
		if out.Remaining == 0 {
			s.markSoldOut(e)
			errSoldOut.Write(r.Ctx)
		} else {
			errNotEnough.Write(r.Ctx)
		}
	case stock.LimitReached:
		s.outcomes[outLimit].Inc()
		if s.Bought != nil {
			s.Bought.Set(r.ProductID, r.UserID, e.Generation(), e.Limit)
		}
		errLimit.Write(r.Ctx)
	case stock.BadToken:
		s.outcomes[outBadToken].Inc()
		errBadToken.Write(r.Ctx)
	default:
		s.outcomes[outNotReady].Inc()
		errWarming.Write(r.Ctx)
	}
}

// answerOrder writes {"orderId","productId","status":"pending"}; with 503
// it is DEGRADED but still names the order so the page can follow it.
func (s *Service) answerOrder(r *filters.Request, id int64, product string, status int) {
	b := r.Scratch[:0]
	if status != 200 {
		b = append(b, `{"code":"DEGRADED","message":"your order is being confirmed, check its result",`...)
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

func (s *Service) result(r *filters.Request) {
	if len(r.UserID) == 0 {
		errUnauthenticated.Write(r.Ctx)
		return
	}
	o, ok, err := s.Store.OrderState(context.Background(), view(r.ProductID), r.OrderID)
	if err != nil {
		errDegraded.Write(r.Ctx)
		return
	}
	if !ok && s.Results != nil {
		// The Redis state expired (or Redis lost it): the order store knows.
		row, found, err := s.Results.Get(context.Background(), string(r.ProductID), r.OrderID)
		if err != nil {
			errDegraded.Write(r.Ctx)
			return
		}
		if found {
			o, ok = stock.OrderInfo{Order: row.Order, State: stock.StateSuccess}, true
			if row.Status == orderstore.StatusReleased {
				o.State = stock.StateReleased
			}
		}
	}
	// Another shopper's order is indistinguishable from no order.
	if !ok || o.UserID != string(r.UserID) {
		errUnknownOrder.Write(r.Ctx)
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
	b = orderid.AppendDecimal(b, o.ID)
	b = append(b, `","productId":"`...)
	b = append(b, o.ProductID...)
	b = append(b, `","quantity":`...)
	b = strconv.AppendInt(b, int64(o.Qty), 10)
	b = append(b, `,"price":"`...)
	b = activity.AppendPrice(b, o.PriceCents)
	b = append(b, `","createdMs":`...)
	b = strconv.AppendInt(b, o.CreatedMs, 10)
	return append(b, `}}`...)
}
