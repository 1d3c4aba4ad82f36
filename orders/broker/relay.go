package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/conf"
	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// RelayConfig configures a Relay. Store, Publisher and Products are
// required; the settings edge.yaml has (Interval, MinAge: orders.relay_*)
// take conf's defaults when zero; the others have defaults of their own.
type RelayConfig struct {
	Store     *stock.Store
	Publisher *Publisher
	// Products returns the ids of the products whose outboxes to sweep;
	// called once per sweep.
	Products func() []string
	// Node is the edge's node id; Consumer defaults to
	// "edge<Node>-<hostname>-<pid>", unique per process, so that a
	// restarted edge is a new consumer and its predecessor's pending
	// entries are claimed like any dead edge's.
	Node     int
	Consumer string
	// Interval between sweeps.
	Interval time.Duration
	// MinAge is how long an entry must have sat in the relay group's
	// pending list before the relay re-sends it. The direct path normally
	// removes an entry within milliseconds; MinAge must be well above the
	// edge's publish timeout, or the relay re-sends what the direct path is
	// still publishing (harmless, but duplicates).
	MinAge time.Duration
	// Count is the entries per XREADGROUP / XAUTOCLAIM call (default 256).
	Count int
	// MaxPerSweep bounds the entries taken and claimed per product and
	// sweep (default 16384), so that one huge outbox cannot starve the
	// others; the rest waits for the next sweep.
	MaxPerSweep int
	// ForgetAfter is how long another consumer of the group must have had
	// nothing pending and not read the outbox before this relay removes it
	// (stock.ForgetDeadRelays): every edge restart leaves a dead consumer
	// name behind, and its pending entries are claimed after MinAge, so it
	// is gone ForgetAfter after that. A live relay reads every Interval and
	// is never removed. Default max(5m, 10 x MinAge, 10 x Interval); at
	// least 2 x MinAge and 2 x Interval; negative: never remove any.
	ForgetAfter time.Duration
	Log         *slog.Logger // default slog.Default()
}

// defaultForgetAfter is ForgetAfter's floor when it is not set.
const defaultForgetAfter = 5 * time.Minute

// check rejects a config without what it needs, fills the zero edge.yaml
// settings from conf's defaults, refuses one that is set but invalid, and
// fills the settings that are not edge.yaml's.
func (c *RelayConfig) check() error {
	if c.Store == nil || c.Publisher == nil || c.Products == nil {
		return errors.New("orders: relay needs Store, Publisher and Products")
	}
	o := conf.OrdersConfig{RelayInterval: c.Interval, RelayMinAge: c.MinAge}.WithDefaults()
	c.Interval, c.MinAge = o.RelayInterval, o.RelayMinAge
	if c.Interval < 0 || c.MinAge < 0 {
		return fmt.Errorf("orders: relay: Interval and MinAge must not be negative (orders.relay_interval, orders.relay_min_age), got %v and %v", c.Interval, c.MinAge)
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = "edge" + strconv.Itoa(c.Node) + "-" + host + "-" + strconv.Itoa(os.Getpid())
	}
	switch {
	case c.ForgetAfter == 0:
		c.ForgetAfter = max(defaultForgetAfter, 10*c.MinAge, 10*c.Interval)
	case c.ForgetAfter > 0 && (c.ForgetAfter < 2*c.MinAge || c.ForgetAfter < 2*c.Interval):
		return fmt.Errorf("orders: relay: ForgetAfter must be at least twice MinAge (%v) and Interval (%v), or a relay could remove a live one, got %v", c.MinAge, c.Interval, c.ForgetAfter)
	}
	if c.Count <= 0 {
		c.Count = 256
	}
	if c.MaxPerSweep <= 0 {
		c.MaxPerSweep = 16384
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.MinAge <= c.Publisher.cfg.Timeout {
		c.Log.Warn("outbox relay: MinAge is not above the publish timeout; the relay will re-send orders the direct path is still publishing",
			"minAge", c.MinAge, "publishTimeout", c.Publisher.cfg.Timeout)
	}
	return nil
}

// Relay is the outbox sweeper that runs in every edge. Each product's
// outbox stream sk:{p}:outbox has one consumer group, stock.RelayGroup,
// shared by all edges. Every sweep, per product:
//
//  1. XREADGROUP ... > takes entries no relay has seen into this edge's
//     pending list, without publishing them: the direct path (the edge that
//     made the order, or settled it: a payment, a cancel, a pay-deadline
//     sweep) is publishing them right now and removes each entry once Kafka
//     acknowledged it (Publisher.PublishAndAck, stock.AckOutbox).
//  2. XAUTOCLAIM takes entries that sat in any consumer's pending list for
//     MinAge — this edge's, a live peer's or a dead edge's alike — and
//     publishes the ones still in the stream: the direct path never
//     acknowledged them (503 answered, publish failed, edge crashed between
//     the deduction and Kafka). Once Kafka acknowledged them they are
//     removed (XDEL + XACK). Delivery is at least once: the consumer drops
//     duplicates by order id.
//  3. Now and then (every ForgetAfter / 4) it removes the consumers of
//     dead edges from the group (stock.ForgetDeadRelays): nothing pending
//     (step 2 claimed it), not read for ForgetAfter. Each TakeOutbox
//     records this relay as alive for ForgetAfter, because Redis 7.0's
//     XINFO idle time only restarts when a consumer is handed entries, and
//     a live relay on a quiet outbox would look as dead as a gone one.
//
// Entries the direct path already deleted come back from XAUTOCLAIM (Redis
// 7) in its list of deleted ids, and Redis drops them from the pending list
// itself. miniredis (v2.40) skips them and keeps them in its pending list
// (XPENDING hides them), which is why stock.AckOutbox XACKs as well as
// XDELs: with the direct path's XACK nothing deleted stays pending there
// either.
//
// An entry whose fields do not make a valid event goes to the dead-letter
// topic (source "outbox") and is removed.
type Relay struct {
	cfg    RelayConfig
	groups sync.Map // product -> struct{}: group created

	mu     sync.Mutex
	closed bool
	stop   context.CancelFunc
	done   chan struct{}

	sweeps, taken, relayed, deadLettered, errs, forgotten atomic.Uint64
	lastLagMs                                             atomic.Int64
	lastForget                                            atomic.Int64 // unix ns of the last ForgetDeadRelays pass
}

// NewRelay builds a Relay; Start runs it.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg}
	// The first pass comes ForgetAfter / 4 after the start, not at the
	// first sweep: a restarted edge's predecessor is not dead for long
	// enough yet anyway, and a starting edge makes no extra script calls.
	r.lastForget.Store(time.Now().UnixNano())
	return r, nil
}

// Consumer is this relay's consumer name in the group.
func (r *Relay) Consumer() string { return r.cfg.Consumer }

// Start runs a sweep every Interval in a goroutine until Close.
func (r *Relay) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.stop, r.done = cancel, done
	go func() {
		defer close(done)
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			r.Sweep(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Close stops the sweeps and waits for the one in progress, which is
// cancelled: what it had claimed but not published stays pending and is
// claimed again after MinAge (by any edge).
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	stop, done := r.stop, r.done
	r.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Sweep runs one pass over all products and returns how many entries it
// re-sent. Errors are logged and counted; the first is returned.
func (r *Relay) Sweep(ctx context.Context) (relayed int, err error) {
	r.sweeps.Add(1)
	var lag time.Duration
	var swept []string // products swept without an error
	for _, p := range r.cfg.Products() {
		if ctx.Err() != nil {
			break
		}
		n, l, perr := r.sweepProduct(ctx, p)
		relayed += n
		lag = max(lag, l)
		if perr != nil && ctx.Err() == nil {
			r.errs.Add(1)
			r.cfg.Log.Warn("outbox relay", "product", p, "err", perr)
			if err == nil {
				err = perr
			}
		} else if perr == nil {
			swept = append(swept, p)
		}
	}
	r.lastLagMs.Store(lag.Milliseconds())
	r.forgetDead(ctx, swept)
	return relayed, err
}

// forgetDead removes dead edges' consumers from the products' relay groups
// when ForgetAfter / 4 has passed since the last time. Only products whose
// sweep went well: a failing Redis gets no extra calls. Errors are logged,
// not returned: the dead consumers cost memory, not orders, and the next
// pass tries again.
func (r *Relay) forgetDead(ctx context.Context, products []string) {
	if r.cfg.ForgetAfter <= 0 || len(products) == 0 {
		return
	}
	now := time.Now().UnixNano()
	last := r.lastForget.Load()
	if time.Duration(now-last) < r.cfg.ForgetAfter/4 || !r.lastForget.CompareAndSwap(last, now) {
		return
	}
	for _, p := range products {
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := withCallTimeout(ctx)
		gone, err := r.cfg.Store.ForgetDeadRelays(cctx, p, r.cfg.Consumer, r.cfg.ForgetAfter)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Log.Warn("outbox relay: removing dead consumers", "product", p, "err", err)
			}
			continue
		}
		if len(gone) > 0 {
			r.forgotten.Add(uint64(len(gone)))
			r.cfg.Log.Info("outbox relay: removed dead consumers", "product", p, "consumers", gone)
		}
	}
}

// callTimeout bounds each Redis call of a sweep.
const callTimeout = 5 * time.Second

func withCallTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

// sweepProduct returns the entries re-sent and the age of the oldest one.
// It counts as a flight (Publisher.Flights) from reading the outbox until
// its publishes returned: an entry read from a server that then went back
// in time is still in Kafka's future.
func (r *Relay) sweepProduct(ctx context.Context, product string) (int, time.Duration, error) {
	fl := r.cfg.Publisher.flights.Enter()
	defer fl.Leave()
	if _, ok := r.groups.Load(product); !ok {
		cctx, cancel := withCallTimeout(ctx)
		err := r.cfg.Store.CreateRelayGroup(cctx, product)
		cancel()
		if err != nil {
			return 0, 0, err
		}
		r.groups.Store(product, struct{}{})
	}
	if err := r.take(ctx, product); err != nil {
		if errors.Is(err, stock.ErrNoGroup) {
			// Redis lost its memory (or the key was deleted): create the
			// group again next sweep, from id 0.
			r.groups.Delete(product)
		}
		return 0, 0, err
	}
	return r.claim(ctx, product)
}

// take moves new entries into this consumer's pending list.
func (r *Relay) take(ctx context.Context, product string) error {
	for n := 0; n < r.cfg.MaxPerSweep; {
		cctx, cancel := withCallTimeout(ctx)
		got, err := r.cfg.Store.TakeOutbox(cctx, product, r.cfg.Consumer, r.cfg.Count, max(r.cfg.ForgetAfter, 0))
		cancel()
		if err != nil {
			return err
		}
		r.taken.Add(uint64(got))
		if n += got; got < r.cfg.Count {
			return nil
		}
	}
	return nil
}

// claim re-sends entries pending for MinAge.
func (r *Relay) claim(ctx context.Context, product string) (int, time.Duration, error) {
	cursor, relayed := "0-0", 0
	var lag time.Duration
	for n := 0; n < r.cfg.MaxPerSweep; {
		cctx, cancel := withCallTimeout(ctx)
		next, entries, err := r.cfg.Store.ClaimOutbox(cctx, product, r.cfg.Consumer, r.cfg.MinAge, cursor, r.cfg.Count)
		cancel()
		if err != nil {
			if errors.Is(err, stock.ErrNoGroup) {
				r.groups.Delete(product)
			}
			return relayed, lag, err
		}
		n += len(entries)
		sent, l, err := r.relay(ctx, product, entries)
		relayed += sent
		lag = max(lag, l)
		if err != nil {
			return relayed, lag, err
		}
		if cursor = next; cursor == "0-0" {
			return relayed, lag, nil
		}
	}
	return relayed, lag, nil
}

// relay publishes claimed entries and removes those Kafka acknowledged.
func (r *Relay) relay(ctx context.Context, product string, entries []stock.OutboxEntry) (int, time.Duration, error) {
	var (
		evs  []order.Event
		ids  []string // the entries of evs, each once
		ends []int    // ends[i]: evs[ends[i-1]:ends[i]] are ids[i]'s events
		gone []string // ids whose entries are deleted: only XACK needed
		dead []string // dead-lettered: remove
		lag  time.Duration
	)
	now := time.Now()
	for i := range entries {
		e := &entries[i]
		if e.Deleted() {
			gone = append(gone, e.ID)
			continue
		}
		if t, ok := e.Time(); ok {
			lag = max(lag, now.Sub(t))
		}
		es, err := EventsFromOutbox(e)
		if err != nil {
			v, _ := json.Marshal(e.Fields)
			if derr := r.cfg.Publisher.DeadLetter(ctx, []byte(e.RawOrderID()), v, "outbox "+stock.OutboxKey(product)+" "+e.ID, err.Error()); derr != nil {
				return 0, lag, derr
			}
			r.deadLettered.Add(1)
			dead = append(dead, e.ID)
			continue
		}
		evs = append(evs, es...)
		ids = append(ids, e.ID)
		ends = append(ends, len(evs))
	}
	var done []string // published: remove
	var perr error
	if len(evs) > 0 {
		perr = r.cfg.Publisher.Publish(ctx, evs...)
		var werr kafka.WriteErrors
		switch {
		case perr == nil:
			done = ids
		case errors.As(perr, &werr) && len(werr) == len(evs):
			// Some were acknowledged: remove the entries all of whose
			// events were, keep the rest pending (a batch entry is sent
			// again whole; the consumer drops what it has).
			lo := 0
			for i, hi := range ends {
				if !slices.ContainsFunc(werr[lo:hi], func(e error) bool { return e != nil }) {
					done = append(done, ids[i])
				}
				lo = hi
			}
		}
	}
	sent := len(done)
	if rm := append(append(done, dead...), gone...); len(rm) > 0 {
		if err := r.cfg.Store.AckOutbox(ctx, product, rm...); err != nil {
			// Published but still pending: re-sent after MinAge, a
			// duplicate the consumer drops.
			return 0, lag, errors.Join(perr, err)
		}
	}
	r.relayed.Add(uint64(sent))
	if perr != nil {
		var werr kafka.WriteErrors
		if errors.As(perr, &werr) {
			// One line in the log, not one error per entry.
			for _, e := range werr {
				if e != nil {
					perr = e
					break
				}
			}
		}
		return sent, lag, fmt.Errorf("publish %d of %d claimed entries failed: %w", len(ids)-sent, len(ids), perr)
	}
	return sent, lag, nil
}

// RelayStats are counters since NewRelay.
type RelayStats struct {
	Sweeps       uint64
	Taken        uint64 // new entries taken into this relay's pending list
	Relayed      uint64 // entries re-sent to Kafka and removed
	DeadLettered uint64
	Errors       uint64        // failed product sweeps
	Forgotten    uint64        // dead edges' consumers removed from the groups
	LastLag      time.Duration // age of the oldest entry the last sweep re-sent
}

// Stats returns the counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Sweeps: r.sweeps.Load(), Taken: r.taken.Load(), Relayed: r.relayed.Load(),
		DeadLettered: r.deadLettered.Load(), Errors: r.errs.Load(), Forgotten: r.forgotten.Load(),
		LastLag: time.Duration(r.lastLagMs.Load()) * time.Millisecond,
	}
}
