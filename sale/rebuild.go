package sale

import (
	"context"
	"fmt"
	"sync"
	"time"

	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/activity"
)

// Ledger is what warm-up rebuilds a sale from when its stock key is
// missing: the order store, once every event that may still be on its way
// has been stored (orderstore.Ledger implements it). nil means "no ledger":
// a sale known to be lost then stays closed, and only a sale never opened
// anywhere (no meta in Redis, never seen by this edge) is warmed with the
// configured stock.
type Ledger interface {
	// Rebuild waits until no event of a sale lost at lostAt (zero: a new
	// sale) can still be in flight and the pipeline drained, then reads
	// the product's ledger. orderIDs are orders warm-up counts itself
	// unless stored (outbox entries) or corrects (surviving order
	// hashes): the state says which of them are stored, consistently with
	// its counts.
	Rebuild(ctx context.Context, productID string, lostAt time.Time, orderIDs []int64) (orderstore.LedgerState, error)
}

// rebuildTimeout bounds one rebuild attempt (the in-flight window, the
// drain, the ledger reads). The sale stays closed meanwhile; a failed
// attempt is retried by the next refresh.
const rebuildTimeout = 5 * time.Second

// rebuilder is the Service's memory of lost sales.
type rebuilder struct {
	mu     sync.Mutex // one rebuild at a time: concurrent refreshes would read and write the same
	lostMu sync.Mutex
	lostAt map[string]time.Time // when this edge first found the sale's stock key missing
}

// lostSince records (once) and returns when the sale was found lost.
func (r *rebuilder) lostSince(p string, now time.Time) time.Time {
	r.lostMu.Lock()
	defer r.lostMu.Unlock()
	if t, ok := r.lostAt[p]; ok {
		return t
	}
	if r.lostAt == nil {
		r.lostAt = map[string]time.Time{}
	}
	r.lostAt[p] = now
	return now
}

func (r *rebuilder) reopened(p string) {
	r.lostMu.Lock()
	defer r.lostMu.Unlock()
	delete(r.lostAt, p)
}

// openSale creates a sale's missing stock key: a new sale gets its configured
// stock, a lost one what the ledger says is left. Which one it is: a sale
// whose meta survived in Redis (the embedded server after a crash, a lost
// stock key) or that this edge saw open is lost; otherwise it is new as far
// as anyone can tell, and the ledger (when there is one) is asked all the
// same, so that a whole-cluster restart after Redis lost everything still
// finds what was sold.
func (s *Service) openSale(ctx context.Context, a *activity.Activity) error {
	p := a.ProductID
	meta, known, err := s.d.Store.Meta(ctx, p)
	if err != nil {
		return err
	}
	lost := known || s.d.Activities.StateOf(p).Remaining() >= 0
	if s.d.Ledger == nil {
		if lost {
			// Nobody knows what was sold: reopening with the configured
			// stock would sell it twice. NOT_READY -> 503 until an
			// operator acts.
			return fmt.Errorf("sale %s: stock key lost and no ledger to rebuild it from; the sale stays closed", p)
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
	var lostAt time.Time
	if lost {
		lostAt = s.rb.lostSince(p, time.Unix(0, s.d.Now()))
	}
	s.rb.mu.Lock()
	defer s.rb.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, rebuildTimeout)
	defer cancel()
	plan, pending, err := s.plan(rctx, a, meta, known, lostAt)
	if err != nil {
		return fmt.Errorf("sale %s: ledger: %w (the sale stays closed until the ledger answers)", p, err)
	}
	created, err := s.d.Store.Rebuild(ctx, plan)
	if err != nil {
		return err
	}
	s.rb.reopened(p)
	if created {
		s.d.Log.Info("sale warmed from the ledger", "product", p, "lost", lost, "stock", plan.Stock,
			"initial", plan.Initial, "restocked", plan.Restocked, "released", plan.Released,
			"buyers", len(plan.Buyers), "pendingUnits", pending, "ordersCorrected", len(plan.Orders))
	}
	return nil
}

// plan computes a lost (or new) sale's rebuild: stock = initial + restocked
// − units held, where held is the stored orders (status 1; released units
// are status 2 and so already back) plus the orders still in the outbox
// that the ledger has not stored; each buyer's count from the same.
func (s *Service) plan(ctx context.Context, a *activity.Activity, meta stock.Sale, known bool, lostAt time.Time) (stock.Rebuild, int64, error) {
	p := a.ProductID
	outbox, err := s.d.Store.OutboxOrders(ctx, p)
	if err != nil {
		return stock.Rebuild{}, 0, err
	}
	hashes, err := s.d.Store.SurvivingOrders(ctx, p)
	if err != nil {
		return stock.Rebuild{}, 0, err
	}
	ids := make([]int64, 0, len(outbox)+len(hashes))
	for _, o := range outbox {
		ids = append(ids, o.ID)
	}
	for id := range hashes {
		ids = append(ids, id)
	}
	// The outbox is read before the ledger drains: an entry gone from it
	// by then was acknowledged by Kafka, so the drain stores it.
	st, err := s.d.Ledger.Rebuild(ctx, p, lostAt, ids)
	if err != nil {
		return stock.Rebuild{}, 0, err
	}

	sale := saleOf(a)
	sale.Initial = a.Stock
	if known {
		// The sale's own figures beat the config, which may have changed
		// since it opened.
		if meta.Initial > 0 {
			sale.Initial = meta.Initial
		}
		sale.Restocked = meta.Restocked
	}
	held := st.Sold
	buyers := make(map[string]int64, len(st.Buyers))
	for u, n := range st.Buyers {
		buyers[u] = n
	}
	var pending int64
	seen := make(map[int64]bool, len(outbox))
	for _, o := range outbox {
		if _, stored := st.Statuses[o.ID]; stored || seen[o.ID] {
			continue
		}
		seen[o.ID] = true
		// Deducted, and on its way (the relay re-sends it): it counts.
		qty := int64(o.Qty)
		held += qty
		pending += qty
		buyers[o.UserID] += qty
	}
	if over := held - (sale.Initial + sale.Restocked); over > 0 {
		// More is held than the sale's figures allow: restocks were lost
		// with Redis. The ledger proves at least this much was restocked;
		// recording it keeps reconcile balanced and sells nothing more.
		s.d.Log.Warn("ledger holds more than the sale's initial stock and known restocks; restocks were lost with Redis",
			"product", p, "held", held, "initial", sale.Initial, "restocked", sale.Restocked)
		sale.Restocked += over
	}
	sale.Stock = sale.Initial + sale.Restocked - held
	sale.Released = st.Released
	fix := map[int64]string{}
	for id, state := range hashes {
		status, stored := st.Statuses[id]
		if !stored {
			continue // pending (outbox) or never stored: left alone
		}
		want := stock.StateSuccess
		if status == orderstore.StatusReleased {
			want = stock.StateReleased
		}
		if state != want {
			fix[id] = want
		}
	}
	return stock.Rebuild{Sale: sale, Buyers: buyers, Orders: fix}, pending, nil
}

func saleOf(a *activity.Activity) stock.Sale {
	return stock.Sale{ProductID: a.ProductID, Stock: a.Stock, Limit: a.Limit, Price: a.PriceCents, StartMs: a.StartMs, EndMs: a.EndMs}
}
