package proxy

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"flashgate/metrics"
	"flashgate/orders/broker"
	"flashgate/orders/consumer"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/proxy/dashboard"
)

// pipeline is the orders side of an edge: the publisher the purchase path
// waits on, the outbox relay, and optionally the consumer and order store.
type pipeline struct {
	brokers    []string
	pub        *broker.Publisher
	relay      *broker.Relay
	store      orderstore.Store
	consumer   *consumer.Consumer
	stopCons   context.CancelFunc
	consDone   chan struct{}
	stopBroker func()
	tmpDir     string

	// Sampled by watch.
	outbox, lag atomic.Int64
	perProduct  atomic.Pointer[map[string]productPipe]
	stopWatch   context.CancelFunc
	watchDone   chan struct{}
}

// productPipe is one product's backlog and payment figures as last
// sampled (-1: unknown).
type productPipe struct {
	outbox, stored        int64
	unpaid, paid, expired int64
	due                   int64
	deadlines             []stock.Deadline
}

// deadlinesShown is how many of a sale's next pay deadlines the dashboard
// lists.
const deadlinesShown = 5

// close stops the pipeline in dependency order: nothing new to relay, the
// consumer, the publisher (flushing queued outbox acks), the store, then the
// embedded broker.
func (p *pipeline) close() error {
	var errs []error
	if p.stopWatch != nil {
		p.stopWatch()
		<-p.watchDone
	}
	if p.relay != nil {
		p.relay.Close()
	}
	if p.stopCons != nil {
		p.stopCons()
		<-p.consDone
	}
	if p.pub != nil {
		errs = append(errs, p.pub.Close())
	}
	if p.store != nil {
		errs = append(errs, p.store.Close())
	}
	if p.stopBroker != nil {
		p.stopBroker()
	}
	if p.tmpDir != "" {
		os.RemoveAll(p.tmpDir)
	}
	return errors.Join(errs...)
}

// watch samples what the dashboard and metrics show about the pipeline's
// backlog (outbox entries, consumer lag) every interval, off the request
// path, until ctx ends.
func (p *pipeline) watch(ctx context.Context, st *stock.Store, products func() []string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var outbox int64
		per := map[string]productPipe{}
		for _, id := range products() {
			pp := productPipe{outbox: -1, stored: -1, unpaid: -1, paid: -1, expired: -1, due: -1}
			if n, err := st.OutboxLen(ctx, id); err == nil {
				pp.outbox = n
				if outbox >= 0 {
					outbox += n
				}
			} else {
				outbox = -1
			}
			if p.store != nil {
				if t, err := p.store.Totals(ctx, id); err == nil {
					pp.stored = t.HeldOrders()
				}
			}
			if info, ok, err := st.SaleInfo(ctx, id); err == nil && ok {
				// initial + restocked = paid + unpaid + remaining: what the
				// held orders keep is what is neither paid nor left.
				pp.paid, pp.expired = info.Paid, info.Expired
				pp.unpaid = max(0, info.Initial+info.Restocked-info.Paid-info.Remaining)
			}
			if list, total, err := st.NextDeadlines(ctx, id, deadlinesShown); err == nil {
				pp.deadlines, pp.due = list, total
			}
			per[id] = pp
		}
		p.outbox.Store(outbox)
		p.perProduct.Store(&per)
		if p.consumer != nil {
			lag, err := p.consumer.Lag(ctx)
			if err != nil {
				lag = -1
			}
			p.lag.Store(lag)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *pipeline) fillDashboard(d *dashboard.Snapshot) {
	d.Pipeline.OutboxPending = p.outbox.Load()
	d.Pipeline.KafkaLag = p.lag.Load()
	if per := p.perProduct.Load(); per != nil {
		for i := range d.Products {
			if pp, ok := (*per)[d.Products[i].ProductID]; ok {
				dp := &d.Products[i]
				dp.OutboxPending, dp.Stored = pp.outbox, pp.stored
				dp.Unpaid, dp.Paid, dp.Expired, dp.Due = pp.unpaid, pp.paid, pp.expired, pp.due
				for _, dl := range pp.deadlines {
					dp.Deadlines = append(dp.Deadlines, dashboard.Deadline{OrderID: strconv.FormatInt(dl.OrderID, 10), PayByMs: dl.PayByMs})
				}
			}
		}
	}
	if p.consumer != nil {
		st := p.consumer.Stats()
		d.Pipeline.Stored = int64(st.Stored)
		d.Pipeline.DeadLettered = int64(st.DeadLettered)
		d.Pipeline.ConsumerRunning = true
	}
}

func (p *pipeline) registerMetrics(reg *metrics.Registry) {
	reg.Register("flashgate_orders_published_total", "Order events acknowledged by Kafka (direct path and relay).", "counter", func(w *metrics.Writer) {
		st := p.pub.Stats()
		w.Value(float64(st.Published))
	})
	// The sales' payment figures, in units, from their meta in Redis
	// (sampled every 2s): the same on every edge.
	for _, f := range []struct {
		name, help string
		get        func(productPipe) int64
	}{
		{"flashgate_orders_unpaid", "Units held by orders not paid yet, per sale (sampled every 2s).", func(pp productPipe) int64 { return pp.unpaid }},
		{"flashgate_orders_paid", "Units paid for, per sale (sampled every 2s).", func(pp productPipe) int64 { return pp.paid }},
		{"flashgate_orders_expired", "Units released by the pay deadline, per sale (sampled every 2s).", func(pp productPipe) int64 { return pp.expired }},
	} {
		get := f.get
		reg.Register(f.name, f.help, "gauge", func(w *metrics.Writer) {
			per := p.perProduct.Load()
			if per == nil {
				return
			}
			for _, id := range slices.Sorted(maps.Keys(*per)) {
				if v := get((*per)[id]); v >= 0 {
					w.Value(float64(v), metrics.Label{Name: "product", Value: id})
				}
			}
		})
	}
	reg.Register("flashgate_outbox_pending", "Outbox entries not yet removed (sampled every 2s; -1 unknown).", "gauge", func(w *metrics.Writer) {
		w.Value(float64(p.outbox.Load()))
	})
	reg.Register("flashgate_outbox_relayed_total", "Outbox entries the relay had to send (the direct path did not acknowledge them).", "counter", func(w *metrics.Writer) {
		w.Value(float64(p.relay.Stats().Relayed))
	})
	reg.Register("flashgate_outbox_relay_consumers_removed_total", "Dead edges' consumers this edge removed from the outbox relay groups.", "counter", func(w *metrics.Writer) {
		w.Value(float64(p.relay.Stats().Forgotten))
	})
	if p.consumer == nil {
		return
	}
	reg.Register("flashgate_orders_consumer_lag", "Order events published but not yet stored (sampled every 2s; -1 unknown).", "gauge", func(w *metrics.Writer) {
		w.Value(float64(p.lag.Load()))
	})
	reg.Register("flashgate_orders_stored_total", "Orders stored by this edge's consumer.", "counter", func(w *metrics.Writer) {
		w.Value(float64(p.consumer.Stats().Stored))
	})
	reg.Register("flashgate_orders_dead_lettered_total", "Events sent to the dead-letter topic.", "counter", func(w *metrics.Writer) {
		w.Value(float64(p.consumer.Stats().DeadLettered))
	})
}
