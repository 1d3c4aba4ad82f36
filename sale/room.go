package sale

import (
	"sync"
	"sync/atomic"
	"time"

	"flashgate/metrics"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
	"flashgate/sale/room"
)

// The waiting room of a sale, as this edge serves it: the shopper's calls
// and the token call's gate (room_shopper.go), the operator's view and
// actions (room_admin.go), and the upkeep every edge runs (room_tend.go).
// sale/room decides the arithmetic, orders/stock keeps the queue.

// roomGrace is how long a room's keys outlive the sale's end.
const roomGrace = 24 * time.Hour

// roomView is what this edge keeps of one sale's room: the admission state
// it last read (refusals far from their turn are decided from it, without
// Redis), whether the pre-queue's key and the lottery are done, counters.
type roomView struct {
	state  atomic.Pointer[room.State]
	keyed  atomic.Bool
	ranked atomic.Bool
	active atomic.Int64
	// seen is the most tickets this edge has seen the room give (the
	// joined count's high-water mark): what a room Redis forgot numbers
	// new joins after (stock.PlaceAsk.Seen).
	seen  atomic.Int64
	joins [numJoinResults]metrics.Counter
}

// store installs the admission state read from Redis.
func (v *roomView) store(vs *room.State) {
	v.state.Store(vs)
	for {
		cur := v.seen.Load()
		if vs.Joined <= cur || v.seen.CompareAndSwap(cur, vs.Joined) {
			return
		}
	}
}

type joinResult int

const (
	joinNew joinResult = iota
	joinAgain
	joinClosed
	joinBadChallenge
	joinError
	numJoinResults
)

var joinResultNames = [numJoinResults]string{"joined", "again", "closed", "bad_challenge", "error"}

// roomViews maps product ids to views, copied on write (the hot path reads it
// without a lock).
type roomViews struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]*roomView]
}

func (rs *roomViews) get(product []byte) *roomView {
	m := rs.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[string(product)]
}

func (rs *roomViews) ensure(product string) *roomView {
	if v := rs.get([]byte(product)); v != nil {
		return v
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	cur := rs.m.Load()
	if cur != nil {
		if v := (*cur)[product]; v != nil {
			return v
		}
	}
	next := map[string]*roomView{}
	if cur != nil {
		for k, v := range *cur {
			next[k] = v
		}
	}
	v := &roomView{}
	next[product] = v
	rs.m.Store(&next)
	return v
}

func roomSaleOf(a *catalog.Sale) stock.RoomSale {
	return stock.RoomSale{Product: a.ProductID, StartMs: a.StartMs, RatePerMinute: a.Room.AdmitPerMinute,
		ExpireAtMs: a.EndMs + roomGrace.Milliseconds()}
}

func stateOf(rs *stock.RoomState) room.State {
	return room.State{Frozen: rs.Frozen, Ranked: rs.Ranked, Members: rs.Members, Joined: rs.Joined,
		Base: rs.Base, BaseMs: rs.BaseMs, Rate: rs.Rate, Paused: rs.Paused, Closed: rs.Closed, Admitted: rs.Admitted}
}
