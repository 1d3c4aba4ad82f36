package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
)

// Order outcomes, on ChangesChannel or (Redis Cluster) each product's
// ChangesChannelOf: the edges' event streams (package sale/push) wait for
// them. The calls below are bounded by ctx alone.

// ChangeKind is the outcome every order of a message had; its value is
// the message's first byte.
type ChangeKind byte

// Message kinds.
const (
	KindStored    ChangeKind = 'S' // stored by the consumer: StateSuccess
	KindCancelled ChangeKind = 'R' // released by a cancel: StateReleased
	KindExpired   ChangeKind = 'E' // released by the pay deadline: StateExpired
	KindPaid      ChangeKind = 'P' // paid in time: StatePaid
)

// State is the order state the kind reports (State*).
func (k ChangeKind) State() string {
	switch k {
	case KindStored:
		return StateSuccess
	case KindCancelled:
		return StateReleased
	case KindExpired:
		return StateExpired
	case KindPaid:
		return StatePaid
	}
	return ""
}

func (k ChangeKind) valid() bool { return k.State() != "" }

// StateChange is one outcome message: orders of one product that reached their
// outcome.
type StateChange struct {
	ProductID string  // a view of the message
	OrderIDs  []int64 // ascending; reused once the callback returned
	Kind      ChangeKind
}

// PublishStored tells every edge that the orders were stored (and marked
// success in Redis). Call it after each stored batch, after MarkSuccess:
// consumer.Config.OnStored. It sends one message per product, pipelined
// (on a cluster each to its product's node); the error joins those that
// failed. A lost message costs the shoppers of that batch their push, not
// their outcome: an edge re-reads the state of its waiting streams when its
// subscription comes back (Follow.Missed), their streams end at the
// deadline with the state read then, and the page polls.
func (s *Store) PublishStored(ctx context.Context, products map[string][]int64) error {
	cmds := make(rueidis.Commands, 0, len(products))
	var b []byte
	for p, ids := range products {
		if len(ids) == 0 {
			continue
		}
		if err := checkProduct(p); err != nil {
			return err
		}
		b = appendChange(b[:0], KindStored, p, ids)
		cmds = append(cmds, s.publishCmd(changesKind, p, string(b)))
	}
	return s.publishChanges(ctx, cmds)
}

// PublishChange tells every edge that orders of one product reached the
// outcome kind (cancelled, expired or paid: settle.go; stored goes with
// PublishStored), so that their streams end with it.
func (s *Store) PublishChange(ctx context.Context, productID string, kind ChangeKind, orderIDs ...int64) error {
	if !kind.valid() {
		return fmt.Errorf("%w: settled kind %q", ErrInvalid, byte(kind))
	}
	if len(orderIDs) == 0 {
		return nil
	}
	if err := checkProduct(productID); err != nil {
		return err
	}
	msg := string(appendChange(nil, kind, productID, orderIDs))
	return s.publishChanges(ctx, rueidis.Commands{s.publishCmd(changesKind, productID, msg)})
}

// PublishReleased is PublishChange of KindCancelled: an operator
// cancelled the orders.
func (s *Store) PublishReleased(ctx context.Context, productID string, orderIDs ...int64) error {
	return s.PublishChange(ctx, productID, KindCancelled, orderIDs...)
}

func (s *Store) publishChanges(ctx context.Context, cmds rueidis.Commands) error {
	if len(cmds) == 0 {
		return nil
	}
	var errs []error
	for _, r := range s.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stock: publish outcomes: %w", errors.Join(errs...))
	}
	return nil
}

// SubscribeChanges calls fn with every outcome message of the products fol
// follows until the subscription is stopped or the Store is closed. A
// message that does not parse goes to malformed instead: the channel is
// ours, so it is a bug or someone else's traffic. fol.Missed is called each
// time a channel is (re)established (messages published before are lost).
// fn and malformed run one at a time and must be quick; parsing allocates
// nothing once the id buffer has grown. It waits for the channels as
// SubscribeSoldOut does.
func (s *Store) SubscribeChanges(ctx context.Context, fol Follow, fn func(StateChange), malformed func(msg string)) *Subscription {
	var ids []int64 // deliveries never overlap (Subscription)
	return s.subscribe(ctx, &s.changesSubs, changesKind, fol, func(msg string) {
		st, ok := parseChange(msg, ids)
		ids = st.OrderIDs[:0]
		if !ok {
			malformed(msg)
			return
		}
		fn(st)
	})
}

// appendChange encodes kind, product and ids as
//
//	<kind><product> <first id>,<delta>,<delta>...
//
// with the ids sorted: the ids of one batch share their timestamp and node
// bits, so a delta is a digit or two where a full id is 19 digits. Text,
// so that `redis-cli subscribe sk:stored` (on a cluster `redis-cli -c
// ssubscribe 'sk:{p}:stored'`) stays readable.
func appendChange(b []byte, kind ChangeKind, product string, ids []int64) []byte {
	ids = slices.Clone(ids) // the caller's slice is not ours to reorder
	slices.Sort(ids)
	b = append(b, byte(kind))
	b = append(b, product...)
	b = append(b, ' ')
	prev := int64(0)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id-prev, 10)
		prev = id
	}
	return b
}

// parseChange parses a message; its product is a view of msg and its ids
// are appended to ids[:0] (returned in OrderIDs even when ok is false, for
// reuse). Anything malformed is refused whole.
func parseChange(msg string, ids []int64) (st StateChange, ok bool) {
	out := ids[:0]
	if len(msg) < 4 || !ChangeKind(msg[0]).valid() {
		return StateChange{OrderIDs: out}, false
	}
	sp := 1
	for sp < len(msg) && msg[sp] != ' ' {
		sp++
	}
	product := msg[1:sp]
	if sp == len(msg) || !order.ValidProductID(product) {
		return StateChange{OrderIDs: out}, false
	}
	var id int64
	for i := sp + 1; i < len(msg); {
		j := i
		var d int64
		for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
			c := int64(msg[j] - '0')
			if d > (maxID-c)/10 {
				return StateChange{OrderIDs: out}, false
			}
			d = d*10 + c
			j++
		}
		if j == i || (j < len(msg) && msg[j] != ',') || id > maxID-d {
			return StateChange{OrderIDs: out}, false
		}
		id += d
		if id <= 0 {
			return StateChange{OrderIDs: out}, false
		}
		out = append(out, id)
		if j < len(msg) {
			j++ // the comma
			if j == len(msg) {
				return StateChange{OrderIDs: out}, false
			}
		}
		i = j
	}
	if len(out) == 0 {
		return StateChange{OrderIDs: out}, false
	}
	return StateChange{ProductID: product, OrderIDs: out, Kind: ChangeKind(msg[0])}, true
}

const maxID = int64(^uint64(0) >> 1)
