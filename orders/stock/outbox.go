package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

// RelayGroup is the consumer group of the outbox relay (package orders) on
// every product's outbox stream. AckOutbox acknowledges entries for it.
const RelayGroup = "relay"

// AckOutbox removes outbox entries whose order events Kafka acknowledged:
// XDEL from sk:{p}:outbox, then XACK for RelayGroup, pipelined in one round
// trip (same key, so same slot on a cluster).
//
// XDEL goes first: once the entry is gone no relay can take it into its
// pending list any more, and the XACK then drops it from a pending list it
// already reached. (Redis 7 would also drop a deleted id from the pending
// list on the relay's next XAUTOCLAIM; miniredis never does, so the XACK is
// what keeps the embedded server's pending list from growing.)
//
// Deleting an id that is already gone is not an error. On error the entries
// may or may not be gone: the relay re-sends what is left, and the
// consumer is idempotent, so the caller only logs it.
//
// An id "<entry id>/<n>" (Outcome.OutboxID of ledger "b") is one of the n
// orders of a batch entry: the entry goes with the n-th of them given to
// this Store (all of a call's orders are its edge's), and until then
// stays. An order whose publish failed never comes, and the relay sends
// the whole entry again; so do the entries whose counts are dropped when
// more than maxShares are incomplete.
func (s *Store) AckOutbox(ctx context.Context, productID string, ids ...string) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	ids = s.shares.complete(productID, ids)
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	key := OutboxKey(productID)
	res := s.c.DoMulti(ctx,
		s.c.B().Xdel().Key(key).Id(ids...).Build(),
		s.c.B().Xack().Key(key).Group(RelayGroup).Id(ids...).Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return fmt.Errorf("stock: ack outbox %s: %w", key, err)
		}
	}
	return nil
}

// OutboxEntryID is the stream entry id of an Outcome.OutboxID, which in
// ledger "b" is "<entry id>/<orders>".
func OutboxEntryID(outboxID string) string {
	id, _, _ := strings.Cut(outboxID, "/")
	return id
}

// shares counts the acknowledged orders of batch entries (AckOutbox), per
// product: an entry id is unique within its stream only, and two
// products' entries written in the same millisecond have the same one.
type shares struct {
	mu sync.Mutex
	m  map[shareKey]int // -> orders acknowledged so far
}

type shareKey struct{ product, entry string }

// maxShares bounds the batch entries counted at once: beyond it, the
// counts of entries older than shareAge are dropped (their orders' publish
// failed or is late: the relay sends them).
const (
	maxShares = 1 << 16
	shareAge  = time.Minute
)

// complete returns product's ids with every share id removed, and in its
// place the entry id of each batch entry that the shares among ids
// complete (ids itself when it holds no share id).
func (sh *shares) complete(product string, ids []string) []string {
	if !slices.ContainsFunc(ids, func(id string) bool { return strings.IndexByte(id, '/') >= 0 }) {
		return ids
	}
	out := make([]string, 0, len(ids))
	locked := false
	for _, id := range ids {
		entry, count, ok := strings.Cut(id, "/")
		if !ok {
			out = append(out, id)
			continue
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			continue // not one of ours: nothing to delete
		}
		if !locked {
			sh.mu.Lock()
			locked = true
			if sh.m == nil {
				sh.m = map[shareKey]int{}
			}
		}
		k := shareKey{product, entry}
		if got := sh.m[k] + 1; got < n {
			sh.m[k] = got
			continue
		}
		delete(sh.m, k)
		out = append(out, entry)
	}
	if locked {
		if len(sh.m) > maxShares {
			old := strconv.FormatInt(time.Now().Add(-shareAge).UnixMilli(), 10)
			for k := range sh.m {
				if ms, _, _ := strings.Cut(k.entry, "-"); len(ms) < len(old) || len(ms) == len(old) && ms < old {
					delete(sh.m, k)
				}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// ErrNoGroup is wrapped by the errors of TakeOutbox and ClaimOutbox when
// the outbox has no RelayGroup: Redis lost its memory, or the stream was
// deleted. CreateRelayGroup creates it again.
var ErrNoGroup = errors.New("stock: outbox has no relay group")

// The relay's reads below are bounded by ctx alone, not by Options.Timeout:
// the relay sets the budget of each of its calls.

// CreateRelayGroup creates RelayGroup on the product's outbox, and the
// stream itself if need be, reading from its first entry (XGROUP CREATE
// ... 0 MKSTREAM). A group that exists already is not an error.
func (s *Store) CreateRelayGroup(ctx context.Context, productID string) error {
	if err := checkProduct(productID); err != nil {
		return err
	}
	key := OutboxKey(productID)
	err := s.c.Do(ctx, s.c.B().XgroupCreate().Key(key).Group(RelayGroup).Id("0").Mkstream().Build()).Error()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("stock: create group on %s: %w", key, err)
	}
	return nil
}

// TakeOutbox moves up to count entries that no consumer of RelayGroup has
// seen into consumer's pending list (XREADGROUP ... >), without returning
// them, and reports how many it moved.
//
// With keepAlive > 0 it also records, in the same round trip, that
// consumer is alive (RelaysKey, expiring after keepAlive), so that
// ForgetDeadRelays run by another edge leaves it alone. The time recorded
// is this process's clock: the edges' clocks must agree to well within
// the bound ForgetDeadRelays is given.
func (s *Store) TakeOutbox(ctx context.Context, productID, consumer string, count int, keepAlive time.Duration) (int, error) {
	if err := checkProduct(productID); err != nil {
		return 0, err
	}
	key := OutboxKey(productID)
	read := s.c.B().Xreadgroup().Group(RelayGroup, consumer).Count(int64(count)).Streams().Key(key).Id(">").Build()
	var res rueidis.RedisResult
	if keepAlive > 0 {
		// Same hash tag as the stream: one slot, one round trip.
		relays := RelaysKey(productID)
		rs := s.c.DoMulti(ctx,
			s.c.B().Hset().Key(relays).FieldValue().FieldValue(consumer, strconv.FormatInt(time.Now().UnixMilli(), 10)).Build(),
			s.c.B().Pexpire().Key(relays).Milliseconds(keepAlive.Milliseconds()).Build(),
			read)
		for _, r := range rs[:2] {
			if err := r.Error(); err != nil {
				return 0, fmt.Errorf("stock: relay heartbeat %s: %w", relays, err)
			}
		}
		res = rs[2]
	} else {
		res = s.c.Do(ctx, read)
	}
	got, err := res.AsXRead()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, outboxErr("XREADGROUP", key, err)
	}
	return len(got[key]), nil
}

var (
	//go:embed lua/forget_relays.lua
	forgetRelaysLua    string
	forgetRelaysScript = rueidis.NewLuaScript(forgetRelaysLua)
)

// ForgetDeadRelays removes from RelayGroup the consumers other than self
// that are dead: no entry pending, idle (XINFO CONSUMERS) for at least
// bound, and no heartbeat (TakeOutbox's keepAlive) within bound. Every
// edge restart leaves such a consumer behind, its name unique per process;
// its pending entries are first claimed by a live relay (ClaimOutbox), and
// only then is it removed. A consumer that still has entries pending is
// never removed: XGROUP DELCONSUMER would drop them from the pending list,
// and no relay would ever re-send them. Check and removal are one script
// (lua/forget_relays.lua), so nothing can reach the consumer in between.
// It returns the names removed.
func (s *Store) ForgetDeadRelays(ctx context.Context, productID, self string, bound time.Duration) ([]string, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	if bound <= 0 {
		return nil, fmt.Errorf("stock: forget dead relays on %s: bound must be positive, got %v", productID, bound)
	}
	key := OutboxKey(productID)
	names, err := forgetRelaysScript.Exec(ctx, s.c, []string{key, RelaysKey(productID)}, []string{
		RelayGroup, self, strconv.FormatInt(bound.Milliseconds(), 10), strconv.FormatInt(time.Now().UnixMilli(), 10),
	}).AsStrSlice()
	if err != nil {
		return nil, outboxErr("forget dead relays", key, err)
	}
	return names, nil
}

// OutboxEntry is one outbox stream entry as ClaimOutbox returns it.
type OutboxEntry struct {
	ID string // the stream entry id, "<ms>-<seq>"
	// Fields are the entry's fields as the deduction script wrote them;
	// nil when the entry was deleted while it sat pending (Deleted).
	Fields map[string]string
}

// Deleted reports whether the entry is gone from the stream and only its
// id is still pending: it needs an acknowledgement, nothing else.
func (e *OutboxEntry) Deleted() bool { return e.Fields == nil }

// Time is when the entry was written, from its id.
func (e *OutboxEntry) Time() (time.Time, bool) {
	ms, err := strconv.ParseInt(e.ID[:max(strings.IndexByte(e.ID, '-'), 0)], 10, 64)
	return time.UnixMilli(ms), err == nil
}

// RawOrderID is the entry's order id field as written, parsed or not: the
// key of its dead letter when Order fails ("" for a batch entry).
func (e *OutboxEntry) RawOrderID() string { return e.Fields[fieldOrder] }

// Batch reports whether the entry is a deduction's of ledger "b", carrying
// every order of its script call (Events).
func (e *OutboxEntry) Batch() bool {
	_, ok := e.Fields[fieldOrders]
	return ok
}

// Events are the events the entry records: the one of Event, or for a batch
// entry the order event of each of its orders, in the order the script
// call made them. An error wraps order.ErrInvalid: some part of the entry
// is malformed, and none of it can become an event (it is dead-lettered
// whole).
func (e *OutboxEntry) Events() ([]order.Event, error) {
	if !e.Batch() {
		ev, err := e.Event()
		if err != nil {
			return nil, err
		}
		return []order.Event{ev}, nil
	}
	product, recs := e.Fields[fieldProduct], e.Fields[fieldOrders]
	evs := make([]order.Event, 0, strings.Count(recs, ";")+1)
	for rec := range strings.SplitSeq(recs, ";") {
		idText, v, _ := strings.Cut(rec, ":")
		id, err := strconv.ParseInt(idText, 10, 64)
		info, ok := parseOrderValue(product, id, "p:"+v)
		o := order.Order{ID: id, ProductID: product, UserID: info.UserID, Qty: info.Qty,
			PriceCents: info.PriceCents, CreatedMs: info.CreatedMs, Edge: info.Edge, PayByMs: info.PayByMs}
		if err != nil || !ok {
			err = fmt.Errorf("%w: order %q", order.ErrInvalid, rec)
		} else {
			err = o.Validate()
		}
		if err != nil {
			return nil, fmt.Errorf("outbox batch entry %s: %w", e.ID, err)
		}
		evs = append(evs, order.Event{V: order.Version, Type: order.TypeOrder, Order: o})
	}
	return evs, nil
}

// Order is the order the entry records. An error wraps order.ErrInvalid:
// a field is missing or malformed, and the entry cannot become an event.
func (e *OutboxEntry) Order() (order.Order, error) {
	f := e.Fields
	num := func(name string) int64 {
		n, err := strconv.ParseInt(f[name], 10, 64)
		if err != nil {
			return -1 // fails Validate below
		}
		return n
	}
	o := order.Order{
		ID:         num(fieldOrder),
		ProductID:  f[fieldProduct],
		UserID:     f[fieldUser],
		Qty:        int(num(fieldQty)),
		PriceCents: num(fieldPrice),
		CreatedMs:  num(fieldCreated),
		Edge:       int(num(fieldNode)),
	}
	if _, ok := f[fieldPayBy]; ok {
		// Absent in entries written before deadlines existed: none.
		o.PayByMs = num(fieldPayBy)
	}
	if err := o.Validate(); err != nil {
		return order.Order{}, fmt.Errorf("outbox entry %v: %w", f, err)
	}
	return o, nil
}

// Type is the type of the event the entry records: order.TypeOrder (the
// deduction's entries carry none), order.TypeRelease or order.TypePaid
// (the settle script's).
func (e *OutboxEntry) Type() string {
	if t, ok := e.Fields[fieldType]; ok {
		return t
	}
	return order.TypeOrder
}

// Event is the event the entry records, whatever its type: the order event
// of a deduction, or the release or paid event of a settlement, exactly as
// the edge that wrote it publishes it (Settlement.Event), so that a re-send
// is a true duplicate. An error wraps order.ErrInvalid or
// order.ErrMalformed: the entry cannot become an event.
func (e *OutboxEntry) Event() (order.Event, error) {
	o, err := e.Order()
	if err != nil {
		return order.Event{}, err
	}
	ev := order.Event{V: order.Version, Type: e.Type(), Order: o}
	num := func(name string) int64 {
		n, err := strconv.ParseInt(e.Fields[name], 10, 64)
		if err != nil {
			return -1 // fails Validate below
		}
		return n
	}
	switch ev.Type {
	case order.TypeRelease:
		ev.Reason, ev.ReleasedMs = e.Fields[fieldReason], num(fieldReleased)
	case order.TypePaid:
		ev.PaidMs = num(fieldPaid)
	}
	if err := ev.Validate(); err != nil {
		return order.Event{}, fmt.Errorf("outbox entry %v: %w", e.Fields, err)
	}
	return ev, nil
}

// ClaimOutbox takes over up to count entries that sat in any consumer's
// pending list of RelayGroup for at least minIdle, from cursor on
// (XAUTOCLAIM; start with "0-0"), and returns them with the cursor of the
// next call, "0-0" once the pending list was walked through. Entries
// deleted while pending come back as Deleted where the server reports
// them so (Redis 6.2 sends a nil in place: skipped).
func (s *Store) ClaimOutbox(ctx context.Context, productID, consumer string, minIdle time.Duration, cursor string, count int) (next string, entries []OutboxEntry, err error) {
	if err := checkProduct(productID); err != nil {
		return "", nil, err
	}
	key := OutboxKey(productID)
	arr, err := s.c.Do(ctx, s.c.B().Xautoclaim().Key(key).Group(RelayGroup).Consumer(consumer).
		MinIdleTime(strconv.FormatInt(minIdle.Milliseconds(), 10)).Start(cursor).Count(int64(count)).Build()).ToArray()
	if err != nil {
		return "", nil, outboxErr("XAUTOCLAIM", key, err)
	}
	if len(arr) < 2 {
		return "", nil, fmt.Errorf("stock: XAUTOCLAIM %s: %d-element reply", key, len(arr))
	}
	if next, err = arr[0].ToString(); err != nil {
		return "", nil, fmt.Errorf("stock: XAUTOCLAIM %s cursor: %w", key, err)
	}
	msgs, err := arr[1].ToArray()
	if err != nil && !rueidis.IsRedisNil(err) {
		return "", nil, fmt.Errorf("stock: XAUTOCLAIM %s entries: %w", key, err)
	}
	entries = make([]OutboxEntry, 0, len(msgs))
	for i := range msgs {
		e, err := msgs[i].AsXRangeEntry()
		if err != nil {
			continue
		}
		entries = append(entries, OutboxEntry{ID: e.ID, Fields: e.FieldValues})
	}
	return next, entries, nil
}

func outboxErr(cmd, key string, err error) error {
	if strings.Contains(err.Error(), "NOGROUP") {
		return fmt.Errorf("%w: %s %s: %w", ErrNoGroup, cmd, key, err)
	}
	return fmt.Errorf("stock: %s %s: %w", cmd, key, err)
}

// OutboxOrders lists the orders in the product's outbox stream: deducted,
// and maybe or maybe not in Kafka yet. After a real Redis lost its memory
// there are none (the stream died with it); the embedded server restores
// its streams from the snapshot. Entries that do not make a valid order
// (OutboxEntry.Order) are skipped: the relay dead-letters them. The
// settlements' entries (release, paid) are not orders: OutboxEvents has
// them.
func (s *Store) OutboxOrders(ctx context.Context, productID string) ([]order.Order, error) {
	evs, err := s.OutboxEvents(ctx, productID)
	if err != nil {
		return nil, err
	}
	var out []order.Order
	for _, e := range evs {
		if e.Type == order.TypeOrder {
			out = append(out, e.Order)
		}
	}
	return out, nil
}

// OutboxEvents lists the events in the product's outbox stream, oldest
// first, of every type (OutboxEntry.Event); entries that make none are
// skipped.
func (s *Store) OutboxEvents(ctx context.Context, productID string) ([]order.Event, error) {
	if err := checkProduct(productID); err != nil {
		return nil, err
	}
	key := OutboxKey(productID)
	var out []order.Event
	for start := "-"; ; {
		cctx, cancel := s.call(ctx)
		entries, err := s.c.Do(cctx, s.c.B().Xrange().Key(key).Start(start).End("+").Count(1000).Build()).AsXRange()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("stock: outbox %s: %w", key, err)
		}
		for _, e := range entries {
			if evs, err := (&OutboxEntry{ID: e.ID, Fields: e.FieldValues}).Events(); err == nil {
				out = append(out, evs...)
			}
		}
		if len(entries) < 1000 {
			return out, nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}

// OutboxLen is the number of entries in the product's outbox stream.
func (s *Store) OutboxLen(ctx context.Context, productID string) (int64, error) {
	if err := checkProduct(productID); err != nil {
		return 0, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := s.c.Do(ctx, s.c.B().Xlen().Key(OutboxKey(productID)).Build()).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("stock: outbox %s: %w", productID, err)
	}
	return n, nil
}
