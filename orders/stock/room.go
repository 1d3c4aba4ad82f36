package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// A sale's waiting room (package sale/room decides, this file keeps).
// Every key is under the product's hash tag, so each script is one slot
// (keys.go lists them: roomKey and the room*Key builders).
//
// All of them expire with the sale (RoomKeys.ExpireAtMs). They are not part
// of the embedded server's snapshot: a restarted demo forgets its queue.
var (
	// place() of room_place_fn.lua is prepended to the two scripts that
	// answer a place, so the rule is written once.
	//go:embed lua/room_place_fn.lua
	wrPlaceFnLua string
	//go:embed lua/room_join.lua
	wrJoinLua string
	//go:embed lua/room_place.lua
	wrPlaceLua string
	//go:embed lua/room_freeze.lua
	wrFreezeLua string
	//go:embed lua/room_key.lua
	wrKeyLua string
	//go:embed lua/room_admin.lua
	wrAdminLua string
	//go:embed lua/room_finish.lua
	wrFinishLua string

	wrJoinScript   = rueidis.NewLuaScript(wrPlaceFnLua + wrJoinLua)
	wrPlaceScript  = rueidis.NewLuaScript(wrPlaceFnLua + wrPlaceLua)
	wrFreezeScript = rueidis.NewLuaScript(wrFreezeLua)
	wrKeyScript    = rueidis.NewLuaScript(wrKeyLua)
	wrAdminScript  = rueidis.NewLuaScript(wrAdminLua)
	wrFinishScript = rueidis.NewLuaScript(wrFinishLua)
)

// RoomSale is what every room call needs to know of the sale.
type RoomSale struct {
	Product string
	// StartMs is the sale's start (the opening); RatePerMinute the
	// configured admission rate, until the operator changes it in Redis.
	StartMs, RatePerMinute int64
	// ExpireAtMs is when the room's keys expire (unix ms): the sale's end
	// plus a grace, so that nobody joins again after the keys are gone.
	ExpireAtMs int64
}

func (r *RoomSale) check() error {
	if err := checkProduct(r.Product); err != nil {
		return err
	}
	if r.ExpireAtMs <= 0 {
		return fmt.Errorf("%w: room of %q without expiry", ErrInvalid, r.Product)
	}
	return nil
}

// JoinResult is a join's outcome.
type JoinResult int

const (
	Joined        JoinResult = 1
	JoinedBefore  JoinResult = 0
	RoomClosed    JoinResult = -1
	ChallengeUsed JoinResult = -2
)

// Join is one shopper's join.
type Join struct {
	User string
	// ID is the ticket id to give if the shopper has none (hex).
	ID string
	// Key and Commit: a lottery key to keep if the room has none yet.
	Key, Commit string
	// ChallengeID, if not "", is the proof of work's id: used once, and
	// remembered until ChallengeExpiresMs.
	ChallengeID        string
	ChallengeExpiresMs int64
	NowMs              int64
	Lottery            bool
	// MaxActive and SessionMs admit the shopper at once if the line has
	// reached their place (as RoomPlace).
	MaxActive, SessionMs int64
}

// JoinAnswer is what Join returns: the shopper's ticket id and their place
// (Place.Seq 0: the pre-queue; else the FIFO sequence after it).
type JoinAnswer struct {
	Result JoinResult
	ID     string
	Place  RoomPlace
}

// RoomJoin gives the shopper their one ticket of the sale's room, or the one
// they have (JoinedBefore: nothing changed), and their place, in one script
// call.
func (s *Store) RoomJoin(ctx context.Context, r RoomSale, j Join) (JoinAnswer, error) {
	if err := r.check(); err != nil {
		return JoinAnswer{}, err
	}
	if !validRateClient(j.User) || j.ID == "" {
		return JoinAnswer{}, fmt.Errorf("%w: join of %q", ErrInvalid, j.User)
	}
	chal, chalKey := "0", roomChallengeKey(r.Product, "-")
	if j.ChallengeID != "" {
		if !validChallengeID(j.ChallengeID) {
			return JoinAnswer{}, fmt.Errorf("%w: challenge id %q", ErrInvalid, j.ChallengeID)
		}
		chal, chalKey = "1", roomChallengeKey(r.Product, j.ChallengeID)
	}
	lot := "0"
	if j.Lottery {
		lot = "1"
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	vals, err := wrJoinScript.Exec(cctx, s.c,
		[]string{roomKey(r.Product), roomUserKey(r.Product, j.User), roomPreKey(r.Product), chalKey,
			roomRankKey(r.Product), roomActiveKey(r.Product)},
		[]string{i64(j.NowMs), i64(r.StartMs), j.ID, j.Key, j.Commit, i64(r.ExpireAtMs), chal, lot, i64(j.ChallengeExpiresMs),
			i64(j.MaxActive), i64(j.SessionMs), i64(r.RatePerMinute)}).ToArray()
	var a JoinAnswer
	var res int64
	if err == nil && len(vals) == 0 {
		err = errors.New("unexpected reply")
	}
	if err == nil {
		res, err = vals[0].AsInt64()
	}
	if err == nil && (res == 0 || res == 1) {
		if len(vals) < 2 {
			err = errors.New("unexpected reply")
		} else if a.ID, err = vals[1].ToString(); err == nil {
			a.Place, err = placeOf(vals[2:])
		}
	}
	if err != nil {
		return JoinAnswer{}, fmt.Errorf("stock: room join: %w", err)
	}
	a.Result = JoinResult(res)
	return a, nil
}

// RoomPlace is a shopper's place and the room's state, from one script call.
type RoomPlace struct {
	// Found: the shopper has a ticket; Mismatch: the ticket id asked for is
	// not theirs.
	Found, Mismatch bool
	Seq, Place      int64
	// UntilMs: the admitted session's end (0: not admitted).
	UntilMs int64
	State   RoomState
}

// RoomState is the admission state every edge reads.
type RoomState struct {
	Frozen, Ranked     bool
	Members, Joined    int64
	Base, BaseMs, Rate int64
	Paused, Closed     bool
	Admitted           int64
	Active             int64 // RoomInfo only
	Key, Commit        string
}

// PlaceAsk is one look-up of a shopper's place.
type PlaceAsk struct {
	User string
	// ID: the ticket id the shopper holds (hex); "" does not check it.
	ID        string
	NowMs     int64
	MaxActive int64
	SessionMs int64
	// Held is the place the shopper's signed ticket carries (0: none); a
	// shopper the room forgot is put back at it (lua/room_place.lua).
	Held int64
	// Seen is the most tickets the edge has seen the room give (its
	// joined count): new joins are numbered past it after such a restore.
	Seen int64
}

// RoomPlace reads the shopper's place and admits them if the line reached
// it (and max_active leaves room), in one script call.
func (s *Store) RoomPlace(ctx context.Context, r RoomSale, q PlaceAsk) (RoomPlace, error) {
	if err := r.check(); err != nil {
		return RoomPlace{}, err
	}
	if !validRateClient(q.User) {
		return RoomPlace{}, fmt.Errorf("%w: user %q", ErrInvalid, q.User)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	vals, err := wrPlaceScript.Exec(cctx, s.c,
		[]string{roomKey(r.Product), roomUserKey(r.Product, q.User), roomRankKey(r.Product), roomActiveKey(r.Product), roomPreKey(r.Product)},
		[]string{i64(q.NowMs), q.ID, i64(q.MaxActive), i64(q.SessionMs), i64(r.ExpireAtMs), i64(r.StartMs), i64(r.RatePerMinute),
			i64(q.Held), i64(q.Seen)}).ToArray()
	if err != nil {
		return RoomPlace{}, fmt.Errorf("stock: room place: %w", err)
	}
	p, err := placeOf(vals)
	if err != nil {
		return RoomPlace{}, fmt.Errorf("stock: room place: %w", err)
	}
	return p, nil
}

// placeOf reads place()'s answer (lua/room_place_fn.lua).
func placeOf(vals []rueidis.RedisMessage) (RoomPlace, error) {
	var n [14]int64
	var err error
	for i := 0; i < len(vals) && i < len(n) && err == nil; i++ {
		n[i], err = vals[i].AsInt64()
	}
	if err != nil || (len(vals) != 1 && len(vals) != len(n)) {
		return RoomPlace{}, fmt.Errorf("unexpected reply (%d values, %v)", len(vals), err)
	}
	switch n[0] {
	case -1:
		return RoomPlace{}, nil
	case -2:
		return RoomPlace{Found: true, Mismatch: true}, nil
	}
	return RoomPlace{Found: true, Seq: n[1], Place: n[2], UntilMs: n[3], State: RoomState{
		Frozen: n[4] == 1, Members: n[5], Ranked: n[6] == 1, Base: n[7], BaseMs: n[8], Rate: n[9],
		Paused: n[10] == 1, Closed: n[11] == 1, Admitted: n[12], Joined: n[13]}}, nil
}

// RoomOpenPrequeue draws the lottery's key of a room whose pre-queue opened
// (once: the first edge's is kept) and returns the commit in force.
func (s *Store) RoomOpenPrequeue(ctx context.Context, r RoomSale, key, commit string) (string, error) {
	if err := r.check(); err != nil {
		return "", err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	c, err := wrKeyScript.Exec(cctx, s.c, []string{roomKey(r.Product)}, []string{key, commit, i64(r.ExpireAtMs)}).ToString()
	if err != nil {
		return "", fmt.Errorf("stock: room pre-queue: %w", err)
	}
	return c, nil
}

// Opening is the room's state at its opening (RoomFreeze).
type Opening struct {
	Members int64
	Key     string
	Ranked  bool
}

// RoomFreeze closes the pre-queue at the opening: it counts the members,
// keeps the lottery key (key, commit if none was drawn) and starts the
// admission line at the sale's start. Idempotent.
func (s *Store) RoomFreeze(ctx context.Context, r RoomSale, key, commit string) (Opening, error) {
	if err := r.check(); err != nil {
		return Opening{}, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	vals, err := wrFreezeScript.Exec(cctx, s.c, []string{roomKey(r.Product), roomPreKey(r.Product)},
		[]string{key, commit, i64(r.StartMs), i64(r.RatePerMinute), i64(r.ExpireAtMs)}).ToArray()
	if err == nil && len(vals) != 3 {
		err = errors.New("unexpected reply")
	}
	var o Opening
	var ranked int64
	if err == nil {
		o.Members, err = vals[0].AsInt64()
	}
	if err == nil {
		o.Key, err = vals[1].ToString()
	}
	if err == nil {
		ranked, err = vals[2].AsInt64()
	}
	if err != nil {
		return Opening{}, fmt.Errorf("stock: room opening: %w", err)
	}
	o.Ranked = ranked == 1
	return o, nil
}

// RoomPrequeue lists the pre-queue's ticket ids (after the opening they no
// longer change).
func (s *Store) RoomPrequeue(ctx context.Context, product string) ([]string, error) {
	if err := checkProduct(product); err != nil {
		return nil, err
	}
	ids, err := s.c.Do(ctx, s.c.B().Smembers().Key(roomPreKey(product)).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("stock: room pre-queue: %w", err)
	}
	return ids, nil
}

// RoomLockRanks takes the lock of the edge writing the lottery's ranks for
// ttl; false: another edge holds it.
func (s *Store) RoomLockRanks(ctx context.Context, product, owner string, ttl time.Duration) (bool, error) {
	if err := checkProduct(product); err != nil {
		return false, err
	}
	err := s.c.Do(ctx, s.c.B().Set().Key(roomLockKey(product)).Value(owner).Nx().PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stock: room lock: %w", err)
	}
	return true, nil
}

// RoomWriteRanks writes the lottery's result, place i+1 for ranked[i], and
// marks the room ranked. Idempotent: the ranks are a function of the key
// and the members, so two edges that both write them write the same.
func (s *Store) RoomWriteRanks(ctx context.Context, r RoomSale, ranked []string) error {
	if err := r.check(); err != nil {
		return err
	}
	key := roomRankKey(r.Product)
	const chunk = 1000
	for from := 0; from < len(ranked); from += chunk {
		to := min(from+chunk, len(ranked))
		z := s.c.B().Zadd().Key(key).ScoreMember()
		for i := from; i < to; i++ {
			z = z.ScoreMember(float64(i+1), ranked[i])
		}
		if err := s.c.Do(ctx, z.Build()).Error(); err != nil {
			return fmt.Errorf("stock: room ranks: %w", err)
		}
	}
	cmds := rueidis.Commands{
		s.c.B().Pexpireat().Key(key).MillisecondsTimestamp(r.ExpireAtMs).Build(),
		s.c.B().Hset().Key(roomKey(r.Product)).FieldValue().FieldValue("ranked", "1").Build(),
	}
	for _, resp := range s.c.DoMulti(ctx, cmds...) {
		if err := resp.Error(); err != nil {
			return fmt.Errorf("stock: room ranks: %w", err)
		}
	}
	return nil
}

// RoomRanking reads the lottery's result: the ticket ids in place order.
func (s *Store) RoomRanking(ctx context.Context, product string) ([]string, error) {
	if err := checkProduct(product); err != nil {
		return nil, err
	}
	ids, err := s.c.Do(ctx, s.c.B().Zrange().Key(roomRankKey(product)).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("stock: room ranking: %w", err)
	}
	return ids, nil
}

// RoomInfo reads the room's state for the operator and the lottery's page:
// counters, the admission line, the lottery's key and commit, and the
// shoppers active at nowMs.
func (s *Store) RoomInfo(ctx context.Context, product string, nowMs int64) (RoomState, bool, error) {
	if err := checkProduct(product); err != nil {
		return RoomState{}, false, err
	}
	resps := s.c.DoMulti(ctx,
		s.c.B().Hgetall().Key(roomKey(product)).Build(),
		s.c.B().Zcount().Key(roomActiveKey(product)).Min(strconv.FormatInt(nowMs, 10)).Max("+inf").Build())
	m, err := resps[0].AsStrMap()
	if err != nil {
		return RoomState{}, false, fmt.Errorf("stock: room state: %w", err)
	}
	active, err := resps[1].AsInt64()
	if err != nil {
		return RoomState{}, false, fmt.Errorf("stock: room active: %w", err)
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	st := RoomState{Frozen: m["frozen"] == "1", Ranked: m["ranked"] == "1", Members: num("members"),
		Joined: num("joined"), Base: num("base"), BaseMs: num("basems"), Rate: num("rate"),
		Paused: m["paused"] == "1", Closed: m["closed"] == "1", Admitted: num("admitted"), Active: active,
		Key: m["key"], Commit: m["commit"]}
	_, hasRate := m["rate"]
	_, hasBase := m["basems"]
	if !hasRate {
		st.Rate = -1
	}
	if !hasBase {
		st.BaseMs = -1
	}
	return st, len(m) > 0, nil
}

// RoomAction is an operator's change of the admission line.
type RoomAction string

const (
	RoomPause  RoomAction = "pause"
	RoomResume RoomAction = "resume"
	RoomClose  RoomAction = "close"
	RoomReopen RoomAction = "open"
	RoomRate   RoomAction = "rate"
)

// RoomAdmin applies an operator's action at nowMs (rate: the new rate per
// minute) and returns the line after it. The line is rebased at nowMs, so
// the places already let in stay let in.
func (s *Store) RoomAdmin(ctx context.Context, r RoomSale, a RoomAction, rate, nowMs int64) (RoomState, error) {
	if err := r.check(); err != nil {
		return RoomState{}, err
	}
	switch a {
	case RoomPause, RoomResume, RoomClose, RoomReopen:
	case RoomRate:
		if rate < 1 || rate > 10_000_000 {
			return RoomState{}, fmt.Errorf("%w: admission rate %d", ErrInvalid, rate)
		}
	default:
		return RoomState{}, fmt.Errorf("%w: room action %q", ErrInvalid, a)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	vals, err := wrAdminScript.Exec(cctx, s.c, []string{roomKey(r.Product)},
		[]string{string(a), i64(nowMs), i64(rate), i64(r.StartMs), i64(r.RatePerMinute), i64(r.ExpireAtMs)}).ToArray()
	var n [5]int64
	if err == nil && len(vals) != len(n) {
		err = errors.New("unexpected reply")
	}
	for i := 0; err == nil && i < len(n); i++ {
		n[i], err = vals[i].AsInt64()
	}
	if err != nil {
		return RoomState{}, fmt.Errorf("stock: room %s: %w", a, err)
	}
	return RoomState{Base: n[0], BaseMs: n[1], Rate: n[2], Paused: n[3] == 1, Closed: n[4] == 1}, nil
}

// RoomFinish takes a shopper who bought out of the active shoppers, so
// max_active lets the next one in.
func (s *Store) RoomFinish(ctx context.Context, product, user string) error {
	if err := checkProduct(product); err != nil {
		return err
	}
	if !validRateClient(user) {
		return fmt.Errorf("%w: user %q", ErrInvalid, user)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if err := wrFinishScript.Exec(cctx, s.c, []string{roomUserKey(product, user), roomActiveKey(product)}, nil).Error(); err != nil {
		return fmt.Errorf("stock: room finish: %w", err)
	}
	return nil
}

// validChallengeID: base64url characters, no brace (the hash tag).
func validChallengeID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
