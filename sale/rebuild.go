package sale

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
)

// Ledger is what warm-up rebuilds a sale from when its stock key is
// missing: the order store, and the events Kafka acknowledged that the
// consumer group has not stored yet — the topic's uncommitted tail, or,
// when that cannot be read, a wait until the group drained
// (orderstore.Ledger implements it). nil means "no ledger":
// a sale known to be lost then stays closed, and only a sale never opened
// anywhere (no meta in Redis, never seen by this edge) is warmed with the
// configured stock.
type Ledger interface {
	// Rebuild reads the product's ledger and the topic's uncommitted
	// tail (State.Tail: events Kafka acknowledged that the store may not
	// hold yet), or, without a tail, waits until the pipeline drained
	// (everything Kafka acknowledged is stored) first. orderIDs are orders
	// warm-up counts itself unless stored (outbox entries) or corrects
	// (surviving order hashes): the state says which of them, and of the
	// tail's, are stored, consistently with its counts.
	Rebuild(ctx context.Context, productID string, orderIDs []int64) (orderstore.LedgerState, error)
	// Statuses is the stored ones of the product's orders ids, now
	// (without a drain): after the rebuild wrote the tail's orders as
	// pending, for those the consumer stored meanwhile (markStoredTail).
	Statuses(ctx context.Context, productID string, ids []int64) (map[int64]orderstore.OrderStatus, error)
	// Settled is one page of the product's settled orders (paid,
	// cancelled, expired) by order id, above afterID, at most limit;
	// read after Rebuild, without another drain.
	Settled(ctx context.Context, productID string, afterID int64, limit int) ([]orderstore.Row, error)
}

// settledPage bounds the rows of one ledger read of the settled orders.
const settledPage = 5000

// rebuilder is the Service's memory of fenced sales (see stock.Store.Fence).
type rebuilder struct {
	mu      sync.Mutex
	running map[string]bool   // products this edge is recovering right now
	quiet   map[string]string // product -> the fence this edge said it is quiet on
	fenced  map[string]string // product -> the fence the last refresh saw ("" open)
	counts  map[string]int64  // product -> rebuilds this edge ran
	wg      sync.WaitGroup
}

// recoverTimeout bounds one recovery after the in-flight bound: the wait
// for the other edges, the tail (or the drain), the ledger reads and the writes. A recovery that
// fails leaves the sale fenced; the next refresh starts another.
const recoverTimeout = 15 * time.Second

// quietPoll is how often the rebuilding edge looks for the other edges'
// word that they are quiet.
const quietPoll = 50 * time.Millisecond

// startRecovery recovers the fenced (fence != "") or lost sale in the
// background, unless this edge is recovering it already; done is closed
// when that recovery ends.
func (s *Service) startRecovery(a *catalog.Sale, fence string) {
	p := a.ProductID
	s.rb.mu.Lock()
	if s.rb.running == nil {
		s.rb.running, s.rb.quiet, s.rb.counts = map[string]bool{}, map[string]string{}, map[string]int64{}
	}
	if s.rb.running[p] {
		s.rb.mu.Unlock()
		return
	}
	s.rb.running[p] = true
	s.rb.wg.Add(1)
	s.rb.mu.Unlock()
	a = new(*a) // the caller's copy may change with the next refresh
	go func() {
		defer s.rb.wg.Done()
		defer func() {
			s.rb.mu.Lock()
			delete(s.rb.running, p)
			s.rb.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), s.d.InFlight+recoverTimeout)
		defer cancel()
		if err := s.recoverSale(ctx, a, fence); err != nil {
			s.d.Log.Warn("sale recovery failed; the sale stays closed and the next refresh tries again", "product", p, "err", err)
		}
	}()
}

// Recovering reports whether the last refresh found the sale fenced
// (closed until rebuilt from the ledger), and how many rebuilds of it this
// edge ran.
func (s *Service) Recovering(productID string) (fenced bool, rebuilds int64) {
	s.rb.mu.Lock()
	defer s.rb.mu.Unlock()
	return s.rb.fenced[productID] != "", s.rb.counts[productID]
}

// kick starts the recovery of a sale whose deduction answered Recovering.
func (s *Service) kick(e catalog.Entry) {
	s.startRecovery(e.Sale, "")
}

// awaitRecoveries waits for the recoveries started so far (Apply at
// start-up, so that a sale that can be reopened is open when it returns).
func (s *Service) awaitRecoveries(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.rb.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// recoverSale takes a fenced sale (or, fence "", one whose stock key is
// missing: it fences it first) back to open:
//
//  1. this edge settles what it has in flight and says it is quiet;
//  2. one edge (the lock holder) waits until every live edge is quiet on
//     the fence, or until the in-flight bound (Deps.InFlight) since the
//     fence passed, so that no event of a deduction from before it can
//     still reach Kafka after the next step;
//  3. it reads the outbox, the orders topic's uncommitted tail and the
//     ledger (plan; the drain only when the tail cannot be read), then
//     stock.Store.Rebuild lowers the stock to the ledger's, sets the
//     buyers' counts to the ledger's (lowered as well as raised: a stale
//     snapshot holds the units of orders released since), corrects order
//     states (the tail's orders not stored yet made pending), refuses
//     older purchase tokens and lifts the fence; the tail's orders stored
//     meanwhile are marked success (markStoredTail).
//
// The other edges stop after step 1; their refresh sees the fence lifted.
func (s *Service) recoverSale(ctx context.Context, a *catalog.Sale, fence string) error {
	p := a.ProductID
	now := s.d.Now() / 1e6
	if fence == "" {
		// Asked by a Recovering answer or a missing stock key: what is
		// the sale's state now? An answer can come from a batch sent just
		// before another edge reopened the sale, and a fresh fence would
		// close it again for nothing.
		info, ok, err := s.d.Store.SaleInfo(ctx, p)
		switch {
		case err != nil:
			return err
		case info.Fence != "":
			fence = info.Fence
		case ok:
			return nil // open
		default:
			if fence, err = s.d.Store.Fence(ctx, p, stock.FenceID(now, s.d.Node, "lost")); err != nil {
				return err
			}
		}
	}
	if err := s.quiet(ctx, p, fence); err != nil {
		return err
	}
	if s.d.Ledger == nil {
		// This edge cannot read the ledger (no order store configured):
		// an edge that can rebuilds; until one does, the sale stays closed.
		return nil
	}
	owner := strconv.Itoa(s.d.Node) + "|" + fence
	got, err := s.d.Store.LockRecovery(ctx, p, owner, lockLease)
	if err != nil || !got {
		return err // another edge rebuilds; this one waits for the fence to lift
	}
	ctx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		s.holdLock(ctx, stop, p, owner)
	}()
	defer func() {
		stop()
		<-renewed
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.d.Store.UnlockRecovery(uctx, p, owner); err != nil {
			s.d.Log.Warn("rebuild lock not released; it expires by itself", "product", p, "err", err)
		}
	}()
	waited, why, err := s.awaitQuiet(ctx, p, fence)
	if err != nil {
		return err
	}
	meta, known, err := s.d.Store.Meta(ctx, p)
	if err != nil {
		return err
	}
	plan, notes, err := s.plan(ctx, a, meta, known)
	if err != nil {
		return fmt.Errorf("sale %s: ledger: %w (the sale stays closed until the ledger answers)", p, err)
	}
	plan.Fence = fence
	if life, ok := s.tokenLife(a); ok {
		plan.TokensFromMs = s.d.Now()/1e6 + life
	}
	res, reopened, err := s.d.Store.Rebuild(ctx, plan)
	// Also after a failed rebuild: it may have written some of the tail's
	// orders pending, and the next one does not rewrite those stored by then.
	s.markStoredTail(ctx, p, notes.tailPending)
	if err != nil {
		return err
	}
	if !reopened {
		return nil // another edge reopened it, or it was fenced again
	}
	s.rb.mu.Lock()
	s.rb.counts[p]++
	s.rb.mu.Unlock()
	st := s.d.Sales.StateOf(p)
	st.RaiseTokensFrom(plan.TokensFromMs)
	st.SetRemaining(res.After)
	st.SetSoldOut(res.After <= 0)
	st.BumpGeneration() // buyers' counts changed under the "at the limit" cache
	if res.After > 0 {
		if err := s.d.Store.PublishSoldOut(ctx, p, false); err != nil {
			s.d.Log.Warn("sold-out broadcast failed; other edges catch up on refresh", "product", p, "err", err)
		}
	}
	s.d.Log.Warn("sale recovered from the ledger", "product", p, "fence", fence,
		"stockBefore", res.Before, "stockAfter", res.After, "initial", plan.Initial, "restocked", plan.Restocked,
		"released", plan.Released, "buyers", len(plan.Buyers), "pendingUnits", notes.pending,
		"tailEvents", notes.tail, "tailRead", notes.tailRead,
		"ordersCorrected", len(plan.Orders), "waitedMs", waited.Milliseconds(), "waitedFor", why,
		"closedMs", s.d.Now()/1e6-stock.FenceTime(fence))
	return nil
}

// The rebuild lock is a lease its holder renews (holdLock): a holder that
// dies (kill -9, its host lost) blocks the others for at most lockLease,
// after which any edge's next refresh takes the rebuild over. Before, the
// lock lived the whole rebuild budget (InFlight + recoverTimeout, ~20 s):
// nemesis schedules with a Redis failover and an edge killed in the same
// window kept sales closed 8–30 s (TestRebuildTakenOverWhenHolderKilled).
// Losing the lease to a holder that was only slow (frozen past it) is
// safe: every write of a rebuild is guarded by the fence, and two rebuilds
// of one fence write the same (lua/set_buyers.lua, lua/reopen.lua).
const (
	lockLease = 1500 * time.Millisecond
	lockRenew = lockLease / 5
)

// holdLock renews the rebuild lock every lockRenew until ctx ends; when the
// lock is found lost, or not renewed for a whole lease, it cancels the
// rebuild (stop): another edge may hold it now.
func (s *Service) holdLock(ctx context.Context, stop context.CancelFunc, p, owner string) {
	t := time.NewTicker(lockRenew)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held, err := s.d.Store.RenewRecovery(ctx, p, owner, lockLease)
		switch {
		case err == nil && held:
			last = time.Now()
		case err == nil || time.Since(last) >= lockLease:
			if ctx.Err() == nil {
				s.d.Log.Warn("rebuild lock lost; another edge may rebuild the sale", "product", p, "err", err)
			}
			stop()
			return
		}
	}
}

// tokenLife is the longest a purchase token of the sale lives, ms: every
// token minted before now expires by now + tokenLife. A waiting room's
// token also expires by the end of its shopper's turn, which began before
// now. A horizon past the turns of shoppers admitted after it would refuse
// every token they get (nemesis seed 11: BAD_TOKEN for token_ttl after a
// failover). false before the settings are loaded.
func (s *Service) tokenLife(a *catalog.Sale) (int64, bool) {
	st := s.settings.Load()
	if st == nil {
		return 0, false
	}
	life := st.TokenTTL.Milliseconds()
	if a.Room != nil && a.Room.SessionMs > 0 {
		life = min(life, a.Room.SessionMs)
	}
	return life, true
}

// quiet waits until what this edge started before it saw the fence is
// settled, then says so in Redis, once per fence.
func (s *Service) quiet(ctx context.Context, p, fence string) error {
	s.rb.mu.Lock()
	done := s.rb.quiet[p] == fence
	s.rb.mu.Unlock()
	if done {
		return nil
	}
	s.d.Log.Warn("sale fenced: Redis lost or went back in time; closed until rebuilt from the ledger", "product", p, "fence", fence)
	if err := s.d.Flights.Quiesce(ctx); err != nil {
		return fmt.Errorf("sale %s: purchases in flight did not settle: %w", p, err)
	}
	if err := s.d.Store.MarkQuiet(ctx, p, s.d.Node, fence); err != nil {
		return err
	}
	s.rb.mu.Lock()
	s.rb.quiet[p] = fence
	s.rb.mu.Unlock()
	return nil
}

// awaitQuiet returns once every live edge is quiet on the fence, or the
// in-flight bound since the fence passed. An edge counts as live when its
// heartbeat (written every refresh) is recent; the answer is trusted only
// two refresh intervals after the fence, by when every live edge has
// written a heartbeat to the server that was fenced, even one that came
// back empty. Clocks: the fence's time is the fencing edge's, compared with
// this edge's; a skew of d between them moves both thresholds by d.
func (s *Service) awaitQuiet(ctx context.Context, p, fence string) (waited time.Duration, why string, err error) {
	t0 := time.Now()
	fenceMs := stock.FenceTime(fence)
	interval := s.interval.Milliseconds()
	bound := fenceMs + s.d.InFlight.Milliseconds()
	trust := fenceMs + 2*interval
	for {
		now := s.d.Now() / 1e6
		if now >= bound {
			return time.Since(t0), "in-flight bound", nil
		}
		if now >= trust {
			live, lerr := s.d.Store.LiveEdges(ctx, now-3*interval)
			quiet, qerr := s.d.Store.QuietNodes(ctx, p, fence)
			if lerr == nil && qerr == nil && len(live) > 0 && allIn(live, quiet) {
				return time.Since(t0), "every live edge quiet", nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Since(t0), "", ctx.Err()
		case <-time.After(quietPoll):
		}
	}
}

func allIn(nodes []int, set map[int]bool) bool {
	for _, n := range nodes {
		if !set[n] {
			return false
		}
	}
	return true
}

// createStock creates a missing stock key. A sale nobody has sold from (no
// meta left in Redis, never seen open by this edge, nothing in the ledger
// or the outbox) is new and warmed with its configured stock; any other
// is lost and recovered (recoverSale). Without a ledger a lost sale stays
// closed: nobody knows what was sold.
func (s *Service) createStock(ctx context.Context, a *catalog.Sale, fence string) error {
	p := a.ProductID
	if fence != "" {
		s.startRecovery(a, fence)
		return nil
	}
	meta, known, err := s.d.Store.Meta(ctx, p)
	if err != nil {
		return err
	}
	lost := known || s.d.Sales.StateOf(p).Remaining() >= 0
	if !lost {
		// Created or restocked through the admin API before, and not by
		// this edge just now: it existed, so it was lost.
		ds, err := s.durableSale(ctx, p)
		if err != nil {
			return err
		}
		lost = ds.Known && !ds.Opening
	}
	if !lost && s.d.Ledger != nil {
		// Redis may have lost everything, meta included, while this edge
		// was down: the ledger still knows the sale.
		pctx, cancel := context.WithTimeout(ctx, recoverTimeout)
		defer cancel()
		plan, notes, err := s.plan(pctx, a, meta, known)
		if err != nil {
			return fmt.Errorf("sale %s: ledger: %w (the sale stays closed until the ledger answers)", p, err)
		}
		lost = plan.Initial+plan.Restocked != plan.Stock || plan.Released > 0 || notes.pending > 0
	}
	if lost {
		if s.d.Ledger == nil {
			// Nobody knows what was sold: reopening with the configured
			// stock would sell it twice. NOT_READY -> 503 until an
			// operator acts.
			return fmt.Errorf("sale %s: stock key lost and no ledger to rebuild it from; the sale stays closed", p)
		}
		s.startRecovery(a, "")
		return nil
	}
	created, err := s.d.Store.Warm(ctx, saleOf(a))
	if err != nil {
		return err
	}
	if created {
		s.d.Log.Info("sale warmed", "product", p, "stock", a.Stock, "limit", a.Limit)
	}
	return nil
}

// plan computes a lost (or new) sale's rebuild: it reads the old Redis's
// outbox, surviving hashes and due set, the ledger and the durable
// catalogue (planReads), leaves the arithmetic to planStock, then reads the
// hashes of the stored orders planStock could not decide and gives them the
// ledger's state (ledgerStates), and pages through the ledger's settled
// orders while the rebuild writes (Rebuild.Settled). notes says what is
// on its way (in the outbox or the topic's uncommitted tail, not yet
// stored).
func (s *Service) plan(ctx context.Context, a *catalog.Sale, meta stock.SaleStock, known bool) (stock.Rebuild, planNotes, error) {
	p := a.ProductID
	in, err := s.planReads(ctx, a, meta, known)
	if err != nil {
		return stock.Rebuild{}, planNotes{}, err
	}
	sp := planStock(in)
	if sp.lostRestock > 0 {
		// More is held than the sale's figures allow: restocks were lost
		// with Redis. The ledger proves at least this much was restocked;
		// recording it keeps reconcile balanced and sells nothing more.
		s.d.Log.Warn("ledger holds more than the sale's initial stock and known restocks; restocks were lost with Redis",
			"product", p, "held", sp.held, "initial", sp.rebuild.Initial, "restocked", sp.rebuild.Restocked-sp.lostRestock)
	}
	// Stored orders the old Redis has a hash of (the due set's members, the
	// embedded server's surviving hashes): the ledger's state. One without a
	// hash any more has nothing stale to correct.
	have, err := s.d.Store.Orders(ctx, p, sp.lookup)
	if err != nil {
		return stock.Rebuild{}, planNotes{}, err
	}
	plan := sp.rebuild
	plan.Orders = append(plan.Orders, ledgerStates(sp.lookup, have, in.ledger.Statuses)...)
	// Every settled order of the ledger, for the hashes a stale Redis still
	// holds as unpaid (Rebuild.Settled). The sale is fenced: nothing is
	// settled in Redis meanwhile, and the ledger only gains settlements
	// that the outbox holds too (settling, written after these).
	ledger := s.d.Ledger
	plan.Settled = func(ctx context.Context, after int64) ([]stock.OrderInfo, error) {
		rows, err := ledger.Settled(ctx, p, after, settledPage)
		if err != nil {
			return nil, err
		}
		out := make([]stock.OrderInfo, 0, len(rows))
		for _, r := range rows {
			info := stock.OrderInfo{Order: r.Order}
			info.ProductID = p
			out = append(out, ledgerInfo(info, orderstore.OrderStatus{Status: r.Status, Expired: r.Expired, PayByMs: r.PayByMs, PaidMs: r.PaidMs}))
		}
		return out, nil
	}
	return plan, planNotes{pending: sp.pending, tail: len(in.ledger.Tail), tailRead: in.ledger.TailRead, tailPending: sp.tailPending}, nil
}

// planNotes is what a plan found on its way, for the rebuild's log and
// markStoredTail.
type planNotes struct {
	pending     int64   // units of orders on their way (stockPlan.pending)
	tail        int     // the tail's events of the product
	tailRead    bool    // the tail stood in for the drain
	tailPending []int64 // stockPlan.tailPending
}

// markStoredTail marks success (stock.Store.MarkSuccess: pending -> success,
// and the deadline into the due set) the orders of the tail the rebuild
// wrote as pending that the store holds now. The consumer marks each order
// it stores, but one it stored before the rebuild wrote the order found no
// order to mark (Redis had lost it) or had its mark overwritten: every
// such store came before this read, and every later one is marked by the
// consumer, which then finds the order pending. A failure leaves those
// orders pending (their units and deadlines are right; the shopper's result
// falls back to the store), and is logged.
func (s *Service) markStoredTail(ctx context.Context, p string, ids []int64) {
	if len(ids) == 0 {
		return
	}
	stored, err := s.d.Ledger.Statuses(ctx, p, ids)
	if err == nil && len(stored) > 0 {
		done := make([]int64, 0, len(stored))
		for _, id := range ids {
			if _, ok := stored[id]; ok {
				done = append(done, id)
			}
		}
		_, err = s.d.Store.MarkSuccess(ctx, p, done...)
	}
	if err != nil {
		s.d.Log.Warn("orders of the topic's tail stored during the rebuild not marked success; they read pending", "product", p, "err", err)
	}
}

// planInput is what a rebuild's arithmetic (planStock) is computed from:
// everything read before it, and nothing else.
type planInput struct {
	sale    stock.SaleStock // the configured sale (saleOf): its Stock is the configured initial stock
	meta    stock.SaleStock // the old Redis's meta, if known
	known   bool
	durable durableSale
	events  []order.Event    // the old Redis's outbox
	due     []stock.Deadline // its due set
	ids     []int64          // the orders asked of the ledger and the tail's, sorted
	ledger  orderstore.LedgerState
}

// planReads gathers planStock's inputs. The outbox is read before the
// ledger reads the topic's tail (or drains): an entry gone from it by then
// was acknowledged by Kafka, so it is below the end offsets the tail is
// read to (or the drain stores it). No in-flight wait here: recoverSale
// waited for the edges, or the sale is new.
func (s *Service) planReads(ctx context.Context, a *catalog.Sale, meta stock.SaleStock, known bool) (planInput, error) {
	p := a.ProductID
	in := planInput{sale: saleOf(a), meta: meta, known: known}
	var err error
	if in.events, err = s.d.Store.OutboxEvents(ctx, p); err != nil {
		return planInput{}, err
	}
	hashes, err := s.d.Store.SurvivingOrders(ctx, p)
	if err != nil {
		return planInput{}, err
	}
	if in.due, err = s.d.Store.DueOrders(ctx, p); err != nil {
		return planInput{}, err
	}
	in.ids = askedOrders(in.events, hashes, in.due)
	if in.ledger, err = s.d.Ledger.Rebuild(ctx, p, in.ids); err != nil {
		return planInput{}, err
	}
	if len(in.ledger.Tail) > 0 {
		// The ledger answered for the tail's orders too (Statuses).
		in.ids = askedOrders(append(slices.Clip(in.events), in.ledger.Tail...), hashes, in.due)
	}
	if in.durable, err = s.durableSale(ctx, p); err != nil {
		return planInput{}, err
	}
	return in, nil
}

// askedOrders is every order the old Redis names (outbox entries,
// surviving hashes, due set members), once each, sorted: the ledger says
// which of them are stored.
func askedOrders(events []order.Event, hashes map[int64]string, due []stock.Deadline) []int64 {
	asked := make(map[int64]bool, len(events)+len(hashes)+len(due))
	for _, e := range events {
		asked[e.ID] = true
	}
	for id := range hashes {
		asked[id] = true
	}
	for _, d := range due {
		asked[d.OrderID] = true
	}
	ids := make([]int64, 0, len(asked))
	for id := range asked {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// stockPlan is planStock's answer.
type stockPlan struct {
	// rebuild is the plan but for the stale hashes ledgerStates corrects
	// and Settled: SaleStock, Buyers, and the orders the ledger's deadlines
	// and the outbox's settlements decide.
	rebuild stock.Rebuild
	pending int64 // units of orders on their way: in the outbox or the tail, not stored
	held    int64 // units held: stored unpaid and paid, plus pending, less the releases on their way
	// lostRestock is the units held beyond the sale's initial stock and
	// known restocks, added to Restocked: restocks lost with Redis.
	lostRestock int64
	// lookup is the stored orders among ids that neither a deadline nor a
	// settlement decides: those the old Redis holds a hash of take the
	// ledger's state (ledgerStates).
	lookup []int64
	// tailPending is the tail's orders on their way that the plan writes
	// as pending (markStoredTail marks those stored meanwhile).
	tailPending []int64
}

// planStock is a rebuild's arithmetic: stock = initial + restocked − units
// held, where held is the stored orders that keep their units (status 0
// unpaid and 1 paid; cancelled and expired ones are status 2 and so
// already back) plus the orders on their way that the ledger has not
// stored — still in the outbox, or acknowledged by Kafka and in the
// topic's uncommitted tail (the ledger's Tail) — less the releases on
// their way (the same two places); each order id counts once, however
// many of the store, the outbox and the tail (copies included) hold it.
// Each buyer's count from the same, exactly: for every user the ledger
// knows (stock.Rebuild sets the users of settled orders it does not name
// to 0) and every user the old Redis's outbox, the tail and the due set
// name. A count is lowered as well as raised, which is safe only here:
// every edge is quiet or past the in-flight bound, and the tail was read
// to the end offsets after the outbox (or the pipeline drained), so each
// purchase that wrote a count is stored, in the tail or still in the
// outbox (the deduction writes the count and the entry in one script, and
// the entry goes only once Kafka acknowledged it), and the sale is fenced,
// so no purchase or release moves a count until the rebuild lifts the
// fence. The tail's orders on their way are written as pending, as the
// deduction wrote them (Redis lost them with the rest): the consumer's
// success mark finds them when it stores them, and they can be paid,
// cancelled and expired meanwhile. The order states follow the ledger
// too (and the settlements still in the outbox, which the relay is
// delivering): every unpaid order with a deadline gets its hash (made
// again if lost) and its place in the due set back — an overdue one too,
// so that the first sweep after the reopening releases it — and the
// orders the old Redis may hold stale states of (surviving hashes, the due
// set's members, and every order the ledger knows as settled, read page by
// page while the rebuild writes: an order without a deadline is in neither
// the due set nor the outbox) take the ledger's, so that nothing the
// ledger knows is paid or released twice.
func planStock(in planInput) stockPlan {
	p := in.sale.ProductID
	st := in.ledger
	sale := in.sale
	sale.Initial = in.sale.Stock
	if in.durable.Initial > 0 {
		// An admin-created sale's first stock: the configured stock may be
		// a restock total the refresh folded in.
		sale.Initial = in.durable.Initial
	}
	if in.known && in.meta.Initial > 0 {
		// The sale's own figures beat the config, which may have changed
		// since it opened.
		sale.Initial = in.meta.Initial
	}
	// Restocks: the meta's, unless it is older than the durable catalogue
	// (a stale snapshot, or no meta at all).
	sale.Restocked = max(in.meta.Restocked, in.durable.Restocked)
	held := st.Sold
	sale.Released, sale.Paid, sale.Expired = st.Released, st.Paid, st.Expired
	buyers := make(map[string]int64, len(st.Buyers))
	for u, n := range st.Buyers {
		buyers[u] = n
	}
	// Orders on their way: deducted, the relay re-sends them (the
	// outbox), or acknowledged and not stored yet (the tail); they count.
	way := append(slices.Clip(in.events), st.Tail...)
	onTheWay := make(map[int64]bool, len(way))
	var pending int64
	for _, e := range way {
		if e.Type != order.TypeOrder || onTheWay[e.ID] {
			continue
		}
		if _, stored := st.Statuses[e.ID]; stored {
			continue
		}
		onTheWay[e.ID] = true
		qty := int64(e.Qty)
		held += qty
		pending += qty
		buyers[e.UserID] += qty
	}
	// Settlements on their way, of orders the ledger counts as unpaid (or
	// that are on their way themselves): Redis decided them, the store
	// will know them.
	settling := map[int64]order.Event{}
	for _, e := range way {
		if e.Type == order.TypeOrder {
			continue
		}
		if _, dup := settling[e.ID]; dup {
			continue // Redis writes one settlement per order; a copy is the same
		}
		status, stored := st.Statuses[e.ID]
		if stored && status.Status != orderstore.StatusUnpaid || !stored && !onTheWay[e.ID] {
			continue // the ledger has it already (or never held the order)
		}
		settling[e.ID] = e
		qty := int64(e.Qty)
		switch e.Type {
		case order.TypeRelease:
			held -= qty
			buyers[e.UserID] = max(0, buyers[e.UserID]-qty) // 0 stays named: the key goes
			sale.Released += qty
			if e.Expired() {
				sale.Expired += qty
			}
		case order.TypePaid:
			sale.Paid += qty
		}
	}
	// Every user the old Redis names holds what the ledger says, 0 too.
	name := func(user string) {
		if _, named := buyers[user]; !named {
			buyers[user] = 0
		}
	}
	for _, e := range way {
		name(e.UserID)
	}
	for _, d := range in.due {
		name(d.UserID)
	}
	var lost int64
	if over := held - (sale.Initial + sale.Restocked); over > 0 {
		lost = over
		sale.Restocked += over
	}
	sale.Stock = sale.Initial + sale.Restocked - held

	// The order hashes to write.
	var fix []stock.OrderInfo
	done := map[int64]bool{}
	for _, r := range st.Deadlines {
		info := stock.OrderInfo{Order: r.Order, State: stock.StateSuccess}
		info.ProductID = p
		if e, ok := settling[r.ID]; ok {
			info = settledInfo(e)
		}
		fix = append(fix, info)
		done[r.ID] = true
	}
	for id, e := range settling {
		if !done[id] {
			fix = append(fix, settledInfo(e))
			done[id] = true
		}
	}
	var tailPending []int64
	for _, e := range st.Tail {
		if e.Type != order.TypeOrder || !onTheWay[e.ID] || done[e.ID] {
			continue
		}
		info := stock.OrderInfo{Order: e.Order, State: stock.StatePending}
		fix = append(fix, info)
		done[e.ID] = true
		tailPending = append(tailPending, e.ID)
	}
	var rest []int64
	for _, id := range in.ids {
		if _, stored := st.Statuses[id]; stored && !done[id] {
			rest = append(rest, id)
		}
	}
	return stockPlan{
		rebuild: stock.Rebuild{SaleStock: sale, Buyers: buyers, Orders: fix},
		pending: pending, held: held, lostRestock: lost, lookup: rest, tailPending: tailPending,
	}
}

// ledgerStates is the ledger's state for each of the ids whose hash the
// old Redis still has (have), in the order of ids.
func ledgerStates(ids []int64, have map[int64]stock.OrderInfo, statuses map[int64]orderstore.OrderStatus) []stock.OrderInfo {
	var out []stock.OrderInfo
	for _, id := range ids {
		if info, ok := have[id]; ok {
			out = append(out, ledgerInfo(info, statuses[id]))
		}
	}
	return out
}

// ledgerInfo is the order with the state the ledger gives it.
func ledgerInfo(info stock.OrderInfo, status orderstore.OrderStatus) stock.OrderInfo {
	info.PayByMs = status.PayByMs
	switch status.Status {
	case orderstore.StatusUnpaid:
		info.State, info.PaidMs, info.ClosedMs = stock.StateSuccess, 0, 0
	case orderstore.StatusPaid:
		info.State = stock.StatePaid
		if status.PaidMs > 0 {
			info.PaidMs, info.ClosedMs = status.PaidMs, status.PaidMs
		}
	default:
		info.State = stock.StateReleased
		if status.Expired {
			info.State = stock.StateExpired
		}
	}
	return info
}

// settledInfo is the order state a settlement event records.
func settledInfo(e order.Event) stock.OrderInfo {
	info := stock.OrderInfo{Order: e.Order}
	switch {
	case e.Type == order.TypePaid:
		info.State, info.PaidMs, info.ClosedMs = stock.StatePaid, e.PaidMs, e.PaidMs
	case e.Expired():
		info.State, info.ClosedMs = stock.StateExpired, e.ReleasedMs
	default:
		info.State, info.ClosedMs = stock.StateReleased, e.ReleasedMs
	}
	return info
}

func saleOf(a *catalog.Sale) stock.SaleStock {
	return stock.SaleStock{ProductID: a.ProductID, Stock: a.Stock, Limit: a.Limit, Price: a.PriceCents, StartMs: a.StartMs, EndMs: a.EndMs}
}
