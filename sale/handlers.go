package sale

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"flashgate/orders/order"
	"flashgate/orders/orderid"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
	"flashgate/sale/session"
)

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
	case api.EndpointChallenge:
		s.challenge(r, st)
	case api.EndpointJoin:
		s.join(r, st)
	case api.EndpointQueue:
		s.queue(r, st)
	case api.EndpointLottery:
		s.lottery(r)
	}
}

func (s *Service) status(r *api.Call, st *Settings) {
	if rej := r.CheckProduct(s.d.Sales); rej != nil {
		rej.Write(r.Ctx)
		return
	}
	e := r.Sale
	nowMs := r.NowNano / 1e6
	s.hit(e, nowMs, st)
	r.Scratch = e.AppendStatus(r.Scratch[:0], nowMs)
	if len(r.UserID) > 0 && e.Room == nil && s.checkRules(r) == nil {
		// A signed-in shopper's status, once the sale is open, carries the
		// purchase token the token call would mint (the same rules, the
		// same token): a purchase is then a status and a do. A sale with a
		// waiting room hands it out at admission instead.
		b := append(r.Scratch[:len(r.Scratch)-1], ',') // the closing brace goes
		b = appendToken(b, r, st, "tokenExpiresMs", nowMs+st.TokenTTL.Milliseconds())
		r.Scratch = append(b, '}')
	}
	api.WriteJSON(r.Ctx, fasthttp.StatusOK, r.Scratch)
}

func (s *Service) hit(e catalog.Entry, nowMs int64, st *Settings) {
	if e.Hit(nowMs, st.Hotspot) {
		s.hotspots.Inc()
		s.d.Log.Warn("hotspot: product above the request threshold", "product", e.ProductID, "threshold_rps", st.Hotspot)
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
	api.WriteJSON(r.Ctx, fasthttp.StatusOK, b)
}

// checkRules decides the rules of a purchase call (token or do) that the chain
// did not, so the sale is as safe whatever the config's filter list; the
// degrade switch, the sale's own, is always decided here.
func (s *Service) checkRules(r *api.Call) *api.Rejection {
	if rej := r.CheckSignedIn(); rej != nil {
		return rej
	}
	if rej := r.CheckProduct(s.d.Sales); rej != nil {
		return rej
	}
	if rej := r.CheckSaleOpen(); rej != nil {
		return rej
	}
	if rej := r.CheckInStock(); rej != nil {
		return rej
	}
	if s.Degraded(r.ProductID) {
		return api.Busy
	}
	return nil
}

func (s *Service) token(r *api.Call, st *Settings) {
	if rej := s.checkRules(r); rej != nil {
		rej.Write(r.Ctx)
		return
	}
	s.hit(r.Sale, r.NowNano/1e6, st)
	exp := r.NowNano/1e6 + st.TokenTTL.Milliseconds()
	var until int64
	if room := r.Sale.Room; room != nil {
		// The waiting room's gate: only an admitted shopper gets a token,
		// valid no longer than their turn, so do needs nothing more.
		var no refusal
		if until, no = s.gate(r, st, room); no.rej != nil {
			no.write(r)
			return
		}
		exp = min(exp, until)
	}
	b := appendToken(append(r.Scratch[:0], '{'), r, st, "expiresMs", exp)
	if until > 0 {
		b = append(b, `,"admittedUntilMs":`...)
		b = strconv.AppendInt(b, until, 10)
	}
	b = append(b, '}')
	r.Scratch = b
	api.WriteJSON(r.Ctx, fasthttp.StatusOK, b)
}

// appendToken appends `"token":"…","<expKey>":exp`: a purchase token for
// the call's user and product, valid until exp. Every answer that hands one
// out (the token call, the status, the queue's admission) writes it so, and
// only after the token call's rules (checkRules, and a room's admission).
//
// A token is never minted to expire under the sale's token horizon (a
// rebuild or a settled orphan refuses every token expiring by then, as it
// may have been minted before and used on a server that forgot): a new
// token's nonce was never used, and one cut short by its shopper's turn
// (a waiting room's session shorter than token_ttl) would otherwise be
// refused for the rest of a turn that began before the rebuild (nemesis
// seed 11's leftover). So it lives until just past the horizon: her turn is
// extended past the closure, by at most the horizon's span.
func appendToken(b []byte, r *api.Call, st *Settings, expKey string, exp int64) []byte {
	if r.Sale.State != nil {
		exp = max(exp, r.Sale.TokensFrom()+1)
	}
	b = append(b, `"token":"`...)
	b = st.Tokens.Mint(b, r.UserID, r.ProductID, exp)
	b = append(b, `","`...)
	b = append(b, expKey...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, exp, 10)
}

// do is a purchase, read top to bottom: the rules the chain left
// (buyable), the product's breaker's admission, the deduction, and what its
// outcome (or its failure) answers. Every step before the deduction answers
// a refusal at once; after it, the decision is a purchase value and the
// answer is written once, at the end.
func (s *Service) do(r *api.Call, st *Settings) {
	if rej := s.buyable(r, st); rej != nil {
		rej.Write(r.Ctx)
		return
	}
	e := r.Sale
	s.hit(e, r.NowNano/1e6, st)
	id, ok := s.d.IDs.TryNext()
	if !ok {
		// This process has not read what its node's previous process
		// issued (reserveIDs): an id now might repeat one of those.
		s.outcomes[outDegraded].Inc()
		api.Busy.Write(r.Ctx)
		return
	}
	brk := s.d.Breakers.For(e.ProductID)
	ok, probe := brk.Admit()
	if !ok {
		s.outcomes[outDegraded].Inc()
		api.Busy.Write(r.Ctx)
		return
	}
	a := s.attemptFor(r, e, st, id)
	// From the deduction until its event is published (or not): what a
	// recovery waits for before it trusts the ledger.
	defer s.d.Flights.Enter().Leave()
	var p purchase
	if out, err := s.d.Store.Deduct(context.Background(), a); err != nil {
		p = s.deductFailed(brk, &a, err, probe)
	} else {
		brk.Success()
		p = s.decide(r, e, &a, out)
	}
	s.answerPurchase(r, p)
}

// purchase is what a deduction answers: a rejection alone, or an order
// (orderID > 0) with its status, which a rejection (api.OrderUnconfirmed,
// api.OutcomeUnknown) may accompany: the answer still names the order so
// that the page can follow it.
type purchase struct {
	rej     *api.Rejection
	orderID int64
	status  string
}

// buyable decides the rules of a do call that the chain did not:
// checkRules', then the purchase token and the quantity. Without an edge
// cache of what the shopper bought (user_limit's) only the quantity counts
// here; the deduction enforces the limit exactly.
func (s *Service) buyable(r *api.Call, st *Settings) *api.Rejection {
	if rej := s.checkRules(r); rej != nil {
		return rej
	}
	if rej := r.CheckToken(st.Tokens); rej != nil {
		return rej
	}
	return r.CheckLimit(0)
}

// attemptFor is the deduction r asks for. UserID is a view of the call's
// buffer: Deduct copies what it keeps. The pay deadline is fixed here, on
// the edge's clock, from the sale's pay timeout (0: none).
func (s *Service) attemptFor(r *api.Call, e catalog.Entry, st *Settings, id int64) stock.Attempt {
	var nonceHex [2 * ptoken.NonceLen]byte
	ptoken.NonceHex(nonceHex[:0], r.TokenNonce)
	created := r.NowNano / 1e6
	var payBy int64
	if pt := e.PayTimeout(st.PayTimeoutMs); pt > 0 {
		payBy = created + pt
	}
	return stock.Attempt{
		Order: order.Order{ID: id, ProductID: e.ProductID, UserID: view(r.UserID), Qty: r.Qty,
			PriceCents: e.PriceCents, CreatedMs: created, PayByMs: payBy, Edge: s.d.Node},
		Limit: e.Limit, TokenNonceHex: view(nonceHex[:]), TokenExpiresMs: r.TokenExpiresMs,
	}
}

// deductFailed decides a deduction that gave no outcome: an unknown one may
// have happened, so the shopper gets the order to follow and the edge
// resolves it (unknown.go); any other failure is busy. It accounts the
// failure for the product's breaker, the counters and the log. The breaker
// sees one failure per failed script call, not per attempt it carried (one
// stall would open it): ErrCallFailed, which a call Redis refused (not
// sent) carries too. An attempt that was never sent for its own reasons
// (its queue budget spent, ErrInvalid, ErrClosed) tells nothing about
// Redis.
func (s *Service) deductFailed(brk *Breaker, a *stock.Attempt, err error, probe bool) purchase {
	callFailed := errors.Is(err, stock.ErrCallFailed)
	if callFailed {
		brk.Failure()
	} else if probe {
		brk.Abstain()
	}
	s.outcomes[outError].Inc()
	notSent := errors.Is(err, stock.ErrNotSent)
	unknown := errors.Is(err, stock.ErrUnknown)
	switch {
	case notSent && callFailed:
		// Redis refused the call (no connection, CLUSTERDOWN): nothing
		// happened, but Redis is failing. Once per call, not per attempt.
		s.d.Log.Warn("deduction not sent", "product", a.ProductID, "order", a.ID, "unknown_outcome", false, "err", err)
	case !notSent:
		s.d.Log.Warn("deduction failed", "product", a.ProductID, "order", a.ID, "unknown_outcome", unknown, "err", err)
	case s.d.Log.Enabled(context.Background(), slog.LevelDebug):
		// Dropped from the queue: nothing happened; counted above. One
		// line per attempt would be thousands of lines in a burst, on the
		// hot path; checked first so that a disabled level does not box
		// the arguments.
		s.d.Log.Debug("deduction not sent", "product", a.ProductID, "order", a.ID, "err", err)
	}
	if unknown {
		s.followUnknown(a)
		return purchase{rej: api.OutcomeUnknown, orderID: a.ID, status: statusUnknown}
	}
	return purchase{rej: api.Busy}
}

// decide is the answer of the deduction's outcome, after keeping what it
// says on this edge: the stock left, a purchase (bought), an emptied stock
// (markSoldOut), a shopper at the limit, a sale fenced for recovery (kick).
func (s *Service) decide(r *api.Call, e catalog.Entry, a *stock.Attempt, out stock.Outcome) purchase {
	if out.Remaining >= 0 {
		e.SetRemaining(out.Remaining)
	}
	switch out.Code {
	case stock.OK:
		return s.bought(r, e, a, out)
	case stock.SoldOut:
		// SOLD_OUT also answers a quantity larger than what is left; only
		// an empty stock makes the product sold out for everyone.
		s.outcomes[outSoldOut].Inc()
		if out.Remaining != 0 {
			return purchase{rej: api.NotEnoughStock}
		}
		s.markSoldOut(e)
		return purchase{rej: api.SoldOut}
	case stock.LimitReached:
		// The shopper is at the limit, which the edge remembers.
		s.outcomes[outLimit].Inc()
		if s.d.Bought != nil {
			s.d.Bought.Set(r.ProductID, r.UserID, e.Generation(), e.Limit)
		}
		return purchase{rej: api.LimitReached}
	case stock.BadToken:
		s.outcomes[outBadToken].Inc()
		return purchase{rej: api.BadToken}
	case stock.Recovering:
		s.outcomes[outRecovering].Inc()
		s.kick(e)
		return purchase{rej: api.Recovering}
	default:
		s.outcomes[outNotReady].Inc()
		return purchase{rej: s.closedAnswer(r.ProductID)}
	}
}

// bought is a successful deduction: the edge remembers the purchase, flags
// an emptied stock, takes the buyer out of the room's active shoppers, and
// hands the order to the pipeline before the shopper hears "pending".
func (s *Service) bought(r *api.Call, e catalog.Entry, a *stock.Attempt, out stock.Outcome) purchase {
	s.outcomes[outOK].Inc()
	if s.d.Bought != nil {
		gen := e.Generation()
		s.d.Bought.Set(r.ProductID, r.UserID, gen, s.d.Bought.Get(r.ProductID, r.UserID, gen)+r.Qty)
	}
	if out.Remaining == 0 {
		s.markSoldOut(e)
	}
	s.finishRoom(e, r.UserID)
	return purchase{rej: s.publish(a, out.OutboxID), orderID: a.ID, status: statusPending}
}

// publish sends the order event; nil when it was acknowledged or there is
// no pipeline, else the answer that says the order is being confirmed.
func (s *Service) publish(a *stock.Attempt, outboxID string) *api.Rejection {
	if s.d.Orders == nil {
		return nil
	}
	a.UserID = strings.Clone(a.UserID) // the pipeline may keep it past this request
	if err := s.d.Orders.PublishAndAck(context.Background(), &a.Order, outboxID); err != nil {
		// The outbox entry the script wrote is still there: the relay will
		// deliver it. The shopper may poll the result.
		s.d.Log.Warn("order event not acknowledged; left to the outbox relay", "order", a.ID, "err", err)
		return api.OrderUnconfirmed
	}
	return nil
}

// The status an answer naming an order gives: the order exists and waits
// for its outcome, or it may not exist (the deduction's outcome is unknown).
const (
	statusPending = "pending"
	statusUnknown = "unknown"
)

// answerPurchase writes a purchase's answer: the rejection alone, or
// {"orderId","productId","status"} — under the rejection's status and
// after its code and message when one accompanies the order.
func (s *Service) answerPurchase(r *api.Call, p purchase) {
	if p.orderID == 0 {
		p.rej.Write(r.Ctx)
		return
	}
	b := r.Scratch[:0]
	status := fasthttp.StatusOK
	if p.rej != nil {
		b = append(p.rej.AppendOpen(b), ',')
		status = p.rej.Status
	} else {
		b = append(b, '{')
	}
	b = append(b, `"orderId":"`...)
	b = orderid.AppendDecimal(b, p.orderID)
	b = append(b, `","productId":"`...)
	b = append(b, r.Sale.ProductID...)
	b = append(b, `","status":"`...)
	b = append(b, p.status...)
	b = append(b, `"}`...)
	r.Scratch = b
	api.WriteJSON(r.Ctx, status, b)
}

// markSoldOut sets the local flag and tells the other edges, once per
// transition, off the request path.
func (s *Service) markSoldOut(e catalog.Entry) {
	if !e.SetSoldOut(true) {
		return
	}
	s.d.Log.Info("sold out", "product", e.ProductID)
	id := e.ProductID
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.d.Store.PublishSoldOut(ctx, id, true); err != nil {
			s.d.Log.Warn("sold-out broadcast failed; other edges will catch up on refresh", "product", id, "err", err)
		}
	}()
}

func (s *Service) result(r *api.Call) {
	if rej := r.CheckSignedIn(); rej != nil {
		rej.Write(r.Ctx)
		return
	}
	o, ok, verified, err := s.d.Store.ResultState(context.Background(), view(r.ProductID), r.OrderID, s.runIDFence(r))
	if err != nil {
		api.Busy.Write(r.Ctx)
		return
	}
	if ok && !verified && o.UserID == string(r.UserID) {
		// Redis may hold an older state than the shopper was shown (a
		// promoted replica that lagged, a restart from a snapshot, the
		// sale being rebuilt): only the order store's final states are
		// sure to be no step back; anything else waits for the rebuild.
		if o, ok = s.storedFinal(r); !ok {
			api.Recovering.Write(r.Ctx)
			return
		}
	}
	if !ok && s.d.Results != nil {
		// The Redis state expired (or Redis lost it): the order store knows.
		row, found, err := s.d.Results.Get(context.Background(), string(r.ProductID), r.OrderID)
		if err != nil {
			api.Busy.Write(r.Ctx)
			return
		}
		if found {
			o, ok = storedState(row), true
		}
	}
	if !ok {
		o, ok = s.settleOrphan(string(r.ProductID), string(r.UserID), r.OrderID)
	}
	// Another shopper's order is indistinguishable from no order.
	if !ok || o.UserID != string(r.UserID) {
		api.UnknownOrder.Write(r.Ctx)
		return
	}
	r.Scratch = AppendResult(r.Scratch[:0], o)
	api.WriteJSON(r.Ctx, fasthttp.StatusOK, r.Scratch)
}

// runIDFence is the fence a shopper's read of an order sets when it finds
// the sale's Redis is not the server the sale was verified on
// (stock.Store.ResultState), named as the deduction names its own.
func (s *Service) runIDFence(r *api.Call) string {
	return stock.FenceID(r.NowNano/1e6, s.d.Node, "runid")
}

// storedFinal is the order's state from the order store when it is final
// (paid, cancelled, expired: each excludes the others, and none moves on),
// for an order whose Redis state may be older than one its shopper saw.
// Stored unpaid is not enough: a payment Redis accepted (and the shopper
// saw) may not be stored yet.
func (s *Service) storedFinal(r *api.Call) (stock.OrderInfo, bool) {
	if s.d.Results == nil {
		return stock.OrderInfo{}, false
	}
	row, found, err := s.d.Results.Get(context.Background(), string(r.ProductID), r.OrderID)
	if err != nil || !found || row.Status != orderstore.StatusPaid && row.Status != orderstore.StatusCancelled {
		return stock.OrderInfo{}, false
	}
	return storedState(row), true
}

// storedState is a stored order as the shopper sees it.
func storedState(row orderstore.Row) stock.OrderInfo {
	o := stock.OrderInfo{Order: row.Order, State: stock.StateSuccess}
	switch {
	case row.Status == orderstore.StatusPaid:
		o.State, o.PaidMs = stock.StatePaid, row.PaidMs
	case row.Status == orderstore.StatusCancelled && row.Expired:
		o.State = stock.StateExpired
	case row.Status == orderstore.StatusCancelled:
		o.State = stock.StateReleased
	}
	return o
}

// ShopperStatus is the status a Redis order state is shown to the shopper
// (and the payment system) as: pending, success (stored, unpaid), paid,
// expired (released by the pay deadline), cancelled (released by a
// cancel) or failed.
func ShopperStatus(state string) string {
	if state == stock.StateReleased {
		return statusCancelled
	}
	return state
}

const statusCancelled = "cancelled"

// AppendResult renders {status, payByMs?, order} for result polls and
// pushes; payByMs (the deadline, unix ms on the edges' clock) only while
// the order waits to be paid.
func AppendResult(b []byte, o stock.OrderInfo) []byte {
	b = append(b, `{"status":"`...)
	b = append(b, ShopperStatus(o.State)...)
	b = append(b, '"')
	if o.State == stock.StateSuccess && o.PayByMs > 0 {
		b = append(b, `,"payByMs":`...)
		b = strconv.AppendInt(b, o.PayByMs, 10)
	}
	b = append(b, `,"order":{"orderId":"`...)
	b = orderid.AppendDecimal(b, o.ID)
	b = append(b, `","productId":"`...)
	b = append(b, o.ProductID...)
	b = append(b, `","quantity":`...)
	b = strconv.AppendInt(b, int64(o.Qty), 10)
	b = append(b, `,"price":"`...)
	b = catalog.AppendPrice(b, o.PriceCents)
	b = append(b, `","createdMs":`...)
	b = strconv.AppendInt(b, o.CreatedMs, 10)
	if o.PayByMs > 0 {
		b = append(b, `,"payByMs":`...)
		b = strconv.AppendInt(b, o.PayByMs, 10)
	}
	if o.PaidMs > 0 {
		b = append(b, `,"paidMs":`...)
		b = strconv.AppendInt(b, o.PaidMs, 10)
	}
	return append(b, `}}`...)
}
