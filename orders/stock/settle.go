package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

// Settling an order: the end of its hold on its units. Three calls end it,
// all through one state-guarded script (lua/settle.lua), so that whichever
// runs first decides and the others find a final state:
//
//   - Cancel: an operator (or the payment system) gives the order up;
//   - ExpireDue: the pay deadline passed (every edge sweeps; the script
//     makes each release happen once);
//   - Pay: the payment arrived — in time, and the order is kept for good, or
//     too late, and the same call expires it.
//
// The deadline is decided by Redis' clock alone (TIME inside the script),
// never by an edge's: two edges whose clocks differ still agree on which of
// a payment and the deadline came first. An edge's clock sets the deadline
// itself (PayByMs = the edge's CreatedMs + the pay timeout), so a skew of d
// between an edge and the Redis master moves that edge's deadlines by d; and
// a sweep asks only for members due by its estimate of Redis' clock (learnt
// from the script's answers), so a member is found at most about one sweep
// interval plus one round trip late.
//
// Every change writes the event that records it to the product's outbox in
// the same script (a release event with its reason, or a paid event): the
// caller publishes Settlement.Event and acknowledges OutboxID, and the outbox
// relay re-sends the event if the caller dies in between.

var (
	//go:embed lua/settle.lua
	settleLua    string
	settleScript = rueidis.NewLuaScript(orderFnLua + settleLua)
)

// Errors of the settle calls.
var (
	// ErrUnknownOrder: there is no such order in this product's sale (never
	// made, another product's id, or gone with its TTL or Redis' memory).
	ErrUnknownOrder = errors.New("stock: unknown order")
	// ErrRecovering: the sale is fenced (closed until rebuilt from the
	// ledger, see fence.go), or the call found Redis went back in time and
	// fenced it. Nothing changed; ask again once it reopened.
	ErrRecovering = errors.New("stock: sale recovering")
)

// Settlement is what one settle call did to one order.
type Settlement struct {
	// Info is the order after the call (its state says what it is now:
	// StatePaid, StateExpired, StateReleased, or unchanged).
	Info OrderInfo
	// Changed reports that this call settled it: its event is new (an
	// outbox entry, OutboxID). A call that found the order settled already
	// (or, for a sweep, not due yet) leaves it as it was.
	Changed bool
	// OutboxID is the outbox entry of the event Changed wrote, "" when
	// nothing changed: AckOutbox it once Kafka acknowledged Event.
	OutboxID string
	// AtMs is Redis' clock at the call, unix ms.
	AtMs int64
	// Replayed reports that Pay's replay id was seen before: nothing
	// changed, Info is the order's state now.
	Replayed bool
}

// Event is the event that records the order's settlement, to publish: a
// release with its reason (StateReleased: cancelled, StateExpired:
// expired) or a paid event. It is built from the stored order alone, so a
// repeat of a call that changed nothing (Changed false) builds the same
// event the first call wrote, and publishing it again is harmless. For an
// order that is not settled the event is an order event.
func (s Settlement) Event() order.Event {
	e := order.Event{V: order.Version, Type: order.TypeOrder, Order: s.Info.Order}
	switch s.Info.State {
	case StatePaid:
		e.Type, e.PaidMs = order.TypePaid, s.Info.PaidMs
	case StateReleased:
		e.Type, e.Reason, e.ReleasedMs = order.TypeRelease, order.ReasonCancelled, s.Info.ClosedMs
	case StateExpired:
		e.Type, e.Reason, e.ReleasedMs = order.TypeRelease, order.ReasonExpired, s.Info.ClosedMs
	}
	return e
}

// Cancel releases a pending or successful order (StateReleased): its units
// back to stock and to the buyer's allowance, a release event (reason
// cancelled) in the outbox. An order that is final already is left alone
// (Changed false; a paid order is never released). ErrUnknownOrder when
// there is no such order; ErrNotWarmed or ErrRecovering when the sale is
// not open (nothing changed).
func (s *Store) Cancel(ctx context.Context, productID string, orderID int64) (Settlement, error) {
	return s.settleOne(ctx, "cancel", productID, orderID, "", 0)
}

// Release is Cancel for callers that only need to know whether it released
// the order: released is false for an unknown order or a final one.
func (s *Store) Release(ctx context.Context, productID string, orderID int64) (released bool, err error) {
	st, err := s.Cancel(ctx, productID, orderID)
	if errors.Is(err, ErrUnknownOrder) {
		return false, nil
	}
	return st.Changed, err
}

// Pay records the payment of a pending or successful order. Before its
// deadline (or without one) it becomes StatePaid — final: never released by
// the deadline or a cancel — and a paid event goes to the outbox. At or
// after the deadline (Redis' clock) the deadline wins: the same call
// expires the order as the sweep would (StateExpired, a release event), and
// the caller tells the payer it came too late. An order final already is
// left alone: Info.State says whether it was paid or released.
//
// replayID, if not "", is the payment provider's event id: it is recorded
// (ReplayKey, for replayTTL) in the same call, and an id seen before
// changes nothing and answers Replayed. An unknown order, or a sale not
// open, records nothing.
func (s *Store) Pay(ctx context.Context, productID string, orderID int64, replayID string, replayTTL time.Duration) (Settlement, error) {
	if replayID != "" && (!ValidReplayID(replayID) || replayTTL < time.Millisecond) {
		return Settlement{}, fmt.Errorf("%w: pay %s/%d: replay id %q for %v", ErrInvalid, productID, orderID, replayID, replayTTL)
	}
	return s.settleOne(ctx, "pay", productID, orderID, replayID, replayTTL)
}

func (s *Store) settleOne(ctx context.Context, op, productID string, orderID int64, replayID string, replayTTL time.Duration) (Settlement, error) {
	if !order.ValidProductID(productID) || orderID <= 0 {
		return Settlement{}, fmt.Errorf("%w: %s %q/%d", ErrInvalid, op, productID, orderID)
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	okey := OrderKey(productID, orderID)
	// The buyer key must be declared in KEYS (cluster), so its user is read
	// first; the script re-checks it under atomicity.
	obkey := OrderBucketKey(productID, orderID)
	user, err := s.orderUser(ctx, okey, obkey, orderID)
	if rueidis.IsRedisNil(err) {
		return Settlement{}, fmt.Errorf("stock: %s %s: %w", op, okey, ErrUnknownOrder)
	}
	if err != nil {
		return Settlement{}, fmt.Errorf("stock: %s %s: %w", op, okey, err)
	}
	keys := append(s.settleKeys(productID), okey, BuyerKey(productID, user), BuyerShardKey(productID, BuyerShard(user)), obkey)
	if replayID != "" {
		keys = append(keys, ReplayKey(productID, replayID))
	}
	out, err := s.settle(ctx, op, productID, keys, i64(replayTTL.Milliseconds()), []string{user, i64(orderID)}, []int64{orderID})
	if err != nil {
		return Settlement{}, fmt.Errorf("stock: %s %s: %w", op, okey, err)
	}
	st := out[0]
	if st.code == -3 {
		return Settlement{}, fmt.Errorf("stock: %s %s: %w", op, okey, ErrUnknownOrder)
	}
	if st.code == -5 {
		return Settlement{}, fmt.Errorf("stock: %s %s: the order's user changed under the call", op, okey)
	}
	return st.Settlement, nil
}

// orderUser reads the buyer of an order in any layout (its bucket hash's
// field and its key in one round trip); a Redis nil error when there is no
// such order.
func (s *Store) orderUser(ctx context.Context, okey, obkey string, orderID int64) (string, error) {
	rs := s.c.DoMulti(ctx, s.c.B().Hget().Key(obkey).Field(i64(orderID)).Build(), s.c.B().Get().Key(okey).Build())
	if v, err := rs[0].ToString(); err == nil {
		return userOfValue(v), nil
	} else if !rueidis.IsRedisNil(err) {
		return "", err
	}
	v, err := rs[1].ToString()
	if err == nil {
		return userOfValue(v), nil
	}
	if !isWrongType(err) {
		return "", err
	}
	return s.c.Do(ctx, s.c.B().Hget().Key(okey).Field("user").Build()).ToString()
}

func (s *Store) settleKeys(productID string) []string {
	return []string{StockKey(productID), MetaKey(productID), OutboxKey(productID), DueKey(productID)}
}

// settled is one order's entry of the script's answer.
type settled struct {
	Settlement
	code int64
}

// settle runs the script; pairs are the per-order arguments (user, id) and
// ids the orders' ids in their order. The answer's status becomes an error
// (ErrNotWarmed, ErrRecovering) or Replayed.
func (s *Store) settle(ctx context.Context, op, productID string, keys []string, replayTTLMs string, pairs []string, ids []int64) ([]settled, error) {
	args := make([]string, 0, 5+len(pairs))
	args = append(args, op, productID, s.fenceArg(),
		FenceID(s.redisNowMs(), 0, "runid"), replayTTLMs)
	args = append(args, pairs...)
	arr, err := settleScript.Exec(ctx, s.c, keys, args).ToArray()
	if err != nil {
		return nil, err
	}
	if len(arr) < 2 {
		return nil, fmt.Errorf("settle script answered %d values", len(arr))
	}
	status, err1 := arr[0].AsInt64()
	now, err2 := arr[1].AsInt64()
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("settle script: %w", err)
	}
	switch status {
	case -1:
		return nil, ErrNotWarmed
	case -2:
		return nil, ErrRecovering
	}
	s.learnClock(now)
	if len(arr) != 2+len(ids) {
		return nil, fmt.Errorf("settle script answered %d orders for %d", len(arr)-2, len(ids))
	}
	out := make([]settled, len(ids))
	for i, id := range ids {
		e, err := arr[2+i].ToArray()
		if err != nil || len(e) != 3 {
			return nil, fmt.Errorf("settle script: order %d: %d values (%v)", id, len(e), err)
		}
		code, err := e[0].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("settle script: order %d: %w", id, err)
		}
		xid, _ := e[1].ToString()
		v, err := e[2].ToString()
		if err != nil {
			return nil, fmt.Errorf("settle script: order %d: %w", id, err)
		}
		info, _ := parseOrderValue(productID, id, v) // "": no such order
		out[i] = settled{code: code, Settlement: Settlement{
			Info: info, Changed: code == 1, OutboxID: xid, AtMs: now, Replayed: status == -4,
		}}
	}
	return out, nil
}

// ExpireDue releases up to max orders of the product whose pay deadline
// passed (StateExpired: units back, a release event with reason expired
// in the outbox) and returns them, in deadline order. It reads the due
// members with a deadline at or before its estimate of Redis' clock, then
// settles them in one script call that checks each against Redis' own
// clock: an order paid, cancelled or expired meanwhile — by this edge or
// another sweeping the same set — is left alone and its member dropped, so
// every deadline releases its order exactly once however many edges sweep.
// Only the orders this call expired are returned; fewer than max does not
// mean nothing more is due (a member dropped took a place), max does mean
// more may be.
//
// ErrNotWarmed or ErrRecovering: the sale is not open, nothing changed.
func (s *Store) ExpireDue(ctx context.Context, productID string, max int) ([]Settlement, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, fmt.Errorf("%w: expire %s: max %d", ErrInvalid, productID, max)
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	if err := s.measureClock(ctx); err != nil {
		return nil, fmt.Errorf("stock: expire %s: %w", productID, err)
	}
	due := DueKey(productID)
	members, err := s.c.Do(ctx, s.c.B().Zrangebyscore().Key(due).Min("-inf").Max(i64(s.redisNowMs())).
		Limit(0, int64(max)).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("stock: expire %s: %w", productID, err)
	}
	if len(members) == 0 {
		return nil, nil
	}
	keys := s.settleKeys(productID)
	pairs := make([]string, 0, 2*len(members))
	ids := make([]int64, 0, len(members))
	var junk []string
	for _, m := range members {
		id, user, ok := parseDueMember(m)
		if !ok {
			junk = append(junk, m) // not written by mark_success.lua: dropped
			continue
		}
		keys = append(keys, OrderKey(productID, id), BuyerKey(productID, user), BuyerShardKey(productID, BuyerShard(user)),
			OrderBucketKey(productID, id))
		pairs = append(pairs, user, i64(id))
		ids = append(ids, id)
	}
	if len(junk) > 0 {
		if err := s.c.Do(ctx, s.c.B().Zrem().Key(due).Member(junk...).Build()).Error(); err != nil {
			return nil, fmt.Errorf("stock: expire %s: %w", productID, err)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	out, err := s.settle(ctx, "expire", productID, keys, "0", pairs, ids)
	if err != nil {
		return nil, fmt.Errorf("stock: expire %s: %w", productID, err)
	}
	var res []Settlement
	for _, st := range out {
		if st.Changed {
			res = append(res, st.Settlement)
		}
	}
	return res, nil
}

// Deadline is one order waiting for its payment.
type Deadline struct {
	OrderID int64
	UserID  string
	PayByMs int64
}

// NextDeadlines lists the n earliest pay deadlines of the product
// (overdue ones first) and how many orders wait for payment in all.
func (s *Store) NextDeadlines(ctx context.Context, productID string, n int) ([]Deadline, int64, error) {
	if err := checkProduct(productID); err != nil {
		return nil, 0, err
	}
	if n < 0 {
		return nil, 0, fmt.Errorf("%w: next deadlines %s: n %d", ErrInvalid, productID, n)
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	due := DueKey(productID)
	cmds := rueidis.Commands{s.c.B().Zcard().Key(due).Build()}
	if n > 0 {
		cmds = append(cmds, s.c.B().Zrange().Key(due).Min("0").Max(strconv.Itoa(n-1)).Withscores().Build())
	}
	res := s.c.DoMulti(ctx, cmds...)
	total, err := res[0].AsInt64()
	if err != nil {
		return nil, 0, fmt.Errorf("stock: next deadlines %s: %w", productID, err)
	}
	if n == 0 {
		return nil, total, nil
	}
	zs, err := res[1].AsZScores()
	if err != nil {
		return nil, 0, fmt.Errorf("stock: next deadlines %s: %w", productID, err)
	}
	out := make([]Deadline, 0, len(zs))
	for _, z := range zs {
		if id, user, ok := parseDueMember(z.Member); ok {
			out = append(out, Deadline{OrderID: id, UserID: user, PayByMs: int64(z.Score)})
		}
	}
	return out, total, nil
}

// The Store's estimate of Redis' clock: the offset from this process's
// clock, learnt from the settle script's answers (and a TIME before the
// first sweep). It only chooses which members a sweep reads; the script
// decides with Redis' own clock.

// redisNowMs is the estimate of Redis' clock now, unix ms.
func (s *Store) redisNowMs() int64 { return time.Now().UnixMilli() + s.clockOffsetMs.Load() }

// learnClock records Redis' clock as a script answered it. The answer is
// up to one round trip old, so the estimate runs at most that far behind.
func (s *Store) learnClock(redisMs int64) {
	s.clockOffsetMs.Store(redisMs - time.Now().UnixMilli())
	s.clockKnown.Store(true)
}

// measureClock asks Redis for its clock once, before the first estimate.
func (s *Store) measureClock(ctx context.Context) error {
	if s.clockKnown.Load() {
		return nil
	}
	t, err := s.c.Do(ctx, s.c.B().Time().Build()).AsStrSlice()
	if err != nil {
		return fmt.Errorf("TIME: %w", err)
	}
	if len(t) != 2 {
		return fmt.Errorf("TIME answered %v", t)
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	usec, err2 := strconv.ParseInt(t[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("TIME answered %v: %w", t, err)
	}
	s.learnClock(sec*1000 + usec/1000)
	return nil
}

// DueOrders lists every member of the product's due set (DueKey), for a
// rebuild: on a Redis that came back from an old snapshot they are the
// orders whose state may be stale in the way that matters (unpaid then,
// maybe paid or expired since), which the rebuild asks the ledger about.
func (s *Store) DueOrders(ctx context.Context, productID string) ([]Deadline, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	zs, err := s.c.Do(ctx, s.c.B().Zrange().Key(DueKey(productID)).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		return nil, fmt.Errorf("stock: due orders %s: %w", productID, err)
	}
	out := make([]Deadline, 0, len(zs))
	for _, z := range zs {
		if id, user, ok := parseDueMember(z.Member); ok {
			out = append(out, Deadline{OrderID: id, UserID: user, PayByMs: int64(z.Score)})
		}
	}
	return out, nil
}
