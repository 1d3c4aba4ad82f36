package main

import (
	"fmt"
	"time"

	"flashgate/conf/field"
)

// The waitingroom scenario: a sale behind the edge's waiting room on two
// edges that share one Redis. Shoppers join the pre-queue over its last
// seconds, more join right after the opening, every one polls her place
// (GET /api/seckill/queue, 1-2 s jittered) until admitted, then asks for a
// token (handed out with the admission) and buys. bench measures the
// answers' latency, the admission rate each edge shows against the one
// configured, that nobody bought out of turn, the stock sold, reconcile,
// and the fairness of the pre-queue's lottery (waitingroomrun.go,
// waitingroomstats.go).

// Room is the waitingroom scenario's section.
type Room struct {
	Edges          int           `yaml:"edges"`            // edges on the one Redis (default 2)
	PreJoins       int           `yaml:"pre_joins"`        // shoppers joining the pre-queue ...
	PreOver        time.Duration `yaml:"pre_over"`         // ... spread evenly over its last this long
	PostJoins      int           `yaml:"post_joins"`       // shoppers joining after the opening ...
	PostOver       time.Duration `yaml:"post_over"`        // ... spread evenly over this long from it
	AdmitPerMinute int           `yaml:"admit_per_minute"` // the room's admission rate
	MaxActive      int           `yaml:"max_active"`       // the room's cap of shoppers active at once (0: none)
	Session        time.Duration `yaml:"session"`          // an admitted shopper's time to buy
	Order          string        `yaml:"order"`            // lottery_then_fifo | fifo
	PollMin        time.Duration `yaml:"poll_min"`         // a shopper polls her place every poll_min..poll_max (uniform)
	PollMax        time.Duration `yaml:"poll_max"`
	// RateSkip and RateWindow: the admission rate is measured from
	// RateSkip after the opening over RateWindow.
	RateSkip   time.Duration `yaml:"rate_skip"`
	RateWindow time.Duration `yaml:"rate_window"`
	// Early is the share of shoppers who also try to buy right after
	// joining, before their turn: each must be refused 403 NOT_ADMITTED.
	Early float64 `yaml:"early"`
	// Startup is how long bench allows the edges to start before the
	// first join (the sale's times are fixed in their config).
	Startup time.Duration `yaml:"startup"`
	// Challenge is the proof of work's difficulty (leading zero bits, 0:
	// none); bench asks for a challenge and solves it before each join.
	Challenge int `yaml:"challenge"`
}

func (sc *Scenario) validateRoom(errs *field.Errors) {
	w := sc.WaitingRoom
	if w == nil {
		return
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if w.Edges == 0 {
		w.Edges = 2
	}
	if w.Order == "" {
		w.Order = "lottery_then_fifo"
	}
	def(&w.PreOver, 30*time.Second)
	def(&w.PostOver, time.Second)
	def(&w.Session, 2*time.Minute)
	def(&w.PollMin, time.Second)
	def(&w.PollMax, 2*time.Second)
	def(&w.RateSkip, 2*time.Second)
	def(&w.RateWindow, 30*time.Second)
	def(&w.Startup, 20*time.Second)
	if w.Edges < 1 || w.Edges > 4 {
		errs.Add("waiting_room.edges", "must be 1..4")
	}
	if w.PreJoins < 0 || w.PostJoins < 0 || w.PreJoins+w.PostJoins < 1 {
		errs.Add("waiting_room.pre_joins", "pre_joins and post_joins must not be negative, and someone must join")
	}
	if w.PreJoins+w.PostJoins > 200_000 {
		errs.Add("waiting_room.pre_joins", "at most 200000 shoppers in all (each is a goroutine and a signed session)")
	}
	if w.PreOver < 0 || w.PreOver > 10*time.Minute || w.PostOver < 0 || w.PostOver > 10*time.Minute {
		errs.Add("waiting_room.pre_over", "pre_over and post_over must be 0..10m")
	}
	if w.AdmitPerMinute < 1 {
		errs.Add("waiting_room.admit_per_minute", "must be >= 1")
	}
	if w.MaxActive < 0 {
		errs.Add("waiting_room.max_active", "must not be negative (0: no cap)")
	}
	if w.Session <= 0 {
		errs.Add("waiting_room.session", "must be > 0")
	}
	if w.Order != "lottery_then_fifo" && w.Order != "fifo" {
		errs.Add("waiting_room.order", "must be lottery_then_fifo or fifo, not %q", w.Order)
	}
	if w.Challenge < 0 || w.Challenge > 24 {
		errs.Add("waiting_room.challenge", "want 0 (none) to 24 bits")
	}
	if w.PollMin <= 0 || w.PollMax < w.PollMin {
		errs.Add("waiting_room.poll_min", "want 0 < poll_min <= poll_max")
	}
	if w.RateSkip < 0 || w.RateWindow <= 0 {
		errs.Add("waiting_room.rate_window", "want rate_skip >= 0 and rate_window > 0")
	}
	if w.Early < 0 || w.Early > 1 {
		errs.Add("waiting_room.early", "must be in [0, 1]")
	}
	if w.Startup < 5*time.Second || w.Startup > 5*time.Minute {
		errs.Add("waiting_room.startup", "must be 5s..5m")
	}
	if sc.Products != 1 {
		errs.Add("products", "the waitingroom scenario runs one sale (products: 1)")
	}
	if sc.Quantity != 1 {
		errs.Add("quantity", "the waitingroom scenario buys one unit per shopper (quantity: 1)")
	}
	if n := w.PreJoins + w.PostJoins; sc.Users < n {
		errs.Add("users", "at least pre_joins + post_joins (%d): one ticket per shopper", n)
	}
	if sc.Failover != nil || sc.Fleet != nil {
		errs.Add("waiting_room", "not with failover or fleet: a scenario is one of them")
	}
	if sc.Faults.Redis != nil || sc.Faults.Origin != nil {
		errs.Add("faults", "not with waiting_room")
	}
}

// shoppers is how many join in all.
func (w *Room) shoppers() int { return w.PreJoins + w.PostJoins }

// admissionLasts is how long admitting every shopper takes at the
// configured rate.
func (w *Room) admissionLasts() time.Duration {
	return time.Duration(float64(w.shoppers()) / float64(w.AdmitPerMinute) * float64(time.Minute))
}

func describeRoom(sc *Scenario) string {
	w := sc.WaitingRoom
	return fmt.Sprintf("%d edges on one Redis; %d shoppers join the pre-queue over its last %v, %d more over %v after the opening; polling every %v-%v; admission %d/min (all admitted in %v), %s; stock %d",
		w.Edges, w.PreJoins, w.PreOver, w.PostJoins, w.PostOver, w.PollMin, w.PollMax, w.AdmitPerMinute,
		w.admissionLasts().Round(time.Second), w.Order, sc.Stock)
}
