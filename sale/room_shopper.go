package sale

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/orders/order"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/room"
)

// The waiting room's shopper API (sale/room decides the arithmetic,
// orders/stock keeps the queue):
//
//	GET  /api/seckill/challenge      a proof-of-work challenge to join with
//	POST /api/seckill/queue          join: one ticket per shopper per sale
//	GET  /api/seckill/queue          the holder's place (the page's poll)
//	GET  /api/seckill/queue/lottery  the lottery's commit, and its key once drawn
//
// and the gate of the purchase-token call (token): a sale with a room mints
// tokens only for admitted shoppers, valid until their session ends, so
// `do` needs nothing more. The join and the poll that answer "admitted"
// carry the token the token call would mint then (admittedToken), so a
// turn's purchase is a poll and a `do`.

// The shopper's status in the room.
const (
	roomPrequeue = "prequeue"
	roomWaiting  = "waiting"
	roomAdmitted = "admitted"
	roomExpired  = "expired"
	roomClosed   = "closed"
)

// roomOf finds the call's sale and its room, or the refusal.
func (s *Service) roomOf(r *api.Call) (*room.Room, *api.Rejection) {
	if rej := r.CheckProduct(s.d.Sales); rej != nil {
		return nil, rej
	}
	if r.Sale.Room == nil {
		return nil, api.NoRoom
	}
	return r.Sale.Room, nil
}

// shopperRoom is roomOf for the calls a signed-in shopper makes (the
// challenge, the join, the poll).
func (s *Service) shopperRoom(r *api.Call) (*room.Room, *api.Rejection) {
	if rej := r.CheckSignedIn(); rej != nil {
		return nil, rej
	}
	return s.roomOf(r)
}

// ticketOf is the ticket the shopper sent: the sale's cookie, or the
// header for clients without cookies.
func ticketOf(r *api.Call) []byte {
	var name [len(room.CookiePref) + order.MaxProductIDLen]byte
	n := append(name[:0], room.CookiePref...)
	n = append(n, r.ProductID...)
	if t := r.Ctx.Request.Header.CookieBytes(n); len(t) > 0 {
		return t
	}
	return r.Ctx.Request.Header.Peek(room.Header)
}

func (s *Service) challenge(r *api.Call, st *Settings) {
	rm, rej := s.shopperRoom(r)
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	if rm.Difficulty == 0 {
		api.NoChallenge.Write(r.Ctx)
		return
	}
	nowMs := r.NowNano / 1e6
	c := st.Challenges.Issue(r.UserID, r.ProductID, rm.Difficulty, nowMs)
	exp, _ := room.ChallengeExpiresMs([]byte(c))
	b := append(r.Scratch[:0], `{"challenge":"`...)
	b = append(b, c...)
	b = append(b, `","difficulty":`...)
	b = strconv.AppendInt(b, int64(rm.Difficulty), 10)
	b = append(b, `,"expiresMs":`...)
	b = strconv.AppendInt(b, exp, 10)
	b = append(b, '}')
	r.Scratch = b
	api.WriteJSON(r.Ctx, fasthttp.StatusOK, b)
}

// join gives the shopper their one ticket of the sale's queue (the one they
// have, if they joined before) and answers their place.
func (s *Service) join(r *api.Call, st *Settings) {
	rm, rej := s.shopperRoom(r)
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	e := r.Sale
	nowMs := r.NowNano / 1e6
	rv := s.rooms.ensure(e.ProductID)
	switch {
	case nowMs < rm.OpensMs:
		api.QueueNotOpen.Write(r.Ctx)
		return
	case nowMs >= e.EndMs:
		api.Ended.Write(r.Ctx)
		return
	case e.SoldOut():
		rv.joins[joinClosed].Inc()
		s.answerRoom(r, st, roomAnswer{status: roomClosed, soldOut: true})
		return
	}
	j := stock.Join{User: string(r.UserID), NowMs: nowMs, Lottery: rm.Lottery(), MaxActive: rm.MaxActive, SessionMs: rm.SessionMs}
	if rm.Difficulty > 0 {
		err := errNoChallenge
		if len(r.Challenge) > 0 {
			err = st.Challenges.Verify(r.Challenge, r.Nonce, r.UserID, r.ProductID, nowMs)
		}
		if err != nil {
			rv.joins[joinBadChallenge].Inc()
			// The reason is one of Verify's fixed errors: nothing the
			// client sent reaches the log.
			s.d.Log.Info("queue join refused: bad challenge", "product", e.ProductID, "reason", err.Error())
			api.BadChallenge.Write(r.Ctx)
			return
		}
		j.ChallengeID = string(room.ChallengeID(r.Challenge))
		j.ChallengeExpiresMs, _ = room.ChallengeExpiresMs(r.Challenge)
	}
	var id room.ID
	rand.Read(id[:])
	j.ID = string(id.AppendHex(nil))
	if rm.Lottery() && nowMs < rm.StartMs {
		// Kept only if the room has no key yet (the first join, or no edge
		// looked after the pre-queue's opening yet).
		j.Key, j.Commit = room.NewKey()
	}
	rs := roomSaleOf(e.Sale)
	ans, err := s.d.Store.RoomJoin(context.Background(), rs, j)
	if err != nil {
		rv.joins[joinError].Inc()
		s.d.Log.Warn("queue join failed", "product", e.ProductID, "err", err)
		api.Busy.Write(r.Ctx)
		return
	}
	switch ans.Result {
	case stock.RoomClosed:
		rv.joins[joinClosed].Inc()
		s.answerRoom(r, st, roomAnswer{status: roomClosed})
		return
	case stock.ChallengeUsed:
		rv.joins[joinBadChallenge].Inc()
		api.BadChallenge.Write(r.Ctx)
		return
	case stock.JoinedBefore:
		rv.joins[joinAgain].Inc()
	default:
		rv.joins[joinNew].Inc()
	}
	tid, ok := room.ParseID(ans.ID)
	if !ok {
		api.Busy.Write(r.Ctx)
		return
	}
	ans.Place = s.drawnPlace(e, rm, r.UserID, tid, ans.Place, nowMs)
	a, rej := s.placeAnswer(rm, rv, tid, ans.Place, -1, true, r.NowNano/1e6)
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	s.admittedToken(r, st, &a)
	s.answerRoom(r, st, a)
}

// errNoChallenge is the join's refusal reason when no challenge was sent.
var errNoChallenge = errors.New("no challenge sent")

// drawnPlace is p, unless p is a pre-queue member's place asked for after
// the opening before any edge drew the lottery: then this edge draws it
// (or waits, briefly, for the edge drawing it) and answers the real place,
// so no answer says position 0 once the opening has passed.
func (s *Service) drawnPlace(e catalog.Entry, rm *room.Room, user []byte, id room.ID, p stock.RoomPlace, nowMs int64) stock.RoomPlace {
	if !p.Found || p.Mismatch || p.Seq != 0 || p.Place != 0 || !rm.Lottery() || nowMs < rm.StartMs {
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var idHex [2 * room.IDLen]byte
	for ctx.Err() == nil {
		if err := s.drawLottery(ctx, e, roomSaleOf(e.Sale)); err != nil {
			s.d.Log.Warn("waiting room: lottery not drawn at a shopper's call", "product", e.ProductID, "err", err)
			return p
		}
		q, err := s.d.Store.RoomPlace(ctx, roomSaleOf(e.Sale), stock.PlaceAsk{User: string(user),
			ID: string(id.AppendHex(idHex[:0])), NowMs: nowMs, MaxActive: rm.MaxActive, SessionMs: rm.SessionMs})
		if err != nil {
			return p
		}
		if q.Place != 0 || !q.Found || q.Mismatch {
			return q
		}
		// Another edge holds the draw's lock: its ranks are moments away.
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return p
}

// queue answers the ticket holder's place (the page's poll).
func (s *Service) queue(r *api.Call, st *Settings) {
	rm, rej := s.shopperRoom(r)
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	t := ticketOf(r)
	if len(t) == 0 {
		api.NotJoined.Write(r.Ctx)
		return
	}
	nowMs := r.NowNano / 1e6
	id, held, err := st.Tickets.Check(t, r.UserID, r.ProductID, nowMs)
	if err != nil {
		api.BadTicket.Write(r.Ctx)
		return
	}
	if r.Sale.SoldOut() {
		s.answerRoom(r, st, roomAnswer{status: roomClosed, soldOut: true})
		return
	}
	rv := s.rooms.ensure(r.Sale.ProductID)
	if held > 0 {
		// A place the line has not reached: answered from the edge's
		// memory, as the token call refuses it, so the polls of a long
		// queue cost Redis nothing until their turn comes near.
		if vs := rv.state.Load(); vs != nil && vs.Frozen && !vs.Closed && held > vs.Frontier(nowMs) {
			s.answerRoom(r, st, roomAnswer{status: roomWaiting, place: held, etaMs: vs.ETA(held, nowMs),
				ahead: max(held-1-vs.Frontier(nowMs), 0), id: id})
			return
		}
	}
	a, rej := s.place(r, rm, rv, id, held)
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	s.admittedToken(r, st, &a)
	s.answerRoom(r, st, a)
}

// place reads (and admits) the shopper's place: the answer, or the
// refusal; held is the place the presented ticket carries.
func (s *Service) place(r *api.Call, rm *room.Room, rv *roomView, id room.ID, held int64) (roomAnswer, *api.Rejection) {
	nowMs := r.NowNano / 1e6
	var idHex [2 * room.IDLen]byte
	p, err := s.d.Store.RoomPlace(context.Background(), roomSaleOf(r.Sale.Sale), stock.PlaceAsk{
		User: view(r.UserID), ID: view(id.AppendHex(idHex[:0])), NowMs: nowMs, MaxActive: rm.MaxActive, SessionMs: rm.SessionMs,
		Held: max(held, 0), Seen: rv.seen.Load()})
	if err != nil {
		s.d.Log.Warn("queue place failed", "product", r.Sale.ProductID, "err", err)
		return roomAnswer{}, api.Busy
	}
	p = s.drawnPlace(r.Sale, rm, r.UserID, id, p, nowMs)
	return s.placeAnswer(rm, rv, id, p, held, false, nowMs)
}

// placeAnswer is the answer of the place p read for ticket id (joined: by
// the join that gave it), or the refusal; held is the place the presented
// ticket carries (-1: none), and a new ticket is given when the place is no
// longer the ticket's.
func (s *Service) placeAnswer(rm *room.Room, rv *roomView, id room.ID, p stock.RoomPlace, held int64, joined bool, nowMs int64) (roomAnswer, *api.Rejection) {
	switch {
	case !p.Found && joined:
		return roomAnswer{}, api.Busy // the join's ticket vanished in between: Redis lost it
	case !p.Found:
		return roomAnswer{}, api.NotJoined
	case p.Mismatch:
		return roomAnswer{}, api.BadTicket
	}
	vs := stateOf(&p.State)
	rv.store(&vs)
	a := roomAnswerOf(rm, &p, &vs, nowMs)
	a.id, a.place, a.reissue = id, p.Place, joined || p.Place != held
	return a, nil
}

// roomAnswer is the body of the queue calls.
type roomAnswer struct {
	status          string
	place, etaMs    int64
	admittedUntilMs int64
	ahead           int64 // places before this one the line has still to let in: the number the page shows moving
	soldOut         bool
	// id and reissue: the ticket to give (a new one when its place changed).
	id      room.ID
	reissue bool
	// tokenExpMs > 0: the answer carries a purchase token valid until then.
	tokenExpMs int64
}

// admittedToken gives an admitted shopper's answer the purchase token the
// token call would mint at this moment: the same rules (checkRules: signed
// in, the sale open, in stock, not degraded), the admission read from Redis
// by this very call (placeAnswer: a.status is admitted only while the turn
// lasts), and the same expiry, no later than the turn's end. Any other
// answer carries none.
func (s *Service) admittedToken(r *api.Call, st *Settings, a *roomAnswer) {
	if a.status != roomAdmitted || s.checkRules(r) != nil {
		return
	}
	a.tokenExpMs = min(r.NowNano/1e6+st.TokenTTL.Milliseconds(), a.admittedUntilMs)
}

func roomAnswerOf(rm *room.Room, p *stock.RoomPlace, vs *room.State, nowMs int64) roomAnswer {
	a := roomAnswer{place: p.Place, etaMs: -1}
	switch {
	case p.UntilMs > nowMs:
		a.status, a.admittedUntilMs, a.etaMs = roomAdmitted, p.UntilMs, 0
	case p.UntilMs > 0:
		a.status, a.admittedUntilMs = roomExpired, p.UntilMs
	case vs.Closed:
		a.status = roomClosed
	case p.Place == 0 && p.Seq == 0:
		a.status = roomPrequeue
		a.etaMs = max(rm.StartMs-nowMs, 0)
	case nowMs < rm.StartMs:
		// Joined before the opening with a place already known (a fifo
		// room's): still the pre-queue, with the place and its estimate.
		a.status = roomPrequeue
		a.etaMs = vs.ETA(p.Place, nowMs)
		a.ahead = max(p.Place-1-vs.Frontier(nowMs), 0)
	case p.Place == 0:
		a.status = roomWaiting // after the opening, before the lottery's ranks
		a.etaMs = max(rm.StartMs-nowMs, 0)
	default:
		a.status = roomWaiting
		a.etaMs = vs.ETA(p.Place, nowMs)
		a.ahead = max(p.Place-1-vs.Frontier(nowMs), 0)
		if a.etaMs == 0 {
			a.etaMs = -1 // the line passed the place, max_active holds it back: no estimate
		}
	}
	return a
}

// answerRoom writes {productId, status, position, ahead, admitted, etaMs, opensMs,
// admittedUntilMs, soldOut, ticket, token?, expiresMs?} and, with a.reissue,
// the ticket cookie.
func (s *Service) answerRoom(r *api.Call, st *Settings, a roomAnswer) {
	e := r.Sale
	b := append(r.Scratch[:0], `{"productId":"`...)
	b = append(b, e.ProductID...)
	b = append(b, `","status":"`...)
	b = append(b, a.status...)
	b = append(b, `","position":`...)
	b = strconv.AppendInt(b, a.place, 10)
	b = append(b, `,"ahead":`...)
	b = strconv.AppendInt(b, a.ahead, 10)
	b = append(b, `,"admitted":`...)
	b = strconv.AppendBool(b, a.status == roomAdmitted)
	b = append(b, `,"etaMs":`...)
	b = strconv.AppendInt(b, a.etaMs, 10)
	b = append(b, `,"opensMs":`...)
	b = strconv.AppendInt(b, e.StartMs, 10)
	b = append(b, `,"admittedUntilMs":`...)
	b = strconv.AppendInt(b, a.admittedUntilMs, 10)
	b = append(b, `,"soldOut":`...)
	b = strconv.AppendBool(b, a.soldOut)
	if a.status != roomClosed || a.place > 0 {
		// The ticket id is what the lottery ranks: with it a shopper
		// checks their own place against the published key.
		b = append(b, `,"ticketId":"`...)
		b = a.id.AppendHex(b)
		b = append(b, `","ticket":"`...)
		from := len(b)
		if a.reissue {
			b = st.Tickets.Append(b, r.UserID, r.ProductID, a.id, a.place, e.EndMs+roomGrace.Milliseconds())
		} else {
			b = append(b, ticketOf(r)...)
		}
		ticket := b[from:]
		b = append(b, '"')
		if a.reissue {
			s.setTicketCookie(r, st, ticket)
		}
	}
	if a.tokenExpMs > 0 {
		b = appendToken(append(b, ','), r, st, "expiresMs", a.tokenExpMs)
	}
	b = append(b, '}')
	r.Scratch = b
	api.WriteJSON(r.Ctx, fasthttp.StatusOK, b)
}

func (s *Service) setTicketCookie(r *api.Call, st *Settings, ticket []byte) {
	var name [len(room.CookiePref) + order.MaxProductIDLen]byte
	n := append(name[:0], room.CookiePref...)
	n = append(n, r.ProductID...)
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKeyBytes(n)
	c.SetValueBytes(ticket)
	c.SetPath("/api/seckill")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetSecure(st.CookieSecure)
	if left := r.Sale.EndMs - r.NowNano/1e6; left > 0 {
		c.SetMaxAge(int(left/1000) + 1)
	}
	r.Ctx.Response.Header.SetCookie(c)
}

// gate is the token call's admission check for a sale with a room: the
// admitted session's end, or the refusal (the caller writes it). A shopper
// whose ticket carries a place the line is known not to have reached is
// refused from the edge's memory (no Redis, no allocation); anyone else
// costs one script call, which also admits them if it is their turn.
func (s *Service) gate(r *api.Call, st *Settings, rm *room.Room) (untilMs int64, no refusal) {
	t := ticketOf(r)
	if len(t) == 0 {
		return 0, notAdmitted(0, -1)
	}
	nowMs := r.NowNano / 1e6
	id, held, err := st.Tickets.Check(t, r.UserID, r.ProductID, nowMs)
	if err != nil {
		return 0, refusal{rej: api.BadTicket}
	}
	rv := s.rooms.get(r.ProductID)
	if rv != nil && held > 0 {
		if vs := rv.state.Load(); vs != nil && vs.Frozen && held > vs.Frontier(nowMs) {
			return 0, notAdmitted(held, vs.ETA(held, nowMs))
		}
	}
	if rv == nil {
		rv = s.rooms.ensure(r.Sale.ProductID)
	}
	var idHex [2 * room.IDLen]byte
	p, err := s.d.Store.RoomPlace(context.Background(), roomSaleOf(r.Sale.Sale), stock.PlaceAsk{
		User: view(r.UserID), ID: view(id.AppendHex(idHex[:0])), NowMs: nowMs, MaxActive: rm.MaxActive, SessionMs: rm.SessionMs,
		Held: max(held, 0), Seen: rv.seen.Load()})
	if err != nil {
		return 0, refusal{rej: api.Busy}
	}
	switch {
	case !p.Found:
		return 0, notAdmitted(0, -1)
	case p.Mismatch:
		return 0, refusal{rej: api.BadTicket}
	}
	vs := stateOf(&p.State)
	rv.store(&vs)
	if p.UntilMs > nowMs {
		return p.UntilMs, refusal{}
	}
	if p.UntilMs > 0 {
		return 0, refusal{rej: api.TurnOver}
	}
	a := roomAnswerOf(rm, &p, &vs, nowMs)
	return 0, notAdmitted(p.Place, a.etaMs)
}

// refusal is the room's no to a token call: a rejection, and for
// api.NotAdmitted the shopper's place and the estimate its answer carries.
// The zero refusal lets the shopper in.
type refusal struct {
	rej          *api.Rejection
	place, etaMs int64
}

func notAdmitted(place, etaMs int64) refusal {
	return refusal{rej: api.NotAdmitted, place: place, etaMs: etaMs}
}

// write answers the refusal: 403 NOT_ADMITTED with the place and the
// estimate, or the rejection alone.
func (f refusal) write(r *api.Call) {
	if f.rej != api.NotAdmitted {
		f.rej.Write(r.Ctx)
		return
	}
	b := api.NotAdmitted.AppendOpen(r.Scratch[:0])
	b = append(b, `,"position":`...)
	b = strconv.AppendInt(b, f.place, 10)
	b = append(b, `,"etaMs":`...)
	b = strconv.AppendInt(b, f.etaMs, 10)
	b = append(b, '}')
	r.Scratch = b
	api.WriteJSON(r.Ctx, api.NotAdmitted.Status, b)
}

// lottery answers the public record of the sale's lottery: the commit from
// the pre-queue's opening, the key from the opening on.
func (s *Service) lottery(r *api.Call) {
	rm, rej := s.roomOf(r)
	if rej != nil {
		rej.Write(r.Ctx)
		return
	}
	info, err := s.roomLottery(context.Background(), r.Sale, rm, r.NowNano/1e6)
	if err != nil {
		api.Busy.Write(r.Ctx)
		return
	}
	b := append(r.Scratch[:0], `{"productId":"`...)
	b = append(b, r.Sale.ProductID...)
	b = append(b, `","order":"`...)
	b = append(b, rm.Order.String()...)
	b = append(b, '"')
	if info.Commit != "" {
		b = append(b, `,"commit":"`...)
		b = append(b, info.Commit...)
		b = append(b, '"')
	}
	if info.Key != "" {
		b = append(b, `,"key":"`...)
		b = append(b, info.Key...)
		b = append(b, '"')
	}
	b = append(b, `,"members":`...)
	b = strconv.AppendInt(b, info.Members, 10)
	b = append(b, `,"ranked":`...)
	b = strconv.AppendBool(b, info.Ranked)
	b = append(b, '}')
	r.Scratch = b
	api.WriteJSON(r.Ctx, fasthttp.StatusOK, b)
}

// Lottery is a sale's lottery as it can be published: Key is empty before
// the opening; Ranking (the admin's only) is the ticket ids by place.
type Lottery struct {
	ProductID string   `json:"productId"`
	Order     string   `json:"order"`
	Commit    string   `json:"commit,omitempty"`
	Key       string   `json:"key,omitempty"`
	Members   int64    `json:"members"`
	Ranked    bool     `json:"ranked"`
	Ranking   []string `json:"ranking,omitempty"`
}

func (s *Service) roomLottery(ctx context.Context, e catalog.Entry, rm *room.Room, nowMs int64) (Lottery, error) {
	info, _, err := s.d.Store.RoomInfo(ctx, e.ProductID, nowMs)
	if err != nil {
		return Lottery{}, err
	}
	if info.Commit == "" && rm.Lottery() && nowMs >= rm.OpensMs {
		// The pre-queue is open and no edge drew its key yet.
		key, commit := room.NewKey()
		if info.Commit, err = s.d.Store.RoomOpenPrequeue(ctx, roomSaleOf(e.Sale), key, commit); err != nil {
			return Lottery{}, err
		}
	}
	l := Lottery{ProductID: e.ProductID, Order: rm.Order.String(), Commit: info.Commit, Ranked: info.Ranked}
	if !rm.Lottery() {
		// A fifo room draws nothing: the key Redis keeps for the opening's
		// bookkeeping is no lottery's, and is not shown.
		l.Commit, l.Ranked = "", false
		if info.Frozen {
			l.Members = info.Members
		}
		return l, nil
	}
	if info.Frozen {
		l.Key, l.Members = info.Key, info.Members
	} else if rm.Lottery() {
		l.Members = info.Joined // before the opening, the tickets so far
	}
	return l, nil
}

// finishRoom takes a buyer out of the active shoppers (max_active), off the
// request path.
func (s *Service) finishRoom(e catalog.Entry, user []byte) {
	if e.Room == nil || e.Room.MaxActive == 0 {
		return
	}
	p, u := e.ProductID, string(user)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.d.Store.RoomFinish(ctx, p, u); err != nil {
			s.d.Log.Warn("waiting room: buyer not taken out of the active shoppers; their session ends by itself", "product", p, "err", err)
		}
	}()
}
