package sale

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"flashgate/metrics"
	"flashgate/orders/orderid"
	"flashgate/orders/stock"
)

// A purchase whose deduction outcome is unknown (its script call was sent
// and got no answer: a timeout, a connection reset) is answered 503 with
// its order id (api.OutcomeUnknown), and the page follows the order by its
// result call. The order may exist or not, and a deduction still on its way
// may yet make it. The edge settles it in the background
// (stock.Store.ResolveUnknown): once Redis answers again, it finds the order
// (placed: it goes the normal way, the outbox relay sends its event), or
// makes sure it can never happen and records it as a failed order, which
// the result call then answers. Until then the result call answers
// NOT_FOUND, which the page reads as "not yet". An edge that exits
// gracefully settles what it can first (settleBeforeExit) and says it no
// longer follows the rest (stock.Store.EdgeStopped). When the edge dies (or
// restarts) before it settled the attempt, any edge's result call settles
// it (settleOrphan).

const (
	// maxUnknown bounds the attempts waiting to be settled: one stall of
	// Redis under a burst makes at most MaxBatch unknowns per product per
	// redis.timeout. Past it, an attempt is left unsettled (counted,
	// logged): a placed order still goes the normal way, and its page
	// still finds it; only a not placed one stays NOT_FOUND.
	maxUnknown = 10_000
	// unknownGiveUp is how long the edge keeps trying: as long as the
	// sale page follows an order.
	unknownGiveUp = 5 * time.Minute
	// The pause between passes while Redis does not answer.
	unknownRetryMin = 100 * time.Millisecond
	unknownRetryMax = 2 * time.Second
	// lookupTimeout bounds one order store lookup: a hung store must not
	// stop the settling of the other products.
	lookupTimeout = 5 * time.Second
	// unknownExitBudget bounds the last settling when the edge exits
	// gracefully (Stop): a supervisor's grace between SIGTERM and SIGKILL
	// (bench gives 5 s) must cover the drain, this and the wait for
	// rebuilds (2 s). What is not settled by then is left to settleOrphan.
	unknownExitBudget = 2 * time.Second
)

// unknowns are the attempts this edge has still to settle.
type unknowns struct {
	mu        sync.Mutex
	pending   []unknownAttempt
	unsettled int  // pending plus those in the pass under way
	running   bool // a settling goroutine is on it
	// ids are the order ids of the unsettled attempts: this process
	// follows these and no other (settleOrphan).
	ids map[int64]struct{}
	// exit is set by Stop (settleBeforeExit): the passes then run until it
	// ends, a placed order counts as settled, and wake cuts a pause short.
	exit context.Context
	wake chan struct{}
	// done is closed when the running goroutine returns.
	done chan struct{}

	results [numUnknownResults]metrics.Counter
}

type unknownAttempt struct {
	a      stock.Attempt // strings owned
	since  int64         // unix ns, the edge's clock
	placed bool          // found placed in Redis, not yet in the order store
}

type unknownResult int

const (
	unknownPlaced unknownResult = iota
	unknownNotPlaced
	unknownGivenUp
	unknownDropped
	numUnknownResults
)

var unknownResultNames = [numUnknownResults]string{"placed", "not_placed", "given_up", "dropped"}

// followUnknown queues a for settling. Off the success path: it copies.
func (s *Service) followUnknown(a *stock.Attempt) {
	c := *a
	c.UserID, c.TokenNonceHex = strings.Clone(a.UserID), strings.Clone(a.TokenNonceHex)
	u := &s.unknown
	u.mu.Lock()
	if u.unsettled >= maxUnknown {
		u.mu.Unlock()
		u.results[unknownDropped].Inc()
		if n := u.results[unknownDropped].Value(); n%1000 == 1 { // a line per thousand, not per attempt
			s.d.Log.Warn("too many purchases of unknown outcome to settle; this one is left to the ledger",
				"product", c.ProductID, "order", c.ID, "dropped_so_far", n)
		}
		return
	}
	u.pending = append(u.pending, unknownAttempt{a: c, since: s.d.Now()})
	u.unsettled++
	if u.ids == nil {
		u.ids = map[int64]struct{}{}
	}
	u.ids[c.ID] = struct{}{}
	s.startResolving()
	u.mu.Unlock()
}

// startResolving starts the settling goroutine unless one runs; u.mu held.
func (s *Service) startResolving() {
	u := &s.unknown
	if u.running {
		return
	}
	u.running = true
	u.done = make(chan struct{})
	if u.wake == nil {
		u.wake = make(chan struct{}, 1)
	}
	go s.resolveUnknowns(u.done)
}

// follows reports whether this process follows orderID (made it, and has
// not settled it yet).
func (s *Service) follows(orderID int64) bool {
	s.unknown.mu.Lock()
	defer s.unknown.mu.Unlock()
	_, ok := s.unknown.ids[orderID]
	return ok
}

// settleBeforeExit gives the attempts this process has yet to settle one
// last chance before it exits, within budget (nemesis finding 10: an edge
// stopped with SIGTERM right after a Redis master died left its unknown
// outcome unsettled, its result NOT_FOUND for good): a placed one is then
// left to the normal path (the outbox relay of any edge), the others are
// settled as usual where Redis answers. Whatever is left, and every other
// attempt this process made, is then handed off (stock.Store.EdgeStopped):
// any edge's result call settles it at once (settleOrphan) — whatever the
// clock of the process that takes this node's number next, which may start
// "before" the attempt when its clock is behind (the nemesis's edge-clock
// restarts a stopped edge 2 s behind).
func (s *Service) settleBeforeExit(budget time.Duration) {
	u := &s.unknown
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	u.mu.Lock()
	u.exit = ctx
	n := u.unsettled
	var done chan struct{}
	if n > 0 {
		if len(u.pending) > 0 {
			s.startResolving()
		}
		done = u.done
		select {
		case u.wake <- struct{}{}:
		default:
		}
	}
	u.mu.Unlock()
	if done != nil {
		s.d.Log.Info("exiting: settling the purchases of unknown outcome first", "unsettled", n, "budget", budget.String())
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	if left := s.unknownPending(); left > 0 {
		s.d.Log.Warn("exiting with purchases of unknown outcome not settled; any edge's result call settles them",
			"unsettled", left)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	defer hcancel()
	// The mark is the time of the order ids this process made: its clock,
	// or later when its ids run ahead of it (started after a crash behind
	// its predecessor's reservation, reserveIDs), so that every one of
	// them is handed off.
	stopMs := s.d.Now() / 1e6
	if s.d.IDs != nil {
		stopMs = max(stopMs, s.d.IDs.Tick())
	}
	if err := s.d.Store.EdgeStopped(hctx, s.d.Node, stopMs); err != nil {
		// Then they wait for this node's heartbeat to go stale, or for
		// its next process's start (settleOrphan).
		s.d.Log.Warn("could not record this edge's exit; its unsettled purchases are settled once its heartbeat is stale",
			"err", err)
	}
}

// resolveUnknowns runs passes over the pending attempts until none is left
// (or, once the edge exits, until its budget ends), then closes done.
// A product whose Redis call fails is skipped for the rest of the pass, so
// that a dead node costs one timeout per pass, not one per attempt, and the
// other products' attempts are settled meanwhile.
func (s *Service) resolveUnknowns(done chan struct{}) {
	defer close(done)
	u := &s.unknown
	pause := unknownRetryMin
	for {
		u.mu.Lock()
		batch := u.pending
		u.pending = nil
		exit := u.exit
		u.mu.Unlock()
		ctx := context.Background()
		if exit != nil {
			ctx = exit
		}

		var keep []unknownAttempt
		var ended []int64 // settled or given up
		down := map[string]bool{}
		progress := false
		for _, p := range batch {
			if down[p.a.ProductID] || ctx.Err() != nil {
				keep = append(keep, p)
				continue
			}
			v, err := s.settleOne(ctx, &p.a)
			switch {
			case errors.Is(err, stock.ErrClosed):
				// Shut down: what is placed goes the normal way.
				u.results[unknownGivenUp].Inc()
				ended = append(ended, p.a.ID)
			case v == stock.Placed && exit == nil && time.Duration(s.d.Now()-p.since) <= unknownGiveUp && !s.storedOrder(&p.a):
				// Placed in Redis, but its event is only in the outbox
				// until the relay sends it: a Redis that goes back in time
				// now (a lagging replica promoted) loses the order and its
				// event, and the shopper who read "pending" would read
				// NOT_FOUND for good (nemesis seed 202). Followed until the
				// order store has it; gone from Redis meanwhile, it is
				// settled again (failed, once the sale is rebuilt). Not
				// while exiting: then any edge's result call does it
				// (settleOrphan).
				if !p.placed {
					p.placed = true
					s.d.Log.Info("purchase of unknown outcome placed; followed until stored", "product", p.a.ProductID, "order", p.a.ID)
				}
				keep = append(keep, p)
			case v == stock.Placed:
				progress = true
				u.results[unknownPlaced].Inc()
				ended = append(ended, p.a.ID)
				s.d.Log.Info("purchase of unknown outcome settled: placed", "product", p.a.ProductID, "order", p.a.ID)
			case v == stock.NotPlaced:
				progress = true
				u.results[unknownNotPlaced].Inc()
				ended = append(ended, p.a.ID)
				s.d.Log.Info("purchase of unknown outcome settled: not placed", "product", p.a.ProductID, "order", p.a.ID)
			case time.Duration(s.d.Now()-p.since) > unknownGiveUp:
				u.results[unknownGivenUp].Inc()
				ended = append(ended, p.a.ID)
				s.d.Log.Warn("purchase of unknown outcome not settled; left to the ledger", "product", p.a.ProductID,
					"order", p.a.ID, "err", err)
			default:
				if err != nil {
					down[p.a.ProductID] = true
				}
				keep = append(keep, p)
			}
		}

		u.mu.Lock()
		u.unsettled -= len(ended)
		for _, id := range ended {
			delete(u.ids, id)
		}
		u.pending = append(keep, u.pending...)
		if len(u.pending) == 0 || ctx.Err() != nil {
			u.running = false
			u.mu.Unlock()
			return
		}
		exit = u.exit
		u.mu.Unlock()
		if progress || exit != nil {
			pause = unknownRetryMin
		}
		// A retry timer: nothing to await but Redis (or the exit).
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-u.wake:
		}
		t.Stop()
		pause = min(2*pause, unknownRetryMax)
	}
}

// settleOne looks first; only an order neither Redis nor the order store
// knows is fenced (see stock.Store.ResolveUnknown).
func (s *Service) settleOne(ctx context.Context, a *stock.Attempt) (stock.Verdict, error) {
	v, err := s.d.Store.ResolveUnknown(ctx, a, false)
	if err != nil || v != stock.Absent {
		return v, err
	}
	if s.d.Results != nil {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		_, found, err := s.d.Results.Get(lctx, a.ProductID, a.ID)
		cancel()
		if err != nil {
			return stock.ResolveLater, err
		}
		if found {
			return stock.Placed, nil
		}
	}
	return s.d.Store.ResolveUnknown(ctx, a, true)
}

// orphanAge is how old a purchase of unknown outcome must be before an edge
// other than the one that made it settles it from the shopper's result
// call (settleOrphan). It also bounds how often such a settlement can make
// a sale refuse the tokens minted before it: once per orphanAge at most,
// whatever order ids a caller makes up (an id its edge handed off on exit
// is older than that exit: once more at most).
const orphanAge = 5 * time.Second

// startSlack is how long after its start (by its clock) a live edge's
// process is trusted to follow the attempts its node made: the start and
// the order id are read on two processes' clocks, which may disagree (the
// nemesis restarts an edge 2 s behind: its start then reads "before" an
// attempt its predecessor made just before the restart, nemesis finding
// 10). An attempt of a live edge's first seconds may then be settled twice,
// which the one atomic script makes harmless.
const startSlack = 5 * time.Second

// settleOrphan settles, from a result call that found no order, a purchase
// of unknown outcome whose edge died or restarted before it settled it
// (nemesis findings 4 and 10: its result answered NOT_FOUND for good). The
// order id names the edge (its node) and the attempt's time. An orphan is
// one younger than the edge's own give-up (an id that names no edge that
// ever ran, or is older, answers NOT_FOUND as before) and
//   - made before its edge's process last exited gracefully and handed its
//     unsettled ones off (EdgeBeat's stop, on that process's own clock, as
//     the id is): settled at once;
//   - or at least orphanAge old, and not followed by a live process: of
//     this node but not among this process's own (follows), or of another
//     node whose heartbeat is stale or whose process started after it
//     (or less than startSlack before it, for the clocks).
//
// It is settled here: placed if its order is in Redis, else made impossible
// and recorded failed (stock.Store.ResolveOrphan), which the shopper's
// result then says. Judging a live edge's attempt an orphan costs little
// (the same atomic script decides, whoever runs it first; the tokens minted
// before are refused once); the other way round leaves it NOT_FOUND. Only
// an edge that can read the order store settles one: an order whose Redis
// state expired is there. It answers the order as it then is, false for
// "not yet".
func (s *Service) settleOrphan(productID, userID string, orderID int64) (stock.OrderInfo, bool) {
	e, known := s.d.Sales.GetString(productID)
	life, loaded := int64(0), false
	if known {
		life, loaded = s.tokenLife(e.Sale)
	}
	node, created := orderid.Node(orderID), orderid.Time(orderID).UnixMilli()
	now := s.d.Now() / 1e6
	mine := node == s.d.Node
	switch {
	case !loaded || s.d.Results == nil || created < now-unknownGiveUp.Milliseconds():
		// Older than any edge follows an unknown order: not made up here.
		return stock.OrderInfo{}, false
	case mine && s.follows(orderID):
		return stock.OrderInfo{}, false // this process follows it
	}
	young := created > now-orphanAge.Milliseconds() // its edge may still settle it
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	last, start, stop, err := s.d.Store.EdgeBeat(ctx, node)
	switch {
	case err != nil || last == 0:
		return stock.OrderInfo{}, false // no edge of that number ever ran
	case created <= stop:
		// Its process exited after it and handed it off.
	case young:
		return stock.OrderInfo{}, false
	case mine:
		// Made by an earlier process of this node, which died.
	case last >= now-3*s.interval.Milliseconds() && (start == 0 || start+startSlack.Milliseconds() <= created):
		return stock.OrderInfo{}, false // alive, and it follows it
	}
	v, err := s.d.Store.ResolveOrphan(ctx, stock.Orphan{ProductID: productID, OrderID: orderID, UserID: userID,
		TokensFromMs: now + life, CoveredMs: created + life})
	if err != nil || v == stock.ResolveLater {
		return stock.OrderInfo{}, false
	}
	if v == stock.NotPlaced {
		// The script raised the sale's token horizon to now + life.
		s.d.Sales.StateOf(productID).RaiseTokensFrom(now + life)
		s.unknown.results[unknownNotPlaced].Inc()
	} else {
		s.unknown.results[unknownPlaced].Inc()
	}
	s.d.Log.Info("purchase of unknown outcome settled for the edge that made it, which died or restarted",
		"product", productID, "order", orderID, "node", node, "verdict", v.String())
	o, ok, err := s.d.Store.OrderState(ctx, productID, orderID)
	return o, ok && err == nil
}

// storedOrder reports whether the order store has the attempt's order; true
// when this edge has no order store to ask (Redis's word is all it has).
func (s *Service) storedOrder(a *stock.Attempt) bool {
	if s.d.Results == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	_, found, err := s.d.Results.Get(ctx, a.ProductID, a.ID)
	return err == nil && found
}

// unknownPending is how many attempts wait to be settled.
func (s *Service) unknownPending() int {
	s.unknown.mu.Lock()
	defer s.unknown.mu.Unlock()
	return s.unknown.unsettled
}

func (s *Service) registerUnknownMetrics(reg *metrics.Registry) {
	reg.Register("flashgate_sale_unknown_outcomes_total", "Purchases of unknown outcome (sent, no answer), by how the edge settled them.", "counter", func(w *metrics.Writer) {
		for i := range s.unknown.results {
			w.Value(float64(s.unknown.results[i].Value()), metrics.Label{Name: "result", Value: unknownResultNames[i]})
		}
	})
	reg.Register("flashgate_sale_unknown_pending", "Purchases of unknown outcome this edge has yet to settle.", "gauge", func(w *metrics.Writer) {
		w.Value(float64(s.unknownPending()))
	})
}
