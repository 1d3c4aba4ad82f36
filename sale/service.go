package sale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"flashgate/conf"
	"flashgate/metrics"
	"flashgate/orders/broker"
	"flashgate/orders/order"
	"flashgate/orders/orderid"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
	"flashgate/sale/push"
	"flashgate/sale/room"
	"flashgate/sale/session"
)

// Settings are the reloadable parts of the sale, compiled with the config
// snapshot.
type Settings struct {
	Sessions *session.Codec
	Tokens   *ptoken.Minter
	// Tickets sign the waiting rooms' tickets and Challenges their proofs
	// of work (both keyed from sale.token_secret: every edge must share it).
	Tickets      *room.Tickets
	Challenges   *room.Challenger
	DemoLogin    bool
	CookieSecure bool
	SessionTTL   time.Duration
	TokenTTL     time.Duration
	MaxBody      int
	Hotspot      int64
	// PayTimeoutMs is orders.pay_timeout (0: no deadline), for the sales
	// without their own.
	PayTimeoutMs int64
	// Catalog is the activities declared in the config file.
	Catalog []*catalog.Sale
}

// OrderSink receives each successful purchase before the shopper is told
// "pending": the orders pipeline, which returns once Kafka acknowledged the
// event and then removes the outbox entry the script wrote. nil keeps
// orders in the outbox only (the relay delivers them).
type OrderSink interface {
	PublishAndAck(ctx context.Context, o *order.Order, outboxID string) error
}

// Deps are the process-lifetime collaborators of the Service.
type Deps struct {
	Store  *stock.Store
	Sales  *catalog.Registry
	IDs    *orderid.Generator
	Bought *catalog.BoughtCache
	Log    *slog.Logger
	Node   int
	Now    func() int64 // unix nanoseconds
	Orders OrderSink
	// Settlements takes the events of paid, cancelled and expired orders
	// (settle.go); nil leaves them to the outbox relay.
	Settlements EventSink
	Ledger      Ledger
	// Catalog is the durable sale catalogue (the order store): admin
	// changes are written to it first, and Redis' copy is rebuilt from it
	// (catalog.go). nil keeps the catalogue and the degrade switch in
	// Redis only.
	Catalog orderstore.Catalog
	// Results answers result polls for orders whose Redis state expired or
	// was lost (the order store).
	Results OrderLookup
	// Breakers are the Redis circuit breakers, one per product.
	Breakers *Breakers
	// Flights counts purchases from deduction to publish, so that a
	// recovery knows when none from before a fence is still in flight
	// (the Publisher's; nil without a pipeline).
	Flights *broker.Flights
	// InFlight bounds how long after a fence an event of an earlier
	// deduction may still reach Kafka (the publish budget plus one produce
	// request): the longest a recovery waits for edges that do not say
	// they are quiet.
	InFlight time.Duration
	// RefreshInterval is the refresh loop's (zero: conf's sale.refresh_interval default): a
	// recovery trusts the edges' heartbeats after two of them.
	RefreshInterval time.Duration
	// Events serves /api/seckill/events; nil answers 404 and the page
	// polls /api/seckill/result.
	Events *push.Hub
}

// OrderLookup finds a stored order.
type OrderLookup interface {
	Get(ctx context.Context, productID string, orderID int64) (orderstore.Row, bool, error)
}

// Service is the sale API of one edge.
type Service struct {
	// d is fixed at New: the collaborators are wired once, by the
	// composition root, never patched in later.
	d        Deps
	settings atomic.Pointer[Settings]

	// The degrade switch as the hot path reads it (Degraded), installed
	// from cat by applySwitches under degradeMu.
	degradeAll atomic.Bool
	degraded   atomic.Pointer[map[string]bool]
	degradeMu  sync.Mutex

	catMu sync.Mutex
	cat   catalogView // catalog.go

	outcomes [numOutcomes]metrics.Counter
	hotspots metrics.Counter

	stopSub  func()
	stopLoop context.CancelFunc
	loopDone chan struct{}

	rb       rebuilder     // fenced sales (rebuild.go)
	interval time.Duration // the refresh loop's

	unknown unknowns // purchases of unknown outcome to settle (unknown.go)
	startMs int64    // when this Service was made, unix ms: the heartbeat says it (EdgeBeat)
	// idsFloored: this process's order ids start after its node's previous
	// process's (reserveIDs); until then Start keeps the generator closed.
	idsFloored atomic.Bool

	rooms roomViews // the waiting rooms as this edge last read them (room.go)
}

// outcome indexes the attempt counters.
type outcome int

const (
	outOK outcome = iota
	outSoldOut
	outLimit
	outBadToken
	outNotReady
	outError
	outDegraded
	outRecovering
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "sold_out", "limit_reached", "bad_token", "not_ready", "error", "degraded", "recovering"}

// New returns a Service; Start begins its background work.
func New(d Deps) *Service {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = func() int64 { return time.Now().UnixNano() }
	}
	if d.RefreshInterval <= 0 {
		d.RefreshInterval = conf.SaleConfig{}.WithDefaults().RefreshInterval
	}
	s := &Service{d: d, interval: d.RefreshInterval, cat: newCatalogView(), startMs: d.Now() / 1e6}
	empty := map[string]bool{}
	s.degraded.Store(&empty)
	return s
}

// Apply installs the settings of a new config snapshot and warms the
// activities it declares.
func (s *Service) Apply(ctx context.Context, st *Settings) error {
	s.settings.Store(st)
	err := s.Refresh(ctx, true)
	s.awaitRecoveries(ctx)
	return err
}

// Start subscribes to sold-out broadcasts and refreshes the edge's view of
// the sales every Deps.RefreshInterval until Stop.
func (s *Service) Start() {
	// Wait a little for the channels (a broadcast sent after Start is then
	// seen), not for a dead master's: the refresh loop is the safety net.
	subCtx, subCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer subCancel()
	s.stopSub = s.d.Store.SubscribeSoldOut(subCtx, stock.Follow{
		// On Redis Cluster every sale has its own channel: follow the
		// sales this edge knows, admin-created ones included.
		Products: func() []string {
			list := s.d.Sales.List()
			ids := make([]string, len(list))
			for i, e := range list {
				ids[i] = e.ProductID
			}
			return ids
		},
		Missed: func(ctx context.Context) {
			// (Re)subscribed: broadcasts may have been missed; refresh now.
			if err := s.Refresh(ctx, false); err != nil && ctx.Err() == nil {
				s.d.Log.Warn("sale refresh after (re)subscribing failed", "err", err)
			}
		},
		Lost: func(product string, err error) {
			s.d.Log.Warn("sold-out subscription lost; resubscribing", "product", product, "err", err)
		},
	}, func(product string, soldOut bool) {
		changed := false
		if soldOut {
			changed = s.d.Sales.StateOf(product).SetSoldOut(true)
		} else {
			// Sent on release and restock: buyers may have their allowance
			// back, so the local "at the limit" answers are forgotten too.
			changed = s.backOnSale(context.Background(), product, false)
		}
		if changed {
			s.d.Log.Info("sold-out flag changed by broadcast", "product", product, "soldOut", soldOut)
		}
	}).Stop
	if s.d.IDs != nil && !s.idsFloored.Load() {
		// No order id before this process knows what its node's previous
		// process may have issued (the warm-up's heartbeat could not
		// read it): closed until a heartbeat does.
		s.d.IDs.Bound(0)
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.reserveIDs(rctx)
		rcancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopLoop = cancel
	s.loopDone = make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		// Apart from the refresh, which may wait on a ledger: a recovery
		// counts an edge as alive (and waits for its word) by this beat.
		defer close(hbDone)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.heartbeat(ctx)
			}
		}
	}()
	roomDone := make(chan struct{})
	go func() {
		defer close(roomDone)
		s.roomLoop(ctx)
	}()
	go func() {
		defer close(s.loopDone)
		defer func() { <-hbDone; <-roomDone }()
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.Refresh(ctx, false); err != nil && ctx.Err() == nil {
					s.d.Log.Warn("sale refresh failed", "err", err)
				}
			}
		}
	}()
}

// heartbeat tells the other edges this one is alive (stock.Store.LiveEdges)
// and keeps its order ids' reservation ahead of them.
func (s *Service) heartbeat(ctx context.Context) {
	// The reservation first: a first one falls back on the previous
	// process's last heartbeat, which this one's would overwrite.
	s.reserveIDs(ctx)
	if err := s.d.Store.Heartbeat(ctx, s.d.Node, s.d.Now()/1e6, s.startMs); err != nil && ctx.Err() == nil {
		s.d.Log.Debug("heartbeat not written", "err", err)
	}
}

// idSpan is how far past its next order id an edge reserves the ids' times
// in Redis, renewed every refresh interval (at least three of them, so a
// late or failed renewal or two stays covered): a process killed now may
// have issued ids up to its reservation, so its successor starts after it
// — its ids at most this far ahead of its clock after a crash (a graceful
// exit shrinks the reservation to its last id: releaseIDs). Issuing is not
// held to the reservation, which lives on one Redis server that may be
// failing over while the sales' own servers sell: only a process that
// stops reaching it for longer than this, dies and is restarted with its
// clock behind may repeat an id (or one whose Redis lost sk:edges).
func (s *Service) idSpan() time.Duration { return max(5*time.Second, 3*s.interval) }

// reserveIDs keeps the node's order id reservation ahead of this process's
// ids (stock.Store.ReserveIDs); the first time, it starts the ids after
// what the node's previous process may have issued and opens the generator.
func (s *Service) reserveIDs(ctx context.Context) {
	if s.d.IDs == nil {
		return // a service that sells nothing (tests, tools)
	}
	how := stock.IDsRenew
	if !s.idsFloored.Load() {
		how = stock.IDsFirst
	}
	before, _, err := s.d.Store.ReserveIDs(ctx, s.d.Node, s.d.IDs.Tick(), s.idSpan().Milliseconds(), how, 3*s.interval.Milliseconds())
	if err != nil {
		if how == stock.IDsFirst {
			s.d.Log.Warn("order ids not reserved yet: purchases answer busy until this edge reads what its node's previous process issued",
				"node", s.d.Node, "err", err)
		}
		return
	}
	if how == stock.IDsFirst {
		s.d.IDs.Floor(before)
		s.d.IDs.NoBound()
		s.idsFloored.Store(true)
		if ahead := before - s.d.Now()/1e6; ahead >= 0 {
			s.d.Log.Warn("this edge's clock is behind the order ids its node's previous process may have issued: its ids run ahead of its clock until it catches up",
				"node", s.d.Node, "ahead_ms", ahead+1)
		}
	}
}

// releaseIDs closes the order id generator and shrinks the node's
// reservation to the last id issued, so that the next process's ids do not
// run ahead of its clock after a graceful restart.
func (s *Service) releaseIDs() {
	if s.d.IDs == nil || !s.idsFloored.Load() {
		return // never reserved: the reservation is a predecessor's, kept
	}
	s.d.IDs.Bound(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, _, err := s.d.Store.ReserveIDs(ctx, s.d.Node, s.d.IDs.Tick(), 0, stock.IDsExit, 0); err != nil {
		s.d.Log.Debug("order id reservation not shrunk at exit", "err", err)
	}
}

// Stop ends background work, settling the purchases of unknown outcome it
// can first (settleBeforeExit).
func (s *Service) Stop() {
	if s.stopLoop != nil {
		s.stopLoop()
		<-s.loopDone
	}
	if s.stopSub != nil {
		s.stopSub()
	}
	s.settleBeforeExit(unknownExitBudget)
	s.releaseIDs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.awaitRecoveries(ctx)
}

// Refresh rebuilds the registry from the config catalog and the admin
// catalog (Redis' copy and the durable catalogue, catalog.go), applies the
// degrade switches, opens sales whose stock key is missing (new ones with
// their configured stock, lost ones from the ledger: see openSale), updates the
// schedule of live sales when warm is set, and updates remaining stock and
// sold-out flags. It is the safety net behind the broadcast.
func (s *Service) Refresh(ctx context.Context, warm bool) error {
	st := s.settings.Load()
	if st == nil {
		return nil
	}
	all, err := s.catalog(ctx, st)
	if err != nil {
		return err
	}
	var errs []error
	s.heartbeat(ctx)
	fenced := make(map[string]string, len(all))
	for _, a := range all {
		info, ok, err := s.d.Store.SaleInfo(ctx, a.ProductID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fenced[a.ProductID] = info.Fence
		if !ok && s.noteLost(a.ProductID) {
			s.d.Log.Warn("sale lost: its stock is gone from Redis; closed (503 RECOVERING) until it is rebuilt from the ledger",
				"product", a.ProductID)
		}
		switch {
		case info.Fence != "" || !ok:
			if err := s.createStock(ctx, a, info.Fence); err != nil {
				errs = append(errs, err)
				continue
			}
			if info, ok, err = s.d.Store.SaleInfo(ctx, a.ProductID); err != nil || !ok || info.Fence != "" {
				continue // recovering; reported by the recovery
			}
		case warm:
			if err := s.warm(ctx, a, ok); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if s.noteReopened(a.ProductID) {
			s.d.Log.Info("sale open again after its loss", "product", a.ProductID, "remaining", info.Remaining)
		}
		state := s.d.Sales.StateOf(a.ProductID)
		state.SetRemaining(info.Remaining)
		state.RaiseTokensFrom(info.TokensFromMs)
		if state.SetSoldOut(info.Remaining <= 0) {
			s.d.Log.Info("sold-out flag changed by refresh", "product", a.ProductID, "soldOut", info.Remaining <= 0, "remaining", info.Remaining)
		}
		a.Stock = info.Initial + info.Restocked
	}
	s.rb.mu.Lock()
	s.rb.fenced = fenced
	s.rb.mu.Unlock()
	s.d.Sales.Replace(all)
	return errors.Join(errs...)
}

// warm opens a sale or updates a live one's schedule. exists is what the
// caller last saw; a live sale's stock is never changed here, and a
// missing stock key is only ever created by openSale (a new sale's configured
// stock, or a lost sale rebuilt from the ledger).
func (s *Service) warm(ctx context.Context, a *catalog.Sale, exists bool) error {
	if exists {
		live, err := s.d.Store.Reschedule(ctx, saleOf(a))
		if err != nil || live {
			return err
		}
		// Lost since the caller looked.
	}
	return s.createStock(ctx, a, "")
}

// catalog merges the config's activities with the admin catalog (which
// wins: an admin change is the newer intent).
func (s *Service) catalog(ctx context.Context, st *Settings) ([]*catalog.Sale, error) {
	byID := map[string]*catalog.Sale{}
	var order []string
	for _, a := range st.Catalog {
		c := *a
		byID[a.ProductID] = &c
		order = append(order, a.ProductID)
	}
	// The admin catalog holds activities created or updated through the
	// admin API, so every edge learns them.
	admin, err := s.adminCatalog(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(admin, func(a, b *catalog.Sale) int { return strings.Compare(a.ProductID, b.ProductID) })
	for _, a := range admin {
		if _, ok := byID[a.ProductID]; !ok {
			order = append(order, a.ProductID)
		}
		byID[a.ProductID] = a
	}
	out := make([]*catalog.Sale, 0, len(order))
	for _, id := range order {
		out = append(out, byID[id])
	}
	return out, nil
}

// PutActivity creates or updates an activity through the admin API: in the
// durable catalogue first (unreachable: ErrCatalogUnavailable, nothing
// changed), then in Redis' copy, then it opens the sale. The stock of a
// sale is the one it was first created with: a live sale's is never changed
// here (Restock adds stock), and the entry records the sale's own.
func (s *Service) PutActivity(ctx context.Context, a *catalog.Sale) error {
	if errs := a.Validate(); len(errs) > 0 {
		return errs
	}
	p := a.ProductID
	info, live, err := s.d.Store.SaleInfo(ctx, p)
	if err != nil {
		return err
	}
	s.catMu.Lock()
	prev, known := s.cat.acts[p]
	s.catMu.Unlock()
	c := *a
	switch {
	case live && info.Initial > 0:
		c.Stock = info.Initial
	case known:
		var old catalog.Sale
		if json.Unmarshal([]byte(prev.doc), &old) == nil && old.Stock > 0 {
			c.Stock = old.Stock // lost with Redis, or never opened: the first stock stands
		}
	}
	a = &c
	js, _ := json.Marshal(a)
	v := nextVersion(s.d.Now(), prev.version)
	durable := int64(-1)
	if s.d.Catalog != nil {
		rec := orderstore.CatalogRecord{ProductID: p, Kind: orderstore.KindActivity, Activity: string(js), Version: v, UpdatedMs: s.d.Now() / 1e6}
		if err := s.d.Catalog.PutCatalog(ctx, rec); err != nil {
			return fmt.Errorf("sale %s: %w: %w", p, ErrCatalogUnavailable, err)
		}
		durable = v
	}
	remember := func() {
		s.catMu.Lock()
		s.cat.acts[p] = actEntry{doc: string(js), mark: mark{version: v, durable: durable}}
		s.cat.opening[p]++
		s.catMu.Unlock()
	}
	if durable >= 0 {
		remember() // recorded: this edge gives it to Redis until Redis takes it
	}
	defer func() {
		s.catMu.Lock()
		if s.cat.opening[p]--; s.cat.opening[p] <= 0 {
			delete(s.cat.opening, p)
		}
		s.catMu.Unlock()
	}()
	if err := s.d.Store.PutCatalog(ctx, p, stock.CatalogEntry{Activity: string(js), Version: v}); err != nil {
		if durable < 0 {
			return err // no durable catalogue: nothing was recorded
		}
		return fmt.Errorf("sale %s: recorded in the durable catalogue but not in Redis (every edge opens it once Redis answers): %w", p, err)
	}
	if durable < 0 {
		remember()
	}
	if err := s.warm(ctx, a, live); err != nil {
		return err
	}
	return s.Refresh(ctx, false)
}

// Restock adds stock to a live sale and clears the sold-out flag
// everywhere. The restock is recorded in the durable catalogue first
// (unreachable: ErrCatalogUnavailable, nothing changed) so that a rebuild
// after Redis lost the sale's meta counts it; when Redis then refuses it
// (or its outcome is unknown) the record is withdrawn, so the catalogue
// never counts units the sale may not have.
func (s *Service) Restock(ctx context.Context, productID string, add int64) (int64, error) {
	if !order.ValidProductID(productID) || add <= 0 {
		return 0, fmt.Errorf("%w: restock %q by %d", stock.ErrInvalid, productID, add)
	}
	var rec orderstore.CatalogRecord
	if s.d.Catalog != nil {
		rec = orderstore.CatalogRecord{ProductID: productID, Kind: orderstore.KindRestock, ID: restockID(),
			Units: add, Version: s.d.Now() / 1e6, UpdatedMs: s.d.Now() / 1e6}
		if err := s.d.Catalog.PutCatalog(ctx, rec); err != nil {
			return 0, fmt.Errorf("restock %s: %w: %w", productID, ErrCatalogUnavailable, err)
		}
	}
	n, err := s.d.Store.Restock(ctx, productID, add)
	if err != nil {
		if s.d.Catalog != nil {
			rec.Units, rec.Version, rec.UpdatedMs = 0, rec.Version+1, s.d.Now()/1e6
			if werr := s.d.Catalog.PutCatalog(context.WithoutCancel(ctx), rec); werr != nil {
				s.d.Log.Error("a restock Redis did not confirm stays counted in the durable catalogue: a rebuild after Redis loses the sale counts it",
					"product", productID, "add", add, "restock", rec.ID, "redisErr", err, "err", werr)
			}
		}
		return 0, err
	}
	s.d.Sales.StateOf(productID).SetRemaining(n)
	s.backOnSale(ctx, productID, true)
	return n, nil
}

// restockID names one restock in the durable catalogue.
func restockID() int64 {
	for {
		if id := rand.Int64(); id > 0 {
			return id
		}
	}
}

// DegradeStored says where a change of the degrade switch was recorded:
// Redis (every edge applies it within its refresh interval) and the durable
// catalogue (it survives Redis losing its memory; every edge reads it
// within catalogReadEvery). Missed holds the failures of the homes that did
// not take it, which the edges write it to again when they can.
type DegradeStored struct {
	Redis, Durable bool
	Missed         error
}

// SetDegraded forces the sale API of one product ("" = all) to answer 503
// DEGRADED, or lifts it, on every edge: recorded in the durable catalogue
// and in Redis, then applied here. It fails, changing nothing, only when
// neither took it; when one did, the switch holds and the other home is
// written again later (DegradeStored says which missed it).
func (s *Service) SetDegraded(ctx context.Context, productID string, on bool) (DegradeStored, error) {
	key := productID
	if key == "" {
		key = orderstore.AllProducts
	} else if !order.ValidProductID(productID) {
		return DegradeStored{}, fmt.Errorf("%w: degrade %q", stock.ErrInvalid, productID)
	}
	s.catMu.Lock()
	prev, ok := s.cat.degrade[key]
	s.catMu.Unlock()
	if !ok {
		prev.durable = -1
	}
	v := nextVersion(s.d.Now(), prev.version)
	var out DegradeStored
	var missed []error
	if s.d.Catalog != nil {
		rec := orderstore.CatalogRecord{ProductID: key, Kind: orderstore.KindDegrade, On: on, Version: v, UpdatedMs: s.d.Now() / 1e6}
		if err := s.d.Catalog.PutCatalog(ctx, rec); err != nil {
			missed = append(missed, fmt.Errorf("durable catalogue: %w", err))
		} else {
			out.Durable = true
		}
	}
	if _, err := s.d.Store.SetDegrade(ctx, productID, stock.Degrade{On: on, Version: v}); err != nil {
		missed = append(missed, fmt.Errorf("redis: %w", err))
	} else {
		out.Redis = true
	}
	if !out.Redis && !out.Durable {
		return out, fmt.Errorf("degrade switch not changed: %w", errors.Join(missed...))
	}
	out.Missed = errors.Join(missed...)
	durable := prev.durable
	if out.Durable {
		durable = v
	}
	s.catMu.Lock()
	if cur := s.cat.degrade[key]; cur.version < v {
		s.cat.degrade[key] = degradeEntry{on: on, mark: mark{version: v, durable: durable}}
	}
	s.catMu.Unlock()
	s.applySwitches()
	if out.Missed != nil {
		s.d.Log.Warn("degrade switch recorded in one home only; the edges write it to the other when it answers",
			"product", productID, "on", on, "redis", out.Redis, "durable", out.Durable, "err", out.Missed)
	}
	return out, nil
}

// Degraded reports the switch for a product (or all).
func (s *Service) Degraded(productID []byte) bool {
	return s.degradeAll.Load() || (*s.degraded.Load())[string(productID)]
}

// DegradeState lists the switch for the admin API.
func (s *Service) DegradeState() (all bool, products []string) {
	for p := range *s.degraded.Load() {
		products = append(products, p)
	}
	return s.degradeAll.Load(), products
}

// RegisterMetrics exports the sale's counters.
func (s *Service) RegisterMetrics(reg *metrics.Registry) {
	reg.Register("flashgate_sale_attempts_total", "Purchase attempts (do) by outcome.", "counter", func(w *metrics.Writer) {
		for i := range s.outcomes {
			w.Value(float64(s.outcomes[i].Value()), metrics.Label{Name: "outcome", Value: outcomeNames[i]})
		}
	})
	reg.Register("flashgate_sale_hotspots_total", "Times a product crossed the hotspot threshold.", "counter", func(w *metrics.Writer) {
		w.Value(float64(s.hotspots.Value()))
	})
	reg.Register("flashgate_sale_hotspot", "1 while a product is a hotspot on this edge.", "gauge", func(w *metrics.Writer) {
		for _, e := range s.d.Sales.List() {
			v := 0.0
			if e.Hot() {
				v = 1
			}
			w.Value(v, metrics.Label{Name: "product", Value: e.ProductID})
		}
	})
	reg.Register("flashgate_sale_sold_out", "1 while the product's local sold-out flag is set.", "gauge", func(w *metrics.Writer) {
		for _, e := range s.d.Sales.List() {
			v := 0.0
			if e.SoldOut() {
				v = 1
			}
			w.Value(v, metrics.Label{Name: "product", Value: e.ProductID})
		}
	})
	reg.Register("flashgate_sale_stock_remaining", "Stock left as last seen by this edge.", "gauge", func(w *metrics.Writer) {
		for _, e := range s.d.Sales.List() {
			w.Value(float64(e.Remaining()), metrics.Label{Name: "product", Value: e.ProductID})
		}
	})
	reg.Register("flashgate_sale_recovering", "1 while the product is fenced: closed until rebuilt from the ledger (Redis lost or went back in time).", "gauge", func(w *metrics.Writer) {
		s.rb.mu.Lock()
		defer s.rb.mu.Unlock()
		for _, e := range s.d.Sales.List() {
			v := 0.0
			if s.rb.fenced[e.ProductID] != "" {
				v = 1
			}
			w.Value(v, metrics.Label{Name: "product", Value: e.ProductID})
		}
	})
	reg.Register("flashgate_sale_recoveries_total", "Ledger rebuilds of a fenced sale this edge ran.", "counter", func(w *metrics.Writer) {
		s.rb.mu.Lock()
		defer s.rb.mu.Unlock()
		for _, e := range s.d.Sales.List() {
			w.Value(float64(s.rb.counts[e.ProductID]), metrics.Label{Name: "product", Value: e.ProductID})
		}
	})
	// The breakers are per product; the unlabelled pair is the edge's
	// summary (any product open), kept for alerts and tools that read it.
	reg.Register("flashgate_redis_breaker_state", "Circuit breakers on Redis, edge summary: 1 if any product's is open, else 2 if any is half-open, else 0.", "gauge", func(w *metrics.Writer) {
		w.Value(float64(s.d.Breakers.Worst()))
	})
	reg.Register("flashgate_redis_breaker_transitions_total", "Circuit breaker state changes, all products.", "counter", func(w *metrics.Writer) {
		w.Value(float64(s.d.Breakers.AllTransitions()))
	})
	reg.Register("flashgate_redis_breaker_product_state", "Circuit breaker on Redis per product: 0 closed, 1 open, 2 half-open.", "gauge", func(w *metrics.Writer) {
		for _, e := range s.d.Sales.List() {
			w.Value(float64(s.d.Breakers.State(e.ProductID)), metrics.Label{Name: "product", Value: e.ProductID})
		}
	})
	reg.Register("flashgate_redis_breaker_product_transitions_total", "Circuit breaker state changes per product.", "counter", func(w *metrics.Writer) {
		for _, e := range s.d.Sales.List() {
			w.Value(float64(s.d.Breakers.Transitions(e.ProductID)), metrics.Label{Name: "product", Value: e.ProductID})
		}
	})
	reg.Register("flashgate_sale_degraded", "1 when the degrade switch is on (product \"*\" = all).", "gauge", func(w *metrics.Writer) {
		all, ps := s.DegradeState()
		v := 0.0
		if all {
			v = 1
		}
		w.Value(v, metrics.Label{Name: "product", Value: "*"})
		for _, p := range ps {
			w.Value(1, metrics.Label{Name: "product", Value: p})
		}
	})
	s.registerUnknownMetrics(reg)
	s.registerRoomMetrics(reg)
	reg.Register("flashgate_redis_waits_total", "WAITs after deduction script calls (redis.wait_replicas): all, and those that returned before enough replicas acknowledged.", "counter", func(w *metrics.Writer) {
		waits, short := s.d.Store.WaitStats()
		w.Value(float64(waits), metrics.Label{Name: "result", Value: "all"})
		w.Value(float64(short), metrics.Label{Name: "result", Value: "short"})
	})
	reg.Register("flashgate_redis_script_calls_total", "Deduction script calls and the attempts they carried (group commit).", "counter", func(w *metrics.Writer) {
		calls, attempts := s.d.Store.Stats()
		w.Value(float64(calls), metrics.Label{Name: "what", Value: "calls"})
		w.Value(float64(attempts), metrics.Label{Name: "what", Value: "attempts"})
	})
}

// BreakerState is the edge's summary of the Redis circuit breakers
// (Breakers.Worst), for the dashboard.
func (s *Service) BreakerState() BreakerState { return s.d.Breakers.Worst() }

// ProductBreakerState is one product's Redis circuit breaker state.
func (s *Service) ProductBreakerState(productID string) BreakerState {
	return s.d.Breakers.State(productID)
}
