package routeroom

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/metrics"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
	"flashgate/sale/room"
)

// Names the edge reads and writes.
const (
	// CookiePrefix + the room's name: the visitor's cookie, a waiting
	// ticket (room.Tickets: id and first place) or an admitted pass.
	CookiePrefix = "fg_room_"
	// BypassCookie and BypassHeader carry a bypass token.
	BypassCookie = "fg_room_bypass"
	BypassHeader = "Flashgate-Room-Bypass"
	// PollHeader marks the queue page's poll: answered with JSON by the
	// edge, never sent to the origin.
	PollHeader = "Flashgate-Room-Poll"
	// ChallengeHeader and NonceHeader carry a solved proof of work (a room
	// with challenge.difficulty): the challenge the edge gave and the nonce.
	ChallengeHeader = "Flashgate-Room-Challenge"
	NonceHeader     = "Flashgate-Room-Nonce"
	// EndValue is the end header's value that ends the session.
	EndValue = "end"

	passVersion   = 0x52 // 'R': never a ticket's or a token's version
	bypassVersion = 0x42
	passPayload   = room.IDLen + 8 // id | check ms
	// keysTTL: a room's keys outlive its last visitor by a day.
	keysTTL = 24 * time.Hour
	// ticketLife: a waiting ticket is good for a day (the place itself is
	// lost after abandon without polls).
	ticketLife = 24 * time.Hour
)

var visitorUser = []byte("visitor") // the tickets' "user": the cookie names the visitor

// Secrets are the keys a room signs with, derived from sale.token_secret
// (room.DeriveSecret), the same on every edge.
type Secrets struct {
	Tickets, Passes, Bypass, Challenge []byte
}

// DeriveSecrets derives the route rooms' keys from the token secret.
func DeriveSecrets(tokenSecret []byte) Secrets {
	return Secrets{Tickets: room.DeriveSecret(tokenSecret, "route ticket"), Passes: room.DeriveSecret(tokenSecret, "route pass"),
		Bypass:    room.DeriveSecret(tokenSecret, "route bypass"),
		Challenge: room.DeriveSecret(tokenSecret, "route challenge")}
}

// Room is one route's waiting room, compiled into a snapshot; Live is the
// part that outlives a reload.
type Room struct {
	cfg       conf.RouteRoomConfig
	rr        stock.RouteRoom
	live      *Live
	store     *stock.Store
	log       *slog.Logger
	name      []byte
	cookie    []byte
	tickets   *room.Tickets
	passes    *ptoken.Envelope
	bypass    *ptoken.Envelope
	cidrs     []netip.Prefix
	paths     [][]byte
	endHeader []byte
	page      *Page
	recheckMs int64
	secure    bool
	base      uint32 // the config's method
	events    []event
	// challenger and difficulty: the proof of work a new visitor solves
	// before a place (difficulty 0: none).
	challenger *room.Challenger
	difficulty int
}

// event is a compiled RoomEventConfig: times in unix ms, 0 / "" / nil
// where the room's setting applies.
type event struct {
	name                  string
	preMs, startMs, endMs int64
	rate, cap             int64
	method                string
	page                  *Page
	shuffle               bool
}

// Options are what New needs beside the room's config.
type Options struct {
	Secrets      Secrets
	Store        *stock.Store // nil: compiled only to be checked (proxy -t)
	Registry     *Registry
	CookieSecure bool
	Log          *slog.Logger
	// Start anchors the events' relative times ("+30s"), as the
	// activities': the edge's start, so a reload does not move them.
	Start time.Time
}

// New compiles a route's room: its page (read and checked now: proxy -t
// and a reload refuse a broken template), bypass rules and keys.
func New(c conf.RouteRoomConfig, o Options) (*Room, error) {
	rm := &Room{cfg: c, store: o.Store, log: o.Log, name: []byte(c.Name), cookie: []byte(CookiePrefix + c.Name),
		endHeader: []byte(c.EndHeader), recheckMs: c.Recheck.Milliseconds(), secure: o.CookieSecure}
	if rm.log == nil {
		rm.log = slog.New(slog.DiscardHandler)
	}
	rm.rr = stock.RouteRoom{Name: c.Name, Method: c.Method, Rate: int64(c.AdmitPerMinute), Cap: int64(c.MaxActive),
		SessionMs: c.Session.Milliseconds(), AbandonMs: c.Abandon.Milliseconds(), TTLMs: keysTTL.Milliseconds()}
	var err error
	if rm.tickets, err = room.NewTickets(o.Secrets.Tickets); err != nil {
		return nil, err
	}
	if rm.passes, err = ptoken.NewEnvelope(o.Secrets.Passes, passVersion, passPayload); err != nil {
		return nil, err
	}
	if rm.bypass, err = ptoken.NewEnvelope(o.Secrets.Bypass, bypassVersion, 1); err != nil {
		return nil, err
	}
	for _, s := range c.Bypass.CIDRs {
		p, err := conf.ParseRoomCIDR(s)
		if err != nil {
			return nil, err
		}
		rm.cidrs = append(rm.cidrs, p)
	}
	for _, p := range c.Bypass.Paths {
		rm.paths = append(rm.paths, []byte(p))
	}
	if rm.page, err = LoadPage(c.Page); err != nil {
		return nil, fmt.Errorf("page: %w", err)
	}
	if err := room.CheckChallengeDifficulty(c.Challenge.Difficulty); err != nil {
		return nil, fmt.Errorf("challenge: %w", err)
	}
	if rm.difficulty = c.Challenge.Difficulty; rm.difficulty > 0 {
		if len(o.Secrets.Challenge) == 0 {
			return nil, fmt.Errorf("challenge: no secret")
		}
		rm.challenger = room.NewChallenger(o.Secrets.Challenge)
	}
	rm.base = methodIndex(c.Method)
	for i, ec := range c.Events {
		ev, err := newEvent(ec, o.Start, rm.page)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		rm.events = append(rm.events, ev)
	}
	if o.Registry != nil {
		rm.live = o.Registry.ensure(rm.rr)
	} else {
		rm.live = newLive(rm.rr)
	}
	rm.live.recheckMs.Store(rm.recheckMs)
	return rm, nil
}

func newEvent(c conf.RoomEventConfig, base time.Time, page *Page) (event, error) {
	ev := event{name: c.Name, rate: int64(c.AdmitPerMinute), cap: int64(c.MaxActive), method: c.Method, page: page,
		shuffle: c.Shuffle == nil || *c.Shuffle}
	var err error
	if ev.startMs, err = catalog.ParseTime(c.Start, base); err != nil {
		return ev, fmt.Errorf("start %v", err)
	}
	if ev.endMs, err = catalog.ParseTime(c.End, base); err != nil {
		return ev, fmt.Errorf("end %v", err)
	}
	ev.preMs = ev.startMs
	if c.Prequeue != "" {
		if ev.preMs, err = catalog.ParseTime(c.Prequeue, base); err != nil {
			return ev, fmt.Errorf("prequeue %v", err)
		}
	}
	if ev.preMs > ev.startMs || ev.startMs >= ev.endMs {
		return ev, fmt.Errorf("want prequeue <= start < end")
	}
	if c.Page != "" {
		if ev.page, err = LoadPage(c.Page); err != nil {
			return ev, fmt.Errorf("page: %w", err)
		}
	}
	return ev, nil
}

// eventAt is the event whose window holds nowMs (pre: its pre-queue), or nil.
func (rm *Room) eventAt(nowMs int64) (ev *event, pre bool) {
	for i := range rm.events {
		e := &rm.events[i]
		if nowMs >= e.preMs && nowMs < e.endMs {
			return e, nowMs < e.startMs
		}
	}
	return nil, false
}

// methodAt is the method in force at nowMs: the operator's, else the
// event's (its pre-queue holds everyone), else the config's.
func (rm *Room) methodAt(nowMs int64) (m uint32, ev *event, pre bool) {
	ev, pre = rm.eventAt(nowMs)
	switch o := rm.live.override.Load(); {
	case o != 0:
		m = o - 1
	case pre && ev.shuffle:
		m = methodPrequeue
	case pre:
		m = methodQueueAll // arrival order, nobody let in
	case ev != nil && ev.method != "":
		m = methodIndex(ev.method)
	default:
		m = rm.base
	}
	if rm.live.method.Load() != m {
		rm.live.method.Store(m)
	}
	return m, ev, pre
}

// configAt is what the scripts are told at nowMs: the room's settings with
// the event's and the method in force.
func (rm *Room) configAt(m uint32, ev *event, pre bool) stock.RouteRoom {
	c := rm.live.config()
	c.Method = methodName(m)
	if ev != nil && !pre {
		if ev.rate > 0 {
			c.Rate = ev.rate
		}
		if ev.cap > 0 {
			c.Cap = ev.cap
		}
	}
	return c
}

// Name is the room's name.
func (rm *Room) Name() string { return rm.cfg.Name }

// Visit is what Gate learnt of a request that goes on to the origin, for
// Finish.
type Visit struct {
	id       room.ID
	joinedMs int64 // when a waiting visitor's ticket was issued (0: none)
	known    bool  // id is an admitted visitor's
	passTo   int64 // > 0: give a new pass valid until then (session end)
	checkAt  int64
	nowMs    int64 // Gate's clock, for Finish
}

// Gate decides one request on the room's route: true, the request goes to
// the origin (then call Finish); false, the room answered it. An admitted
// visitor whose pass needs no check is decided from memory, without an
// allocation; a renewal, a waiting visitor and a new one cost one script
// call.
func (rm *Room) Gate(ctx *fasthttp.RequestCtx, clientIP netip.Addr, nowMs int64) (Visit, bool) {
	v := Visit{nowMs: nowMs}
	m, ev, pre := rm.methodAt(nowMs)
	if m == methodReject {
		rm.live.count(resClosed)
		rm.answerClosed(ctx)
		return v, false
	}
	if rm.bypassed(ctx, clientIP, nowMs) {
		rm.live.count(resBypass)
		return v, true
	}
	poll := len(ctx.Request.Header.Peek(PollHeader)) > 0
	c := ctx.Request.Header.CookieBytes(rm.cookie)
	var payload [passPayload]byte
	if until, err := rm.passes.Open(c, visitorUser, rm.name, nowMs, payload[:]); err == nil {
		copy(v.id[:], payload[:room.IDLen])
		v.known = true
		check := int64(binary.BigEndian.Uint64(payload[room.IDLen:]))
		hold := m == methodQueueAll || m == methodPrequeue
		if !hold && nowMs < check && !poll && !rm.live.endedBefore(v.id, check) {
			rm.live.count(resPass)
			return v, true
		}
		if !hold {
			if ok := rm.recheck(&v, until, nowMs); ok {
				if poll {
					rm.answerAdmitted(ctx, &v)
					return v, false
				}
				return v, true
			}
		}
	} else if id, _, exp, err := rm.tickets.CheckExpiry(c, visitorUser, rm.name, nowMs); err == nil {
		v.id, v.joinedMs = id, exp-ticketLife.Milliseconds()
	} else {
		rand.Read(v.id[:])
		if rm.difficulty > 0 {
			// A new visitor: a place only for a solved proof of work.
			return rm.challenged(ctx, &v, nowMs, poll, rm.configAt(m, ev, pre), ev, pre)
		}
	}
	return rm.visit(ctx, &v, nowMs, poll, rm.configAt(m, ev, pre), ev, pre, "", 0)
}

// challenged is a new visitor at a room that asks for a proof of work: with
// a solved one (spent by the visit, single use), a visit; else a challenge
// to solve, with the reason of a refusal logged.
func (rm *Room) challenged(ctx *fasthttp.RequestCtx, v *Visit, nowMs int64, poll bool, cfg stock.RouteRoom, ev *event, pre bool) (Visit, bool) {
	h := &ctx.Request.Header
	c, n := h.Peek(ChallengeHeader), h.Peek(NonceHeader)
	if len(c) == 0 {
		rm.answerChallenge(ctx, nowMs, false)
		return *v, false
	}
	err := rm.challenger.Verify(c, n, visitorUser, rm.name, nowMs)
	exp, _ := room.ChallengeExpiresMs(c)
	id := string(room.ChallengeID(c))
	// The proof is the edge's business: the origin never gets it.
	h.Del(ChallengeHeader)
	h.Del(NonceHeader)
	if err != nil {
		rm.live.count(resBadChallenge)
		rm.log.Info("route room: proof of work refused", "room", rm.cfg.Name, "reason", err)
		rm.answerChallenge(ctx, nowMs, true)
		return *v, false
	}
	return rm.visit(ctx, v, nowMs, poll, cfg, ev, pre, id, exp)
}

// answerChallenge asks for a proof of work: JSON for the page's poll and
// apps (403 BAD_CHALLENGE after a refused one, else 503 / the poll's 200),
// else the queue page, whose script solves it.
func (rm *Room) answerChallenge(ctx *fasthttp.RequestCtx, nowMs int64, refused bool) {
	chal := rm.challenger.Issue(visitorUser, rm.name, rm.difficulty, nowMs)
	retry := (rm.cfg.Poll.Milliseconds() + 999) / 1000
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	poll := len(ctx.Request.Header.Peek(PollHeader)) > 0
	if poll || wantsJSON(ctx) {
		b := append([]byte(nil), `{"room":`...)
		b = strconv.AppendQuote(b, rm.cfg.Name)
		b = append(b, `,"status":"challenge","challenge":"`...)
		b = append(b, chal...)
		b = append(b, `","difficulty":`...)
		b = strconv.AppendInt(b, int64(rm.difficulty), 10)
		if refused {
			b = append(b, `,"code":"BAD_CHALLENGE"`...)
		}
		b = append(b, '}')
		status := fasthttp.StatusServiceUnavailable
		switch {
		case refused:
			status = fasthttp.StatusForbidden
		case poll:
			status = fasthttp.StatusOK
		}
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.FormatInt(retry, 10))
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
		return
	}
	lang := Lang(ctx.Request.Header.Peek(fasthttp.HeaderAcceptLanguage))
	var out bytes.Buffer
	err := rm.page.render(&out, PageData{Room: rm.cfg.Title, Status: "challenge", ETA: etaWords(lang, -1), ETASeconds: -1,
		Lang: lang, PollMs: rm.cfg.Poll.Milliseconds(), Challenge: chal, Difficulty: rm.difficulty})
	if err != nil {
		rm.log.Warn("route room: page template failed", "room", rm.cfg.Name, "err", err)
	}
	rm.writePage(ctx, fasthttp.StatusOK, out.Bytes())
}

// recheck asks Redis whether an admitted visitor's session still runs (and
// renews it): true with the new pass in v, false when it is over.
func (rm *Room) recheck(v *Visit, until, nowMs int64) bool {
	var next int64
	if *rm.cfg.Renew {
		next = nowMs + rm.rr.SessionMs
	}
	var hex [2 * room.IDLen]byte
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	u, err := rm.store.RouteRenew(ctx, rm.live.config(), string(v.id.AppendHex(hex[:0])), nowMs, next)
	cancel()
	if err != nil {
		// Redis failed: the visitor was admitted, and keeps the pass they
		// hold until its end.
		rm.live.count(resError)
		rm.log.Warn("route room: pass check failed; the pass holds until its end", "room", rm.cfg.Name, "err", err)
		v.passTo, v.checkAt = until, min(until, nowMs+rm.recheckMs)
		return true
	}
	if u <= nowMs {
		rm.live.count(resOver)
		v.known = false
		return false
	}
	rm.live.count(resRenew)
	v.passTo, v.checkAt = u, min(u, nowMs+rm.recheckMs)
	return true
}

// visit is one script call for a visitor without a running pass: let in,
// or told their place.
func (rm *Room) visit(ctx *fasthttp.RequestCtx, v *Visit, nowMs int64, poll bool, cfg stock.RouteRoom, ev *event, pre bool, challengeID string, challengeExpMs int64) (Visit, bool) {
	var hex [2 * room.IDLen]byte
	id := string(v.id.AppendHex(hex[:0]))
	var score float64
	if cfg.Method == conf.RoomRandom || cfg.Method == methodPrequeueName {
		key, err := rm.lotteryKey(nowMs)
		if err != nil {
			rm.live.count(resError)
			rm.log.Warn("route room: no lottery key; the visitor waits", "room", rm.cfg.Name, "err", err)
			rm.answerWaiting(ctx, v, waitAnswer{status: "busy", etaMs: -1, page: rm.pageOf(ev, pre), retryMs: rm.cfg.Poll.Milliseconds()}, nowMs)
			return *v, false
		}
		score = room.Score(key, []byte(id))
	}
	call := func(nowMs int64, challengeID string, challengeExpMs int64) (stock.VisitAnswer, error) {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return rm.store.RouteVisitSpending(cctx, cfg, id, score, nowMs, challengeID, challengeExpMs)
	}
	// Where a freed seat goes to the head of the line at once, the edge
	// may hold a waiting visitor's poll or app request (not her first: she
	// hears her place at once; not a page: it shows at once), and listens
	// for her wake-up before it asks (one between the answer and the hold
	// is not lost).
	var wake chan struct{}
	if !pre && v.joinedMs > 0 && (poll || wantsJSON(ctx)) && holdable(cfg.Method, cfg.Rate, cfg.Cap) {
		if wake = rm.live.await(v.id); wake != nil {
			defer rm.live.unawait(v.id, wake)
		}
	}
	a, err := call(nowMs, challengeID, challengeExpMs)
	held := false
	if err == nil && wake != nil && a.Status == stock.VisitWaiting {
		var now int64
		if held, now = rm.hold(&a, wake, nowMs); held {
			// Her seat was reserved meanwhile (or the hold ran out): one
			// more call claims it or tells the place now. The proof of
			// work was spent by the first.
			nowMs, v.nowMs = now, now
			a, err = call(nowMs, "", 0)
		}
	}
	if err != nil {
		rm.live.count(resError)
		rm.log.Warn("route room: visit failed; the visitor waits", "room", rm.cfg.Name, "err", err)
		rm.answerWaiting(ctx, v, waitAnswer{status: "busy", etaMs: -1, page: rm.pageOf(ev, pre), retryMs: rm.cfg.Poll.Milliseconds()}, nowMs)
		return *v, false
	}
	if a.Status == stock.VisitReplayed {
		rm.live.count(resBadChallenge)
		rm.log.Info("route room: proof of work refused", "room", rm.cfg.Name, "reason", "spent already")
		rm.answerChallenge(ctx, nowMs, true)
		return *v, false
	}
	rm.live.observe(a)
	if a.Status == stock.VisitAdmitted || a.Status == stock.VisitPassthrough {
		rm.live.count(resAdmitted)
		if v.joinedMs > 0 && nowMs >= v.joinedMs {
			// How long the visitor waited, from the ticket's issue to here.
			rm.live.wait.Observe(time.Duration(nowMs-v.joinedMs) * time.Millisecond)
		}
		v.known, v.passTo, v.checkAt = true, a.UntilMs, min(a.UntilMs, nowMs+rm.recheckMs)
		if poll {
			rm.answerAdmitted(ctx, v)
			return *v, false
		}
		return *v, true
	}
	rm.live.count(resWaiting)
	// When to ask again: where the edge holds requests, before the turn,
	// so that her seat, when it frees, finds her held here — at once when
	// a hold ran out (she is near the head), else half a hold before the
	// estimate; elsewhere at the poll.
	w := waitAnswer{status: "waiting", place: a.Place, etaMs: eta(&a, nowMs), page: rm.pageOf(ev, pre),
		lottery: a.Method == conf.RoomRandom || a.Method == methodPrequeueName}
	w.retryMs = rm.cfg.Poll.Milliseconds()
	if limit := min(rm.cfg.Poll, holdMax).Milliseconds(); held {
		w.retryMs = 0
	} else if holdable(a.Method, a.Rate, a.Cap) && w.etaMs >= 0 {
		// Not held (her first request, or the edge holds its most): not
		// at once, or she would ask again and again.
		w.retryMs = min(w.retryMs, max(w.etaMs-limit/2, limit/4))
	}
	if pre {
		// The event has not started: the wait is until the start at least,
		// and a shuffled pre-queue has no place until then.
		w.status, w.etaMs = "prequeue", ev.startMs-nowMs
		if ev.shuffle {
			w.place = 0
		}
	}
	rm.answerWaiting(ctx, v, w, nowMs)
	return *v, false
}

// lotteryKey is the running draw's key, every edge's (Redis keeps it):
// the one this edge read last, else read now — drawn now if the draw has
// none yet.
func (rm *Room) lotteryKey(nowMs int64) ([]byte, error) {
	if k := rm.live.lkey.Load(); k != nil {
		return *k, nil
	}
	key, _ := room.NewKey()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := rm.store.RouteAdmin(ctx, rm.live.config(), stock.RouteChange{DrawKey: key}, nowMs)
	if err != nil {
		return nil, err
	}
	rm.live.apply(&info)
	if k := rm.live.lkey.Load(); k != nil {
		return *k, nil
	}
	return nil, fmt.Errorf("the draw's key was revealed meanwhile")
}

// holdMax bounds how long the edge holds a waiting visitor's request (at
// most the room's poll: she would have asked again by then anyway).
const holdMax = 5 * time.Second

// holdable: a capped room without a rate under fifo or random, where a
// freed seat is reserved for the head of the line at once
// (route_room_seats.lua) and the edges are told whom to wake.
func holdable(method string, rate, cap int64) bool {
	return cap > 0 && rate == 0 && (method == conf.RoomFIFO || method == conf.RoomRandom)
}

// maxHeld is how many requests one edge holds in a room of the cap at
// most: as many as it has seats, 16 at least, 1024 at most. Whoever comes
// beyond is answered at once, as without the hold.
func maxHeld(cap int64) int64 { return min(max(cap, 16), 1024) }

// hold holds a waiting visitor's request near the head (among the next
// cap in line, or her seat due within the hold by the estimate) until a
// seat is reserved for her, on any edge, or the hold runs out: true, and
// the time then, when it held. A visitor near the head thus walks in the
// moment her seat frees, not at her next poll.
func (rm *Room) hold(a *stock.VisitAnswer, wake chan struct{}, nowMs int64) (bool, int64) {
	limit := min(rm.cfg.Poll, holdMax)
	near := a.Place <= a.Cap || eta(a, nowMs) <= limit.Milliseconds()
	if !holdable(a.Method, a.Rate, a.Cap) || !near || !rm.live.hold(maxHeld(a.Cap)) {
		return false, nowMs
	}
	defer rm.live.held.Add(-1)
	start := time.Now()
	t := time.NewTimer(limit)
	select {
	case <-wake:
		rm.live.holds[0].Inc()
	case <-t.C:
		rm.live.holds[1].Inc()
	}
	t.Stop()
	return true, nowMs + time.Since(start).Milliseconds()
}

// pageOf is the page in force: the event's, else the room's.
func (rm *Room) pageOf(ev *event, pre bool) *Page {
	if ev != nil && ev.page != nil {
		return ev.page
	}
	return rm.page
}

// eta is the estimated wait of a waiting visitor: the rate's line N(t)
// (room.State, the sale room's arithmetic) from the places the bucket lets
// in now, or the seat the cap makes them wait for, whichever is later; -1
// under queue_all.
func eta(a *stock.VisitAnswer, nowMs int64) int64 {
	if a.Method == conf.RoomQueueAll || a.Method == methodPrequeueName {
		return -1
	}
	var e int64
	if a.Rate > 0 && a.Credit >= 0 {
		st := room.State{Frozen: true, BaseMs: nowMs, Rate: a.Rate}
		e = st.ETA(a.Place-a.Credit, nowMs)
	}
	return max(e, a.SeatMs)
}

// Finish runs after the origin answered a request Gate let through: the
// pass cookie when Gate gave a new one, and the origin's end header, which
// ends the session (and never reaches the client).
func (rm *Room) Finish(ctx *fasthttp.RequestCtx, v *Visit) {
	h := &ctx.Response.Header
	end := h.PeekBytes(rm.endHeader)
	if len(end) == 0 {
		if v.passTo > 0 {
			rm.setPass(ctx, v)
		}
		return
	}
	ended := bytes.EqualFold(end, []byte(EndValue))
	h.DelBytes(rm.endHeader)
	if !ended || !v.known {
		if v.passTo > 0 {
			rm.setPass(ctx, v)
		}
		return
	}
	// This edge knows at once, the others from the broadcast: a copy of
	// the pass replayed is checked in Redis, not let in from memory.
	rm.live.markEnded(v.id, v.nowMs)
	var hex [2 * room.IDLen]byte
	id := string(v.id.AppendHex(hex[:0]))
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	m, ev, pre := rm.methodAt(v.nowMs)
	_, err := rm.store.RouteEnd(cctx, rm.configAt(m, ev, pre), id, v.nowMs)
	cancel()
	if err != nil {
		rm.log.Warn("route room: the origin's end of a session not recorded; it ends by itself", "room", rm.cfg.Name, "err", err)
	}
	rm.live.count(resEnded)
	rm.expireCookie(ctx)
}

func (rm *Room) bypassed(ctx *fasthttp.RequestCtx, ip netip.Addr, nowMs int64) bool {
	path := ctx.Path()
	for _, p := range rm.paths {
		if bytes.HasPrefix(path, p) {
			return true
		}
	}
	if ip.IsValid() {
		ip = ip.Unmap()
		for _, p := range rm.cidrs {
			if p.Contains(ip) {
				return true
			}
		}
	}
	var one [1]byte
	if t := ctx.Request.Header.Peek(BypassHeader); len(t) > 0 {
		_, err := rm.bypass.Open(t, nil, rm.name, nowMs, one[:])
		// A token is the operator's, good or not: the origin never gets it.
		ctx.Request.Header.Del(BypassHeader)
		if err == nil {
			return true
		}
	}
	if t := ctx.Request.Header.Cookie(BypassCookie); len(t) > 0 {
		if _, err := rm.bypass.Open(t, nil, rm.name, nowMs, one[:]); err == nil {
			return true
		}
	}
	return false
}

// MintBypass is a bypass token for this room, valid until expiresMs.
func (rm *Room) MintBypass(expiresMs int64) string {
	return string(rm.bypass.Seal(nil, []byte{1}, nil, rm.name, expiresMs))
}

// Info reads the room's state; change (the zero change reads only) is an
// operator's live change, on every edge.
func (rm *Room) Info(ctx context.Context, change stock.RouteChange, nowMs int64) (stock.RouteRoomInfo, error) {
	info, err := rm.store.RouteAdmin(ctx, rm.live.config(), change, nowMs)
	if err != nil {
		return info, err
	}
	rm.live.apply(&info)
	// The method in force, events included (the operator's wins).
	m, _, _ := rm.methodAt(nowMs)
	info.Method = methodName(m)
	return info, nil
}

// wantsJSON: an API or native client (Accept: application/json without
// text/html), or the page's poll.
func wantsJSON(ctx *fasthttp.RequestCtx) bool {
	a := ctx.Request.Header.Peek(fasthttp.HeaderAccept)
	return bytes.Contains(a, []byte("application/json")) && !bytes.Contains(a, []byte("text/html"))
}

type waitAnswer struct {
	status       string
	place, etaMs int64
	page         *Page
	retryMs      int64 // ask again after this long (rounded up to seconds in Retry-After)
	lottery      bool  // placed by the lottery: the draw's commit and the visitor's id
}

func (rm *Room) answerWaiting(ctx *fasthttp.RequestCtx, v *Visit, w waitAnswer, nowMs int64) {
	// The ticket carries the place the visitor first had: the progress is
	// measured from it.
	first := w.place
	if _, held, err := rm.tickets.Check(ctx.Request.Header.CookieBytes(rm.cookie), visitorUser, rm.name, nowMs); err == nil && held >= w.place {
		first = held
	} else {
		rm.setCookie(ctx, rm.tickets.Append(nil, visitorUser, rm.name, v.id, w.place, nowMs+ticketLife.Milliseconds()), ticketLife)
	}
	var progress int64
	if first > 0 && w.place > 0 {
		progress = min((first-w.place)*100/first, 99)
	}
	lang := Lang(ctx.Request.Header.Peek(fasthttp.HeaderAcceptLanguage))
	retry := (w.retryMs + 999) / 1000
	h := &ctx.Response.Header
	h.Set(fasthttp.HeaderCacheControl, "no-store")
	h.Set(fasthttp.HeaderRetryAfter, strconv.FormatInt(retry, 10))
	etaS := int64(-1)
	if w.etaMs >= 0 {
		etaS = (w.etaMs + 999) / 1000
	}
	if poll := len(ctx.Request.Header.Peek(PollHeader)) > 0; poll || wantsJSON(ctx) {
		b := append([]byte(nil), `{"room":`...)
		b = strconv.AppendQuote(b, rm.cfg.Name)
		b = append(b, `,"status":"`...)
		b = append(b, w.status...)
		b = append(b, `","place":`...)
		b = strconv.AppendInt(b, w.place, 10)
		b = append(b, `,"ahead":`...)
		b = strconv.AppendInt(b, max(w.place-1, 0), 10)
		b = append(b, `,"etaMs":`...)
		b = strconv.AppendInt(b, w.etaMs, 10)
		b = append(b, `,"eta":`...)
		b = strconv.AppendQuote(b, etaWords(lang, w.etaMs))
		b = append(b, `,"progress":`...)
		b = strconv.AppendInt(b, progress, 10)
		b = append(b, `,"retryAfter":`...)
		b = strconv.AppendInt(b, retry, 10)
		b = append(b, `,"retryMs":`...)
		b = strconv.AppendInt(b, w.retryMs, 10)
		if w.lottery {
			// Checkable: her score is HMAC-SHA256(key, id) once the key is
			// out, and SHA-256(key) the commit shown now.
			b = append(b, `,"id":"`...)
			b = v.id.AppendHex(b)
			b = append(b, '"')
			if i := rm.live.info.Load(); i != nil && i.LotteryCommit != "" {
				b = append(b, `,"lotteryCommit":"`...)
				b = append(b, i.LotteryCommit...)
				b = append(b, '"')
			}
		}
		if i := rm.live.info.Load(); i != nil && i.LotteryKey != "" {
			b = append(b, `,"lotteryKey":"`...) // the last finished draw's
			b = append(b, i.LotteryKey...)
			b = append(b, '"')
		}
		b = append(b, '}')
		status := fasthttp.StatusServiceUnavailable // an API client must not take it for the route's answer
		if poll {
			status = fasthttp.StatusOK
		}
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
		return
	}
	var out bytes.Buffer
	err := w.page.render(&out, PageData{Room: rm.cfg.Title, Status: w.status, Place: w.place, Ahead: max(w.place-1, 0),
		ETA: etaWords(lang, w.etaMs), ETASeconds: etaS, Progress: progress, Lang: lang, PollMs: rm.cfg.Poll.Milliseconds()})
	if err != nil {
		rm.log.Warn("route room: page template failed", "room", rm.cfg.Name, "err", err)
	}
	rm.writePage(ctx, fasthttp.StatusOK, out.Bytes())
}

func (rm *Room) writePage(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/html; charset=utf-8")
	h := &ctx.Response.Header
	h.Set(fasthttp.HeaderCacheControl, "no-store")
	// The page asks nothing of anyone but this edge.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; worker-src 'self'; connect-src 'self'; img-src 'self' data:")
	h.Set(fasthttp.HeaderVary, "Accept, Accept-Language")
	ctx.SetBody(body)
}

func (rm *Room) answerAdmitted(ctx *fasthttp.RequestCtx, v *Visit) {
	rm.setPass(ctx, v)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	b := append([]byte(nil), `{"room":`...)
	b = strconv.AppendQuote(b, rm.cfg.Name)
	b = append(b, `,"status":"admitted","untilMs":`...)
	b = strconv.AppendInt(b, v.passTo, 10)
	b = append(b, '}')
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (rm *Room) answerClosed(ctx *fasthttp.RequestCtx) {
	if wantsJSON(ctx) || len(ctx.Request.Header.Peek(PollHeader)) > 0 {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetContentType("application/json")
		ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
		ctx.SetBody(append(strconv.AppendQuote([]byte(`{"room":`), rm.cfg.Name), `,"status":"closed"}`...))
		return
	}
	lang := Lang(ctx.Request.Header.Peek(fasthttp.HeaderAcceptLanguage))
	var out bytes.Buffer
	if err := rm.page.render(&out, PageData{Room: rm.cfg.Title, Status: "closed", ETASeconds: -1, Lang: lang, PollMs: rm.cfg.Poll.Milliseconds()}); err != nil {
		rm.log.Warn("route room: page template failed", "room", rm.cfg.Name, "err", err)
	}
	rm.writePage(ctx, fasthttp.StatusServiceUnavailable, out.Bytes())
}

func (rm *Room) setPass(ctx *fasthttp.RequestCtx, v *Visit) {
	var payload [passPayload]byte
	copy(payload[:], v.id[:])
	binary.BigEndian.PutUint64(payload[room.IDLen:], uint64(v.checkAt))
	p := rm.passes.Seal(nil, payload[:], visitorUser, rm.name, v.passTo)
	rm.setCookie(ctx, p, ticketLife)
}

func (rm *Room) setCookie(ctx *fasthttp.RequestCtx, value []byte, life time.Duration) {
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKeyBytes(rm.cookie)
	c.SetValueBytes(value)
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteLaxMode)
	c.SetSecure(rm.secure)
	c.SetMaxAge(int(life.Seconds()))
	ctx.Response.Header.SetCookie(c)
}

func (rm *Room) expireCookie(ctx *fasthttp.RequestCtx) {
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKeyBytes(rm.cookie)
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteLaxMode)
	c.SetSecure(rm.secure)
	c.SetExpire(fasthttp.CookieExpireDelete)
	ctx.Response.Header.SetCookie(c)
}

// The methods as the hot path compares them.
const (
	methodFIFO uint32 = iota
	methodRandom
	methodPassthrough
	methodReject
	methodQueueAll
	// methodPrequeue is an event's shuffled pre-queue: nobody let in, the
	// places drawn by the lottery's score. The edge's, not the operator's.
	methodPrequeue
)

const methodPrequeueName = "prequeue"

func methodName(m uint32) string {
	if m == methodPrequeue {
		return methodPrequeueName
	}
	return conf.RoomMethods[m]
}

func methodIndex(m string) uint32 {
	for i, x := range conf.RoomMethods {
		if x == m {
			return uint32(i)
		}
	}
	return methodFIFO
}

// Results this edge counts per room.
const (
	resPass = iota
	resRenew
	resAdmitted
	resWaiting
	resBypass
	resClosed
	resOver
	resEnded
	resError
	resBadChallenge
	numResults
)

var resultNames = [numResults]string{"pass", "renewed", "admitted", "waiting", "bypass", "closed", "session_over", "ended_by_origin", "error", "bad_challenge"}

// Live is a room's state that outlives reloads: the method in force (read
// from Redis every tick and after each visit), the counts Redis last
// answered and this edge's own counters.
type Live struct {
	// override is the operator's method from Redis, index+1 (0: none);
	// method the method in force as this edge last decided it.
	override atomic.Uint32
	method   atomic.Uint32
	cfg      atomic.Pointer[stock.RouteRoom]
	waiting  atomic.Int64
	active   atomic.Int64
	info     atomic.Pointer[stock.RouteRoomInfo]
	results  [numResults]metrics.Counter
	// wait is how long the visitors this edge let in had waited.
	wait *metrics.Histogram
	// win is the last minute's figures, fed by Tend.
	win *window

	// waiters are the waiting visitors whose request this edge may hold,
	// woken when a seat is reserved for them (Registry.deliver); held
	// counts the requests held now (maxHeld bounds it).
	wmu     sync.Mutex
	waiters map[room.ID]chan struct{}
	held    atomic.Int64
	holds   [2]metrics.Counter // held requests ended: woken, timed out
	// ended holds the visitors whose session the origin ended (on any
	// edge), with when this edge learnt it, for a recheck interval: a pass
	// issued before then goes to Redis instead of in from memory. nEnded
	// is its size, so that the admitted path reads no lock while it is
	// empty; recheckMs the room's recheck.
	// lkey is the running lottery draw's key as this edge last read it
	// (nil: none, or not read yet).
	lkey atomic.Pointer[[]byte]

	emu       sync.RWMutex
	ended     map[room.ID]int64
	nEnded    atomic.Int64
	recheckMs atomic.Int64
}

// await registers a waiting visitor's wake-up (nil: another request of
// hers has it already); unawait removes it.
func (l *Live) await(id room.ID) chan struct{} {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if _, dup := l.waiters[id]; dup {
		return nil
	}
	if l.waiters == nil {
		l.waiters = map[room.ID]chan struct{}{}
	}
	c := make(chan struct{}, 1)
	l.waiters[id] = c
	return c
}

func (l *Live) unawait(id room.ID, c chan struct{}) {
	l.wmu.Lock()
	if l.waiters[id] == c {
		delete(l.waiters, id)
	}
	l.wmu.Unlock()
}

// wake tells a visitor's held request that a seat was reserved for her.
func (l *Live) wake(id room.ID) {
	l.wmu.Lock()
	c := l.waiters[id]
	l.wmu.Unlock()
	if c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// hold takes one of the room's held requests if fewer than most are held.
func (l *Live) hold(most int64) bool {
	if l.held.Add(1) > most {
		l.held.Add(-1)
		return false
	}
	return true
}

// markEnded notes that visitor id's session ended at atMs.
func (l *Live) markEnded(id room.ID, atMs int64) {
	l.emu.Lock()
	if l.ended == nil {
		l.ended = map[room.ID]int64{}
	}
	if _, ok := l.ended[id]; !ok {
		l.nEnded.Add(1)
	}
	l.ended[id] = max(l.ended[id], atMs)
	l.emu.Unlock()
}

// endedBefore: visitor id's session ended after a pass whose check is due
// at checkMs was issued (it was issued at checkMs − recheck at the latest).
// Without an allocation: the admitted path asks it.
func (l *Live) endedBefore(id room.ID, checkMs int64) bool {
	if l.nEnded.Load() == 0 {
		return false
	}
	l.emu.RLock()
	at, ok := l.ended[id]
	l.emu.RUnlock()
	return ok && checkMs <= at+l.recheckMs.Load()
}

// pruneEnded forgets the ends whose every earlier pass is due for its check.
func (l *Live) pruneEnded(nowMs int64) {
	if l.nEnded.Load() == 0 {
		return
	}
	keep := l.recheckMs.Load()
	l.emu.Lock()
	for id, at := range l.ended {
		if at+keep < nowMs {
			delete(l.ended, id)
			l.nEnded.Add(-1)
		}
	}
	l.emu.Unlock()
}

// waitBounds are the wait histogram's buckets, in seconds.
var (
	waitBoundsArr = [...]float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}
	waitBounds    = waitBoundsArr[:]
)

func newLive(rr stock.RouteRoom) *Live {
	l := &Live{wait: metrics.NewHistogram(waitBounds), win: newWindow()}
	l.cfg.Store(&rr)
	l.method.Store(methodIndex(rr.Method))
	return l
}

// Method is the method in force as this edge last read it.
func (l *Live) Method() uint32 { return l.method.Load() }

func (l *Live) config() stock.RouteRoom { return *l.cfg.Load() }

func (l *Live) count(r int) { l.results[r].Inc() }

func (l *Live) observe(a stock.VisitAnswer) {
	if a.Status == stock.VisitWaiting {
		l.waiting.Store(a.Waiting)
	}
}

func (l *Live) apply(info *stock.RouteRoomInfo) {
	var o uint32
	if info.MethodSet {
		o = methodIndex(info.Method) + 1
	}
	l.override.Store(o)
	info.LotteryCommit = ""
	l.lkey.Store(nil)
	if k, err := hex.DecodeString(info.Key); err == nil && len(k) > 0 {
		info.LotteryCommit = room.Commit(info.Key)
		l.lkey.Store(&k)
	}
	l.waiting.Store(info.Waiting)
	l.active.Store(info.Active)
	l.info.Store(info)
}

// Registry holds every room's Live state by name, for the process's life.
type Registry struct {
	mu    sync.Mutex
	rooms map[string]*Live
	store *stock.Store
	log   *slog.Logger
	now   func() int64
}

// NewRegistry returns an empty registry; Tend reads the rooms through store.
func NewRegistry(store *stock.Store, log *slog.Logger, now func() int64) *Registry {
	return &Registry{rooms: map[string]*Live{}, store: store, log: log, now: now}
}

func (r *Registry) ensure(rr stock.RouteRoom) *Live {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.rooms[rr.Name]
	if l == nil {
		l = newLive(rr)
		r.rooms[rr.Name] = l
	}
	l.cfg.Store(&rr)
	return l
}

func (r *Registry) list() map[string]*Live {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]*Live, len(r.rooms))
	for k, v := range r.rooms {
		out[k] = v
	}
	return out
}

// Tend reads every room's state (the operator's method above all) into
// the edge's memory: an admitted visitor's pass is checked against it, so
// a switch to reject or queue_all reaches every edge within one tick.
func (r *Registry) Tend(ctx context.Context) {
	if r.store == nil {
		return
	}
	nowMs := r.now() / 1e6
	for name, l := range r.list() {
		info, err := r.store.RouteAdmin(ctx, l.config(), l.drawChange(), nowMs)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("route room: state not read", "room", name, "err", err)
			}
			continue
		}
		l.apply(&info)
		l.win.add(nowMs, &info, l.wait)
		l.pruneEnded(nowMs)
	}
}

// drawChange is what Tend asks of the lottery: a key for a draw that runs
// (random, a shuffled pre-queue) and has none; the key revealed when the
// draw is over (the method in force is another).
func (l *Live) drawChange() stock.RouteChange {
	m := l.method.Load()
	if o := l.override.Load(); o != 0 {
		m = o - 1
	}
	drawing := m == methodRandom || m == methodPrequeue
	var c stock.RouteChange
	switch i := l.info.Load(); {
	case drawing && l.lkey.Load() == nil:
		c.DrawKey, _ = room.NewKey()
	case !drawing && i != nil && i.Key != "":
		c.EndDraw = true
	}
	return c
}

// names are the rooms' names (the channels a cluster follows).
func (r *Registry) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.rooms))
	for n := range r.rooms {
		out = append(out, n)
	}
	return out
}

// deliver is a room broadcast: a seat reserved for visitor id (her held
// request, if this edge holds it, goes on) or her session ended.
func (r *Registry) deliver(name, id string, ended bool) {
	r.mu.Lock()
	l := r.rooms[name]
	r.mu.Unlock()
	v, ok := room.ParseID(id)
	if l == nil || !ok {
		return
	}
	if ended {
		l.markEnded(v, r.now()/1e6)
		return
	}
	l.wake(v)
}

// Stats is a room's figures over the last minute, as this edge's Tend
// last computed them (the zero Stats, and false, for no such room).
func (r *Registry) Stats(name string) (Stats, bool) {
	r.mu.Lock()
	l := r.rooms[name]
	r.mu.Unlock()
	if l == nil {
		return Stats{}, false
	}
	return l.win.stats(), true
}

// Run listens to the rooms' broadcasts (seats reserved, sessions ended)
// and tends the rooms every tick until ctx ends. A broadcast lost (Redis
// unreachable a while) costs time, not a promise: a woken visitor's held
// request asks again when its hold runs out, and an ended pass fails at
// its next check.
func (r *Registry) Run(ctx context.Context, tick time.Duration) {
	if r.store != nil {
		sub := r.store.SubscribeRouteRooms(ctx, stock.Follow{Products: r.names}, r.deliver)
		defer sub.Stop()
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Tend(ctx)
		}
	}
}

// RegisterMetrics adds the flashgate_route_room_* series.
func (r *Registry) RegisterMetrics(reg *metrics.Registry) {
	each := func(f func(w *metrics.Writer, name string, l *Live)) func(w *metrics.Writer) {
		return func(w *metrics.Writer) {
			for name, l := range r.list() {
				f(w, name, l)
			}
		}
	}
	label := func(n string) metrics.Label { return metrics.Label{Name: "room", Value: n} }
	reg.Register("flashgate_route_room_waiting", "Visitors waiting in a route's room, as this edge last read it.", "gauge",
		each(func(w *metrics.Writer, n string, l *Live) { w.Value(float64(l.waiting.Load()), label(n)) }))
	reg.Register("flashgate_route_room_active", "Admitted visitors whose session runs, as this edge last read it.", "gauge",
		each(func(w *metrics.Writer, n string, l *Live) { w.Value(float64(l.active.Load()), label(n)) }))
	reg.Register("flashgate_route_room_held", "Waiting visitors' requests this edge holds until their seat frees (at most max(16, min(max_active, 1024)) a room).", "gauge",
		each(func(w *metrics.Writer, n string, l *Live) { w.Value(float64(l.held.Load()), label(n)) }))
	reg.Register("flashgate_route_room_holds_total", "Held requests ended: woken (a seat was reserved for the visitor, on any edge) or timed_out (the hold ran out).", "counter",
		each(func(w *metrics.Writer, n string, l *Live) {
			w.Value(float64(l.holds[0].Value()), label(n), metrics.Label{Name: "end", Value: "woken"})
			w.Value(float64(l.holds[1].Value()), label(n), metrics.Label{Name: "end", Value: "timed_out"})
		}))
	reg.Register("flashgate_route_room_method", "The queueing method in force (1 for the method's label).", "gauge",
		each(func(w *metrics.Writer, n string, l *Live) {
			w.Value(1, label(n), metrics.Label{Name: "method", Value: methodName(l.Method())})
		}))
	fleet := func(name, help string, v func(i *stock.RouteRoomInfo) int64) {
		reg.Register(name, help+" Counted in Redis for every edge (the same on each), as this edge last read it.", "counter",
			each(func(w *metrics.Writer, n string, l *Live) {
				if i := l.info.Load(); i != nil {
					w.Value(float64(v(i)), label(n))
				}
			}))
	}
	fleet("flashgate_route_room_joined_total", "Visitors who joined a route room's queue.", func(i *stock.RouteRoomInfo) int64 { return i.Joined })
	fleet("flashgate_route_room_admitted_total", "Visitors let in.", func(i *stock.RouteRoomInfo) int64 { return i.Admitted })
	fleet("flashgate_route_room_abandoned_total", "Waiting visitors who stopped polling and lost their place.", func(i *stock.RouteRoomInfo) int64 { return i.Abandoned })
	fleet("flashgate_route_room_ended_total", "Sessions the origin ended with its end header.", func(i *stock.RouteRoomInfo) int64 { return i.Ended })
	fleet("flashgate_route_room_over_limit_total", "Visitors passthrough let in whom the rules would have queued.", func(i *stock.RouteRoomInfo) int64 { return i.Overlimit })
	reg.Register("flashgate_route_room_wait_seconds", "How long the visitors this edge let in had waited (from their first queue answer).", "histogram",
		each(func(w *metrics.Writer, n string, l *Live) { w.Histogram(l.wait, label(n)) }))
	window := func(name, help string, v func(s Stats) float64) {
		reg.Register(name, help+" Over the last minute, as this edge's tick last computed it.", "gauge",
			each(func(w *metrics.Writer, n string, l *Live) { w.Value(v(l.win.stats()), label(n)) }))
	}
	window("flashgate_route_room_admitted_per_minute", "Visitors let in a minute (every edge's).", func(s Stats) float64 { return s.AdmittedPerMin })
	window("flashgate_route_room_abandon_ratio", "Of the visitors who left the line, the share who abandoned it (-1: nobody left).", func(s Stats) float64 { return s.AbandonRate })
	window("flashgate_route_room_wait_avg_seconds", "The average wait of the visitors this edge let in (-1: none).", func(s Stats) float64 { return s.WaitAvgS })
	window("flashgate_route_room_wait_p90_seconds", "The p90 wait of the visitors this edge let in (-1: none).", func(s Stats) float64 { return s.WaitP90S })
	reg.Register("flashgate_route_room_requests_total", "Requests on a route room's route on this edge, by what the room did.", "counter",
		each(func(w *metrics.Writer, n string, l *Live) {
			for i := range l.results {
				w.Value(float64(l.results[i].Value()), label(n), metrics.Label{Name: "result", Value: resultNames[i]})
			}
		}))
}

// Snapshot is every room's state for the admin API.
func (r *Registry) Snapshot() map[string]stock.RouteRoomInfo {
	out := map[string]stock.RouteRoomInfo{}
	for name, l := range r.list() {
		if i := l.info.Load(); i != nil {
			out[name] = *i
		}
	}
	return out
}
