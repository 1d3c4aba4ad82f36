package stock

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"flashgate/conf"
)

// A route's waiting room (package proxy/routeroom decides what a request
// gets, this file keeps the room): the waiting visitors, the admitted ones
// and the admission rate's bucket, under the room's hash tag (keys.go:
// routeRoomKeys). One script call per waiting visitor's request, one per
// admitted visitor's pass check; an admitted visitor between checks costs
// Redis nothing.
var (
	//go:embed lua/route_room_seats.lua
	routeSeatsLua string
	//go:embed lua/route_room_visit.lua
	routeVisitLua string
	//go:embed lua/route_room_renew.lua
	routeRenewLua string
	//go:embed lua/route_room_end.lua
	routeEndLua string
	//go:embed lua/route_room_admin.lua
	routeAdminLua string

	routeVisitScript = rueidis.NewLuaScript(routeSeatsLua + routeVisitLua)
	routeRenewScript = rueidis.NewLuaScript(routeRenewLua)
	routeEndScript   = rueidis.NewLuaScript(routeSeatsLua + routeEndLua)
	routeAdminScript = rueidis.NewLuaScript(routeAdminLua)
)

// RouteRoom is what every call of one route room needs to know of its
// config; the operator's overrides in Redis win over Method, Rate and Cap.
type RouteRoom struct {
	Name      string
	Method    string
	Rate, Cap int64 // per minute (0: no bound); active (0: no cap)
	SessionMs int64
	AbandonMs int64
	// TTLMs is how long the room's keys live after the last call.
	TTLMs int64
}

func (r *RouteRoom) check() error {
	if !conf.ValidRoomName(r.Name) {
		return fmt.Errorf("%w: route room %q", ErrInvalid, r.Name)
	}
	if r.SessionMs <= 0 || r.TTLMs <= 0 || r.AbandonMs <= 0 {
		return fmt.Errorf("%w: route room %q without session, abandon or ttl", ErrInvalid, r.Name)
	}
	return nil
}

// Visit outcomes.
const (
	VisitWaiting     = 0
	VisitAdmitted    = 1
	VisitPassthrough = 2
	// VisitReplayed: the proof of work the visit came with was spent
	// already; nothing was written.
	VisitReplayed = 3
)

// VisitAnswer is a visit's outcome and the room as the script saw it.
type VisitAnswer struct {
	Status  int
	UntilMs int64 // the session's end (admitted)
	Place   int64 // 1: the next (waiting)
	// Credit is what the rate lets in now (-1: no bound); SeatMs, when the
	// cap holds the place, how long until its seat frees.
	Credit, Rate, Active, Cap, SeatMs, Waiting int64
	Method                                     string
}

// RouteVisit is one request of visitor id (16 hex digits) at the room at
// nowMs: joins, admits or answers the place; score is the id's lottery
// score, used by the random method.
func (s *Store) RouteVisit(ctx context.Context, r RouteRoom, id string, score float64, nowMs int64) (VisitAnswer, error) {
	return s.RouteVisitSpending(ctx, r, id, score, nowMs, "", 0)
}

// RouteVisitSpending is RouteVisit for a new visitor who solved a proof of
// work: in the same call it spends challengeID (sk:room:{r}:c:<id>, kept
// until expiresMs) and answers VisitReplayed, writing nothing else, when
// it was spent already. challengeID "" spends nothing. The key lives
// expiresMs − nowMs on Redis's clock (the challenge's own check is the
// edge's).
func (s *Store) RouteVisitSpending(ctx context.Context, r RouteRoom, id string, score float64, nowMs int64, challengeID string, expiresMs int64) (VisitAnswer, error) {
	if err := r.check(); err != nil {
		return VisitAnswer{}, err
	}
	if !validVisitor(id) {
		return VisitAnswer{}, fmt.Errorf("%w: visitor %q", ErrInvalid, id)
	}
	k := routeRoomKeys(r.Name)
	keys := []string{k.State, k.Queue, k.Seen, k.Active, k.Since}
	if challengeID != "" {
		if !validChallengeID(challengeID) || expiresMs <= nowMs {
			return VisitAnswer{}, fmt.Errorf("%w: challenge %q until %d", ErrInvalid, challengeID, expiresMs)
		}
		keys = append(keys, routeRoomChallengeKey(r.Name, challengeID))
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	vals, err := routeVisitScript.Exec(cctx, s.c, keys,
		[]string{i64(nowMs), id, strconv.FormatFloat(score, 'f', -1, 64), i64(r.Rate), i64(r.Cap), i64(r.SessionMs),
			i64(r.AbandonMs), r.Method, i64(r.TTLMs), i64(expiresMs - nowMs)}).ToArray()
	if err == nil && len(vals) != 11 {
		err = errors.New("unexpected reply")
	}
	var n [9]int64
	for i := 0; err == nil && i < len(n); i++ {
		n[i], err = vals[i].AsInt64()
	}
	var a VisitAnswer
	if err == nil {
		a.Method, err = vals[9].ToString()
	}
	if err != nil {
		return VisitAnswer{}, fmt.Errorf("stock: route room visit: %w", err)
	}
	a.Status, a.UntilMs, a.Place, a.Credit, a.Rate, a.Active, a.Cap, a.SeatMs, a.Waiting =
		int(n[0]), n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8]
	if woken, err := vals[10].AsStrSlice(); err == nil && len(woken) > 0 {
		s.publishRoute(cctx, r.Name, "", woken)
	}
	return a, nil
}

// publishRoute tells every edge (SubscribeRouteRooms) that the origin
// ended visitor ended's session ("" for none) and that seats were reserved
// for the visitors woken: one message "<room> e<id> w<id> w<id>...". A lost
// broadcast costs time, not correctness: a woken visitor claims the seat
// at her next request, an ended pass fails at its next check.
func (s *Store) publishRoute(ctx context.Context, name, ended string, woken []string) {
	b := make([]byte, 0, len(name)+18*(len(woken)+1))
	b = append(b, name...)
	if ended != "" {
		b = append(b, " e"...)
		b = append(b, ended...)
	}
	for _, w := range woken {
		b = append(b, " w"...)
		b = append(b, w...)
	}
	// The reservations and the end are written: only the wake-up is lost
	// if the broadcast fails.
	_ = s.c.Do(ctx, s.publishCmd(routeRoomKind, name, string(b))).Error()
}

// SubscribeRouteRooms calls fn for each visitor a route room's broadcast
// names: ended, the origin ended her session; else a seat was reserved for
// her. fol.Products names the rooms (on a cluster, a channel each). As
// SubscribeSoldOut, it waits at most until ctx is done for the channels.
func (s *Store) SubscribeRouteRooms(ctx context.Context, fol Follow, fn func(room, id string, ended bool)) *Subscription {
	return s.subscribe(ctx, &s.routeRoomSubs, routeRoomKind, fol, func(msg string) {
		name, rest, _ := strings.Cut(msg, " ")
		for rest != "" {
			var f string
			f, rest, _ = strings.Cut(rest, " ")
			if len(f) == 17 && (f[0] == 'e' || f[0] == 'w') && validVisitor(f[1:]) {
				fn(name, f[1:], f[0] == 'e')
			}
		}
	})
}

// RouteRenew checks an admitted visitor's session at nowMs and, with
// newUntilMs > 0, extends it to then; it answers the session's end, 0 when
// it is over (expired, or ended by the origin).
func (s *Store) RouteRenew(ctx context.Context, r RouteRoom, id string, nowMs, newUntilMs int64) (int64, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	if !validVisitor(id) {
		return 0, fmt.Errorf("%w: visitor %q", ErrInvalid, id)
	}
	k := routeRoomKeys(r.Name)
	cctx, cancel := s.call(ctx)
	defer cancel()
	u, err := routeRenewScript.Exec(cctx, s.c, []string{k.Active, k.State},
		[]string{i64(nowMs), id, i64(newUntilMs), i64(r.TTLMs)}).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("stock: route room renew: %w", err)
	}
	return u, nil
}

// RouteEnd ends a visitor's session at nowMs (the origin said so); false:
// it was not running. The seat goes in the same call to the next in line,
// reserved until they ask again (RouteVisit claims it), and its occupancy
// counts in the mean that a capped place's estimate comes from. Every
// edge is told (SubscribeRouteRooms): the end, and whom to wake.
func (s *Store) RouteEnd(ctx context.Context, r RouteRoom, id string, nowMs int64) (bool, error) {
	if err := r.check(); err != nil {
		return false, err
	}
	if !validVisitor(id) {
		return false, fmt.Errorf("%w: route room %q visitor %q", ErrInvalid, r.Name, id)
	}
	k := routeRoomKeys(r.Name)
	cctx, cancel := s.call(ctx)
	defer cancel()
	vals, err := routeEndScript.Exec(cctx, s.c, []string{k.Active, k.State, k.Queue, k.Seen, k.Since},
		[]string{id, i64(nowMs), i64(r.Rate), i64(r.Cap), i64(r.AbandonMs), r.Method}).ToArray()
	var n int64
	if err == nil && len(vals) == 0 {
		err = errors.New("unexpected reply")
	}
	if err == nil {
		n, err = vals[0].AsInt64()
	}
	woken := make([]string, 0, len(vals))
	for i := 1; err == nil && i < len(vals); i++ {
		var w string
		w, err = vals[i].ToString()
		woken = append(woken, w)
	}
	if err != nil {
		return false, fmt.Errorf("stock: route room end: %w", err)
	}
	if n == 1 {
		s.publishRoute(cctx, r.Name, id, woken)
	}
	return n == 1, nil
}

// RouteRoomInfo is a route room's state: the operator's overrides ("" or
// -1: the config's) and the counters.
type RouteRoomInfo struct {
	Method string `json:"method"`
	// MethodSet: Method is the operator's (in Redis), not the config's.
	MethodSet bool  `json:"methodSet"`
	Rate      int64 `json:"admitPerMinute"`
	Cap       int64 `json:"maxActive"`
	Waiting   int64 `json:"waiting"`
	Active    int64 `json:"active"`
	Joined    int64 `json:"joined"`
	Admitted  int64 `json:"admitted"`
	Abandoned int64 `json:"abandoned"`
	Ended     int64 `json:"ended"`
	Overlimit int64 `json:"overLimit"` // passthrough visitors the rules would have queued
	// The lottery (methods random and an event's shuffled pre-queue):
	// LotteryCommit is SHA-256 of the running draw's key (hex, set by the
	// edge: room.Commit), public while it runs; LotteryKey the last
	// finished draw's key, revealed. Key is the running draw's key, the
	// edges' own (never shown).
	LotteryCommit string `json:"lotteryCommit,omitempty"`
	LotteryKey    string `json:"lotteryKey,omitempty"`
	Key           string `json:"-"`
}

// RouteChange is an operator's change of a room: "" and nil keep a
// setting; a -1 rate or cap, and the method "-", go back to the config's.
type RouteChange struct {
	Method    string
	Rate, Cap *int64
	// DrawKey is a lottery key (hex, room.NewKey) for the draw if it has
	// none yet; EndDraw reveals the draw's key (the draw is over).
	DrawKey string
	EndDraw bool
}

// RouteAdmin applies change (the zero change only reads) and answers the
// room's state, with the config's value where there is no override.
func (s *Store) RouteAdmin(ctx context.Context, r RouteRoom, change RouteChange, nowMs int64) (RouteRoomInfo, error) {
	if !conf.ValidRoomName(r.Name) {
		return RouteRoomInfo{}, fmt.Errorf("%w: route room %q", ErrInvalid, r.Name)
	}
	num := func(p *int64, max int64) (string, error) {
		switch {
		case p == nil:
			return "", nil
		case *p == -1 || (*p >= 0 && *p <= max):
			return i64(*p), nil
		}
		return "", fmt.Errorf("%w: %d is not -1 (the config's) or 0..%d", ErrInvalid, *p, max)
	}
	rate, err := num(change.Rate, 10_000_000)
	if err != nil {
		return RouteRoomInfo{}, err
	}
	capArg, err := num(change.Cap, 100_000_000)
	if err != nil {
		return RouteRoomInfo{}, err
	}
	k := routeRoomKeys(r.Name)
	cctx, cancel := s.call(ctx)
	defer cancel()
	if change.DrawKey != "" && !validLotteryKey(change.DrawKey) {
		return RouteRoomInfo{}, fmt.Errorf("%w: lottery key", ErrInvalid)
	}
	end := ""
	if change.EndDraw {
		end = "1"
	}
	vals, err := routeAdminScript.Exec(cctx, s.c, []string{k.State, k.Queue, k.Active},
		[]string{i64(nowMs), change.Method, rate, capArg, i64(max(r.TTLMs, 1)), change.DrawKey, end}).ToArray()
	if err == nil && len(vals) != 12 {
		err = errors.New("unexpected reply")
	}
	var str [3]string
	for i := 0; err == nil && i < 3; i++ {
		str[i], err = vals[i].ToString()
	}
	var n [7]int64
	for i := 0; err == nil && i < len(n); i++ {
		n[i], err = vals[3+i].AsInt64()
	}
	var lot [2]string
	for i := 0; err == nil && i < 2; i++ {
		lot[i], err = vals[10+i].ToString()
	}
	if err != nil {
		return RouteRoomInfo{}, fmt.Errorf("stock: route room admin: %w", err)
	}
	info := RouteRoomInfo{Key: lot[0], LotteryKey: lot[1], Method: str[0], Rate: r.Rate, Cap: r.Cap, Waiting: n[0], Active: n[1], Joined: n[2],
		Admitted: n[3], Abandoned: n[4], Ended: n[5], Overlimit: n[6]}
	info.MethodSet = info.Method != ""
	if !info.MethodSet {
		info.Method = r.Method
	}
	if str[1] != "" {
		info.Rate, _ = strconv.ParseInt(str[1], 10, 64)
	}
	if str[2] != "" {
		info.Cap, _ = strconv.ParseInt(str[2], 10, 64)
	}
	return info, nil
}

// validLotteryKey: 64 lower-case hex digits (32 bytes).
func validLotteryKey(k string) bool {
	b, err := hex.DecodeString(k)
	return err == nil && len(b) == 32 && hex.EncodeToString(b) == k
}

// validVisitor: a visitor id is 16 lower-case hex digits.
func validVisitor(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
