package deadline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/metrics"
	"flashgate/orders/broker"
	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// Defaults of Config.
const (
	DefaultEvery = 100 * time.Millisecond
	DefaultBatch = 256
)

// LatenessBuckets are the upper bounds (seconds) of Stats.Lateness: from a
// millisecond, the script's own time, to a minute, an edge fleet that was
// down.
var LatenessBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Config configures a Sweeper. Store, Publisher and Products are required.
type Config struct {
	Store     *stock.Store
	Publisher *broker.Publisher
	// Products returns the ids of the products to sweep; called once per
	// sweep.
	Products func() []string
	// Every is the pause between sweeps (default 100ms), jittered by up to
	// ±25% so that the edges' sweeps spread out.
	Every time.Duration
	// Batch is the most orders one script call releases (default 256); a
	// full batch is followed by the next at once.
	Batch int
	// OnReleased, if set, is called after each batch of one product's
	// releases (their events published or left to the relay), on the
	// sweeper's goroutine: keep it short.
	OnReleased func(product string, s []stock.Settlement)
	Log        *slog.Logger // default slog.Default()
}

// Stats are a Sweeper's counters since New.
type Stats struct {
	Sweeps   uint64 // passes over the products
	Released uint64 // orders this edge released by their deadline
	// PublishErrors counts releases whose event Kafka did not take from
	// here (the relay re-sends them from the outbox).
	PublishErrors uint64
	// Errors counts failed ExpireDue calls (other than a sale not warmed
	// or recovering, which are skipped).
	Errors uint64
	// Lateness is the histogram of Redis' time at each release minus the
	// order's deadline; the same histogram for the Sweeper's life.
	Lateness *metrics.Histogram
	// MaxLatenessMs is the largest lateness seen, in ms.
	MaxLatenessMs int64
}

// Sweeper releases the orders whose pay deadline passed.
type Sweeper struct {
	cfg      Config
	lateness *metrics.Histogram

	mu     sync.Mutex
	stop   context.CancelFunc
	done   chan struct{}
	closed bool

	logMu   sync.Mutex
	lastLog map[string]time.Time // product -> last error logged

	sweeps, released, publishErrs, errs atomic.Uint64
	maxLateMs                           atomic.Int64
}

// New checks cfg and returns a Sweeper; Start runs it.
func New(cfg Config) (*Sweeper, error) {
	if cfg.Store == nil || cfg.Publisher == nil || cfg.Products == nil {
		return nil, errors.New("deadline: the sweeper needs Store, Publisher and Products")
	}
	if cfg.Every < 0 || cfg.Batch < 0 {
		return nil, fmt.Errorf("deadline: Every (%v) and Batch (%d) must not be negative", cfg.Every, cfg.Batch)
	}
	if cfg.Every == 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Sweeper{cfg: cfg, lateness: metrics.NewHistogram(LatenessBuckets), lastLog: map[string]time.Time{}}, nil
}

// Start sweeps in the background until Close. Calling it again does
// nothing.
func (s *Sweeper) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil || s.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done = cancel, make(chan struct{})
	go s.run(ctx)
}

// Close stops the sweeps and waits for the one running.
func (s *Sweeper) Close() {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.closed, s.stop = true, nil
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func (s *Sweeper) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(s.pause())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, _ = s.Sweep(ctx) // errors are logged and counted
		t.Reset(s.pause())
	}
}

// pause is Every ±25%.
func (s *Sweeper) pause() time.Duration {
	e := s.cfg.Every
	return e - e/4 + rand.N(e/2+1)
}

// Sweep runs one pass over the products and returns the orders it
// released. The error joins the failures of the products that failed; the
// others were swept.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	s.sweeps.Add(1)
	total := 0
	var errs []error
	for _, p := range s.cfg.Products() {
		n, err := s.sweepProduct(ctx, p)
		total += n
		if err != nil {
			if ctx.Err() != nil {
				return total, ctx.Err()
			}
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// sweepProduct releases the product's due orders, batch after full batch.
func (s *Sweeper) sweepProduct(ctx context.Context, p string) (int, error) {
	total := 0
	for {
		n, err := s.batch(ctx, p)
		total += n
		if err != nil || n < s.cfg.Batch {
			return total, err
		}
	}
}

// batch is one ExpireDue call and what follows it. It is a flight from
// before the script until its publishes returned.
func (s *Sweeper) batch(ctx context.Context, p string) (int, error) {
	fl := s.cfg.Publisher.Flights().Enter()
	defer fl.Leave()
	released, err := s.cfg.Store.ExpireDue(ctx, p, s.cfg.Batch)
	if err != nil {
		if errors.Is(err, stock.ErrNotWarmed) || errors.Is(err, stock.ErrRecovering) {
			return 0, nil // nothing to release until it is open again
		}
		if ctx.Err() != nil {
			return 0, ctx.Err() // closing: the call was cut short, not failed
		}
		s.errs.Add(1)
		s.logErr(p, "pay deadline sweep failed; the next sweep tries again", err)
		return 0, fmt.Errorf("deadline: %s: %w", p, err)
	}
	if len(released) == 0 {
		return 0, nil
	}
	s.released.Add(uint64(len(released)))
	ids := make([]int64, len(released))
	for i := range released {
		st := &released[i]
		ids[i] = st.Info.ID
		at := st.Info.ClosedMs
		if at == 0 {
			at = st.AtMs
		}
		late := max(0, at-st.Info.PayByMs)
		s.lateness.Observe(time.Duration(late) * time.Millisecond)
		for {
			m := s.maxLateMs.Load()
			if late <= m || s.maxLateMs.CompareAndSwap(m, late) {
				break
			}
		}
	}
	s.publish(ctx, p, released)
	if err := s.cfg.Store.PublishChange(ctx, p, stock.KindExpired, ids...); err != nil {
		s.logErr(p, "pay deadline sweep: telling the edges the orders expired failed (their shoppers learn it on their next poll)", err)
	}
	if err := s.cfg.Store.PublishSoldOut(ctx, p, false); err != nil {
		s.logErr(p, "pay deadline sweep: telling the edges the product has stock again failed", err)
	}
	if s.cfg.OnReleased != nil {
		s.cfg.OnReleased(p, released)
	}
	return len(released), nil
}

// publish sends the release events and removes the outbox entries of those
// Kafka acknowledged; the others stay for the relay.
func (s *Sweeper) publish(ctx context.Context, p string, released []stock.Settlement) {
	evs := make([]order.Event, len(released))
	for i := range released {
		evs[i] = released[i].Event()
	}
	err := s.cfg.Publisher.Publish(ctx, evs...)
	var done []string
	var werr kafka.WriteErrors
	switch {
	case err == nil:
		for i := range released {
			done = append(done, released[i].OutboxID)
		}
	case errors.As(err, &werr) && len(werr) == len(released):
		for i, e := range werr {
			if e == nil {
				done = append(done, released[i].OutboxID)
			}
		}
	}
	if n := len(released) - len(done); n > 0 {
		s.publishErrs.Add(uint64(n))
		s.logErr(p, "pay deadline sweep: release events not acknowledged by Kafka; the outbox relay re-sends them", err, "events", n)
	}
	if len(done) > 0 {
		if aerr := s.cfg.Store.AckOutbox(context.WithoutCancel(ctx), p, done...); aerr != nil {
			// Published and still in the outbox: the relay re-sends them,
			// a duplicate the store keeps once.
			s.logErr(p, "pay deadline sweep: removing published outbox entries failed", aerr)
		}
	}
}

// logErr logs at most one error per product every 10 s: a Redis outage
// fails every sweep.
func (s *Sweeper) logErr(p, msg string, err error, args ...any) {
	s.logMu.Lock()
	now := time.Now()
	if now.Sub(s.lastLog[p]) < 10*time.Second {
		s.logMu.Unlock()
		return
	}
	s.lastLog[p] = now
	s.logMu.Unlock()
	s.cfg.Log.Warn(msg, append([]any{"product", p, "err", err}, args...)...)
}

// Stats returns the counters.
func (s *Sweeper) Stats() Stats {
	return Stats{Sweeps: s.sweeps.Load(), Released: s.released.Load(), PublishErrors: s.publishErrs.Load(),
		Errors: s.errs.Load(), Lateness: s.lateness, MaxLatenessMs: s.maxLateMs.Load()}
}
