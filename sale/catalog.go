package sale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
)

// The sale catalogue (admin-created activities, restocks) and the degrade
// switch have three homes: the durable catalogue beside the ledger
// (orderstore.Catalog, written first by every admin change), Redis (the copy
// every edge reads each refresh), and each edge's memory (catalogView, what
// the edge knows of both). Every entry carries a version, and the newest
// wins wherever it is found; whichever home is behind is written again:
// Redis on the next refresh after it lost an entry or restarted from an old
// snapshot, the durable catalogue when a change reached only Redis (an
// entry from before the durable catalogue existed, a degrade made while it
// was down). So a Redis restarted empty neither loses an admin-created sale
// nor silently lifts a degrade, and a restarted edge learns both.

const (
	// catalogReadEvery is how often an edge re-reads the durable
	// catalogue: what reached it but not Redis (a Redis failure after the
	// durable write) is known to every edge within it. Changes that
	// reached Redis are known within the refresh interval.
	catalogReadEvery = 10 * time.Second
	// catalogReadTimeout bounds one read of it inside a refresh.
	catalogReadTimeout = 2 * time.Second
	// openingGrace is how long after an admin change a sale without stock
	// in Redis may still be being opened by the edge that made it, rather
	// than lost.
	openingGrace = 10 * time.Second
)

// ErrCatalogUnavailable is wrapped by an admin change the durable catalogue
// did not take: nothing was changed anywhere.
var ErrCatalogUnavailable = errors.New("the durable sale catalogue is unreachable; nothing was changed")

// mark is an entry's version as this edge knows it, and the version the
// durable catalogue is known to hold (-1: none, or not known yet).
type mark struct {
	version, durable int64
}

type actEntry struct {
	doc string // activity JSON
	mark
}

type degradeEntry struct {
	on bool
	mark
}

// catalogView is the edge's memory of the catalogue and the switches.
type catalogView struct {
	acts    map[string]actEntry
	degrade map[string]degradeEntry // orderstore.AllProducts: every product
	// restocked is each product's restocked units as of the last durable
	// read.
	restocked map[string]int64
	// opening holds the products PutActivity is opening for the first
	// time: new, not lost.
	opening map[string]int
	// lost holds the sales whose loss was logged, until they reopen.
	lost map[string]bool
	// nextRead is when (unix ns) the durable catalogue is read next; 0:
	// at the next refresh.
	nextRead    int64
	readFailing bool
}

func newCatalogView() catalogView {
	return catalogView{acts: map[string]actEntry{}, degrade: map[string]degradeEntry{},
		restocked: map[string]int64{}, opening: map[string]int{}, lost: map[string]bool{}}
}

// nextVersion is the version of a change made now of an entry whose newest
// known version is prev: the clock in milliseconds, past prev.
func nextVersion(nowNs, prev int64) int64 {
	return max(nowNs/1e6, prev+1)
}

// catalogRestore is an entry Redis lost or holds an older version of.
type catalogRestore struct {
	product string
	entry   stock.CatalogEntry
	present bool
}

// degradeRestore is a switch Redis lost or holds an older version of.
type degradeRestore struct {
	product string // "" for every product
	d       stock.Degrade
}

// mergeRedis takes what Redis holds into the view and returns what Redis
// must be given back. Held under catMu.
func (v *catalogView) mergeRedis(acts map[string]stock.CatalogEntry, all stock.Degrade, degs map[string]stock.Degrade) ([]catalogRestore, []degradeRestore) {
	for p, e := range acts {
		cur, ok := v.acts[p]
		if !ok {
			cur.durable = -1
		}
		if !ok || e.Version >= cur.version {
			cur.doc, cur.version = e.Activity, e.Version
		}
		v.acts[p] = cur
	}
	takeDegrade := func(p string, d stock.Degrade) {
		if d.Version == 0 {
			return // never set
		}
		cur, ok := v.degrade[p]
		if !ok {
			cur.durable = -1
		}
		if !ok || d.Version > cur.version {
			cur.on, cur.version = d.On, d.Version
		}
		v.degrade[p] = cur
	}
	takeDegrade(orderstore.AllProducts, all)
	for p, d := range degs {
		takeDegrade(p, d)
	}

	var cr []catalogRestore
	for p, cur := range v.acts {
		if e, ok := acts[p]; !ok || e.Version < cur.version {
			cr = append(cr, catalogRestore{product: p, entry: stock.CatalogEntry{Activity: cur.doc, Version: cur.version}, present: ok})
		}
	}
	var dr []degradeRestore
	for p, cur := range v.degrade {
		have := all
		if p != orderstore.AllProducts {
			have = degs[p]
		}
		if have.Version < cur.version {
			r := degradeRestore{product: p, d: stock.Degrade{On: cur.on, Version: cur.version}}
			if p == orderstore.AllProducts {
				r.product = ""
			}
			dr = append(dr, r)
		}
	}
	return cr, dr
}

// mergeDurable takes what the durable catalogue holds into the view and
// returns the records it must be given: entries known newer here (a change
// that reached only Redis). Held under catMu.
func (v *catalogView) mergeDurable(recs []orderstore.CatalogRecord) []orderstore.CatalogRecord {
	entries := orderstore.Entries(recs)
	for p, e := range entries {
		if e.Activity != "" {
			cur, ok := v.acts[p]
			if !ok || e.ActivityVersion > cur.version {
				cur.doc, cur.version = e.Activity, e.ActivityVersion
			}
			cur.durable = max(cur.durable, e.ActivityVersion)
			v.acts[p] = cur
		}
		if e.DegradeVersion > 0 {
			cur, ok := v.degrade[p]
			if !ok || e.DegradeVersion > cur.version {
				cur.on, cur.version = e.Degraded, e.DegradeVersion
			}
			cur.durable = max(cur.durable, e.DegradeVersion)
			v.degrade[p] = cur
		}
	}
	v.restocked = make(map[string]int64, len(entries))
	for p, e := range entries {
		if e.Restocked > 0 {
			v.restocked[p] = e.Restocked
		}
	}
	var out []orderstore.CatalogRecord
	for p, cur := range v.acts {
		if cur.durable < cur.version { // -1 < 0: an entry from before the durable catalogue
			out = append(out, orderstore.CatalogRecord{ProductID: p, Kind: orderstore.KindActivity, Activity: cur.doc, Version: cur.version})
		}
	}
	for p, cur := range v.degrade {
		if cur.durable < cur.version {
			out = append(out, orderstore.CatalogRecord{ProductID: p, Kind: orderstore.KindDegrade, On: cur.on, Version: cur.version})
		}
	}
	return out
}

// switches is the degrade state the view holds.
func (v *catalogView) switches() (all bool, products map[string]bool) {
	products = map[string]bool{}
	for p, d := range v.degrade {
		switch {
		case p == orderstore.AllProducts:
			all = d.on
		case d.on:
			products[p] = true
		}
	}
	return all, products
}

// adminCatalog reads the admin catalog from Redis and, when due, the
// durable catalogue, merges them into the view, gives each home what it
// lacks, applies the degrade switches, and returns the activities. Only a
// Redis failure is an error: a durable catalogue that does not answer is
// logged, and what the edge knew of it stands.
func (s *Service) adminCatalog(ctx context.Context) ([]*catalog.Sale, error) {
	acts, err := s.d.Store.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	all, degs, err := s.d.Store.DegradeState(ctx)
	if err != nil {
		return nil, err
	}
	s.readDurable(ctx)
	s.catMu.Lock()
	cr, dr := s.cat.mergeRedis(acts, all, degs)
	s.catMu.Unlock()
	s.restoreRedis(ctx, cr, dr)
	s.applySwitches()

	s.catMu.Lock()
	docs := make(map[string]string, len(s.cat.acts))
	for p, e := range s.cat.acts {
		docs[p] = e.doc
	}
	s.catMu.Unlock()
	out := make([]*catalog.Sale, 0, len(docs))
	for p, js := range docs {
		var a catalog.Sale
		if err := json.Unmarshal([]byte(js), &a); err != nil || a.ProductID != p || len(a.Validate()) > 0 {
			s.d.Log.Warn("ignoring a malformed catalog entry", "product", p, "err", err)
			continue
		}
		out = append(out, &a)
	}
	return out, nil
}

// readDurable reads the durable catalogue when it is due and writes back
// what it lacks.
func (s *Service) readDurable(ctx context.Context) {
	if s.d.Catalog == nil {
		return
	}
	now := s.d.Now()
	s.catMu.Lock()
	due := now >= s.cat.nextRead
	if due {
		s.cat.nextRead = now + int64(catalogReadEvery)
	}
	s.catMu.Unlock()
	if !due {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, catalogReadTimeout)
	defer cancel()
	recs, err := s.d.Catalog.ReadCatalog(rctx, "")
	s.catMu.Lock()
	if err != nil {
		failing := s.cat.readFailing
		s.cat.readFailing = true
		s.catMu.Unlock()
		if !failing {
			s.d.Log.Warn("the durable sale catalogue does not answer; the edge keeps what it knew of it and retries",
				"every", catalogReadEvery, "err", err)
		}
		return
	}
	recovered := s.cat.readFailing
	s.cat.readFailing = false
	back := s.cat.mergeDurable(recs)
	s.catMu.Unlock()
	if recovered {
		s.d.Log.Info("the durable sale catalogue answers again")
	}
	if len(back) == 0 {
		return
	}
	now = s.d.Now()
	for i := range back {
		back[i].UpdatedMs = now / 1e6
	}
	wctx, cancel := context.WithTimeout(ctx, catalogReadTimeout)
	defer cancel()
	if err := s.d.Catalog.PutCatalog(wctx, back...); err != nil {
		s.d.Log.Warn("could not record in the durable sale catalogue what only Redis held; retried on the next read",
			"entries", len(back), "err", err)
		return
	}
	s.catMu.Lock()
	for _, r := range back {
		switch r.Kind {
		case orderstore.KindActivity:
			if e, ok := s.cat.acts[r.ProductID]; ok {
				e.durable = max(e.durable, r.Version)
				s.cat.acts[r.ProductID] = e
			}
		case orderstore.KindDegrade:
			if e, ok := s.cat.degrade[r.ProductID]; ok {
				e.durable = max(e.durable, r.Version)
				s.cat.degrade[r.ProductID] = e
			}
		}
	}
	s.catMu.Unlock()
	s.d.Log.Info("recorded in the durable sale catalogue what only Redis held", "entries", len(back))
}

// restoreRedis gives Redis back the entries it lost or holds older
// versions of. Failures are retried by the next refresh.
func (s *Service) restoreRedis(ctx context.Context, cr []catalogRestore, dr []degradeRestore) {
	for _, r := range cr {
		restored, err := s.d.Store.RestoreCatalog(ctx, r.product, r.entry, r.present)
		switch {
		case err != nil:
			s.d.Log.Warn("could not restore a sale's catalog entry to Redis; retried on the next refresh", "product", r.product, "err", err)
		case restored:
			s.d.Log.Warn("restored a sale's catalog entry that Redis had lost or held an older version of", "product", r.product,
				"version", r.entry.Version, "lost", !r.present)
		}
	}
	for _, r := range dr {
		applied, err := s.d.Store.SetDegrade(ctx, r.product, r.d)
		switch {
		case err != nil:
			s.d.Log.Warn("could not restore a degrade switch to Redis; retried on the next refresh", "product", r.product, "err", err)
		case applied:
			s.d.Log.Warn("restored a degrade switch that Redis had lost or held an older version of", "product", r.product,
				"on", r.d.On, "version", r.d.Version)
		}
	}
}

// applySwitches installs the view's degrade switches for the hot path
// (Degraded: atomic loads only), replacing the product map only when it
// changed.
func (s *Service) applySwitches() {
	s.catMu.Lock()
	all, products := s.cat.switches()
	s.catMu.Unlock()
	s.degradeMu.Lock()
	defer s.degradeMu.Unlock()
	if s.degradeAll.Swap(all) != all {
		s.d.Log.Info("degrade switch of every product changed", "on", all)
	}
	cur := *s.degraded.Load()
	if maps.Equal(cur, products) {
		return
	}
	for p := range products {
		if !cur[p] {
			s.d.Log.Info("degrade switch changed", "product", p, "on", true)
		}
	}
	for p := range cur {
		if !products[p] {
			s.d.Log.Info("degrade switch changed", "product", p, "on", false)
		}
	}
	s.degraded.Store(&products)
}

// noteLost reports (once per loss) that a live sale's stock is gone from
// Redis: this edge saw it open, or the catalogue has recorded it for longer
// than the edge that created it needs to open it.
func (s *Service) noteLost(p string) bool {
	seen := s.d.Sales.StateOf(p).Remaining() >= 0
	s.catMu.Lock()
	defer s.catMu.Unlock()
	e, recorded := s.cat.acts[p]
	recorded = recorded && e.version < (s.d.Now()-int64(openingGrace))/1e6 || s.cat.restocked[p] > 0
	if s.cat.lost[p] || s.cat.opening[p] > 0 || !(seen || recorded) {
		return false
	}
	s.cat.lost[p] = true
	return true
}

// closedAnswer is the answer to a purchase the deduction refused because
// the sale has no stock in Redis (NotReady; a fenced sale answers
// Recovering in settle): a sale this edge knows was lost is recovering,
// any other still opening. Off the hot path: only closed sales get here.
func (s *Service) closedAnswer(productID []byte) *api.Rejection {
	s.catMu.Lock()
	lost := s.cat.lost[string(productID)]
	s.catMu.Unlock()
	if lost {
		return api.Recovering
	}
	return api.Warming
}

// noteReopened reports whether a sale whose loss was logged is open again.
func (s *Service) noteReopened(p string) bool {
	s.catMu.Lock()
	defer s.catMu.Unlock()
	if !s.cat.lost[p] {
		return false
	}
	delete(s.cat.lost, p)
	return true
}

// durableSale is what the durable catalogue records of one sale.
type durableSale struct {
	// Known: the catalogue records the sale itself (created through the
	// admin API, or restocked), so it existed before: if Redis has no
	// stock for it, it was lost — unless Opening.
	Known bool
	// Opening: PutActivity on this edge is opening it for the first time.
	Opening bool
	// Initial is the stock an admin-created sale was created with (0 for
	// one from the config file).
	Initial int64
	// Restocked is the units its restocks added.
	Restocked int64
}

// durableSale reads what the durable catalogue records of the sale now,
// for a rebuild after Redis lost the sale's meta (rebuild.go): its initial
// stock and its restocks, which the meta held. The zero value, without an
// error, when there is no durable catalogue.
func (s *Service) durableSale(ctx context.Context, productID string) (durableSale, error) {
	if s.d.Catalog == nil {
		return durableSale{}, nil
	}
	recs, err := s.d.Catalog.ReadCatalog(ctx, productID)
	if err != nil {
		return durableSale{}, fmt.Errorf("sale %s: durable catalogue: %w", productID, err)
	}
	e := orderstore.Entries(recs)[productID]
	ds := durableSale{Known: e.Activity != "" || e.Restocks > 0, Restocked: e.Restocked}
	if e.Activity != "" {
		var a catalog.Sale
		if json.Unmarshal([]byte(e.Activity), &a) == nil {
			ds.Initial = a.Stock
		}
	}
	s.catMu.Lock()
	ds.Opening = s.cat.opening[productID] > 0
	s.catMu.Unlock()
	return ds, nil
}
