package room

import (
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
)

// Order is how the places are given.
type Order uint8

const (
	// LotteryThenFIFO ranks the pre-queue by the lottery at the opening;
	// later arrivals come after them, first come first served.
	LotteryThenFIFO Order = iota
	// FIFO gives every join the next place, also in the pre-queue.
	FIFO
)

func (o Order) String() string {
	if o == FIFO {
		return "fifo"
	}
	return "lottery_then_fifo"
}

// Defaults of a room whose config leaves them out.
const (
	DefaultAdmitPerMinute = 600
	DefaultSession        = 5 * time.Minute
	DefaultPrequeueOpens  = 10 * time.Minute
	// MaxDifficulty bounds the challenge: 24 bits is minutes on a phone.
	MaxDifficulty = 24
)

// Room is a sale's waiting room, immutable once built.
type Room struct {
	// OpensMs is when the queue opens (the pre-queue); StartMs is the
	// sale's start: the lottery is drawn and admission begins then.
	OpensMs, StartMs int64
	AdmitPerMinute   int64
	MaxActive        int64
	SessionMs        int64
	Order            Order
	Difficulty       int
}

// Lottery reports whether the pre-queue is ranked by the lottery.
func (r *Room) Lottery() bool { return r.Order == LotteryThenFIFO }

// Build checks c and returns the room of a sale starting at startMs, or nil
// when the room is off. Errors name the field under waiting_room.
func Build(c conf.RoomConfig, startMs int64) (*Room, field.Errors) {
	var errs field.Errors
	if !c.Enabled {
		return nil, nil
	}
	r := &Room{StartMs: startMs, AdmitPerMinute: int64(c.AdmitPerMinute), MaxActive: int64(c.MaxActive),
		Difficulty: c.Challenge.Difficulty}
	pre := c.PrequeueOpens
	if pre == 0 {
		pre = DefaultPrequeueOpens
	}
	if pre < 0 || pre > 7*24*time.Hour {
		errs.Add("waiting_room.prequeue_opens", "must be between 0s and 168h, got %s", c.PrequeueOpens)
	}
	r.OpensMs = startMs - pre.Milliseconds()
	if r.AdmitPerMinute == 0 {
		r.AdmitPerMinute = DefaultAdmitPerMinute
	}
	if r.AdmitPerMinute < 0 || r.AdmitPerMinute > 10_000_000 {
		errs.Add("waiting_room.admit_per_minute", "must be between 1 and 10000000, got %d", c.AdmitPerMinute)
	}
	if r.MaxActive < 0 || r.MaxActive > 100_000_000 {
		errs.Add("waiting_room.max_active", "must be between 0 (no cap) and 100000000, got %d", c.MaxActive)
	}
	sess := c.Session
	if sess == 0 {
		sess = DefaultSession
	}
	if sess < time.Second || sess > 24*time.Hour {
		errs.Add("waiting_room.session", "must be between 1s and 24h, got %s", c.Session)
	}
	r.SessionMs = sess.Milliseconds()
	switch c.Order {
	case "", "lottery_then_fifo":
	case "fifo":
		r.Order = FIFO
	default:
		errs.Add("waiting_room.order", "%q must be lottery_then_fifo or fifo", c.Order)
	}
	if r.Difficulty < 0 || r.Difficulty > MaxDifficulty {
		errs.Add("waiting_room.challenge.difficulty", "must be between 0 (off) and %d bits, got %d", MaxDifficulty, c.Challenge.Difficulty)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}
