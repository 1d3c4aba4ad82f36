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
	// up is whether the last sample reached each backend (1 yes, 0 a call
	// failed, -1 not sampled: this edge does not use it, or nothing to ask
	// yet); storeName is the order store's backend label.
	up         [numBackends]atomic.Int32
	storeName  string
	perProduct atomic.Pointer[map[string]productPipe]
	stopWatch  context.CancelFunc
	watchDone  chan struct{}
}

// productPipe is one product's backlog and payment figures as last
// sampled (-1: unknown).
type productPipe struct {
	outbox, stored        int64
	unpaid, paid, expired int64
	due                   int64
	deadlines             []stock.Deadline
}

// The backends whose reachability the watch samples, for
// flashgate_backend_up.
const (
	backendRedis = iota
	backendKafka
	backendStore
	numBackends
)

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
		// Each backend is up when every call of this sample to it
		// answered; a sale's meta not there yet is an answer.
		up := [numBackends]int32{-1, -1, -1}
		answered := func(b int, err error) {
			if err != nil {
				up[b] = 0
			} else if up[b] != 0 {
				up[b] = 1
			}
		}
		for _, id := range products() {
			pp := productPipe{outbox: -1, stored: -1, unpaid: -1, paid: -1, expired: -1, due: -1}
			n, err := st.OutboxLen(ctx, id)
			answered(backendRedis, err)
			if err == nil {
				pp.outbox = n
				if outbox >= 0 {
					outbox += n
				}
			} else {
				outbox = -1
			}
			if p.store != nil {
				t, err := p.store.Totals(ctx, id)
				answered(backendStore, err)
				if err == nil {
					pp.stored = t.HeldOrders()
				}
			}
			info, ok, err := st.SaleInfo(ctx, id)
			answered(backendRedis, err)
			if err == nil && ok {
				// initial + restocked = paid + unpaid + remaining: what the
				// held orders keep is what is neither paid nor left.
				pp.paid, pp.expired = info.Paid, info.Expired
				pp.unpaid = max(0, info.Initial+info.Restocked-info.Paid-info.Remaining)
			}
			list, total, err := st.NextDeadlines(ctx, id, deadlinesShown)
			answered(backendRedis, err)
			if err == nil {
				pp.deadlines, pp.due = list, total
			}
			per[id] = pp
		}
		p.outbox.Store(outbox)
		p.perProduct.Store(&per)
		if p.consumer != nil {
			lag, err := p.consumer.Lag(ctx)
			answered(backendKafka, err)
			if err != nil {
				lag = -1
			}
			p.lag.Store(lag)
		}
		if ctx.Err() != nil {
			return // a sample cut short by shutdown tells nothing
		}
		for b := range up {
			p.up[b].Store(up[b])
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
	// When the next unsettled pay deadline of each sale falls: long past
	// means the deadline sweep is behind (or not running anywhere).
	reg.Register("flashgate_pay_deadline_next_timestamp_seconds", "Unix time of the earliest pay deadline of a sale's unsettled orders, overdue ones included (sampled every 2s; absent when none waits).", "gauge", func(w *metrics.Writer) {
		per := p.perProduct.Load()
		if per == nil {
			return
		}
		for _, id := range slices.Sorted(maps.Keys(*per)) {
			if dl := (*per)[id].deadlines; len(dl) > 0 {
				w.Value(float64(dl[0].PayByMs)/1e3, metrics.Label{Name: "product", Value: id})
			}
		}
	})
	backends := [numBackends]string{backendRedis: "redis", backendKafka: "kafka", backendStore: p.storeName}
	reg.Register("flashgate_backend_up", "1 when every call of the last sample (every 2s) to the backend answered, 0 when one failed; absent for a backend this edge does not sample (kafka: only with orders.consumer).", "gauge", func(w *metrics.Writer) {
		for b, name := range backends {
			if v := p.up[b].Load(); v >= 0 {
				w.Value(float64(v), metrics.Label{Name: "backend", Value: name})
			}
		}
	})
	reg.Register("flashgate_orders_errors_total", "Failed calls of the order pipeline by stage: publish (Kafka did not take an event; the outbox keeps it), outbox_ack (Redis: an entry not removed), relay (a product's outbox sweep), store (ClickHouse inserts, retried), commit (Kafka offsets), mark (Redis order states, retried).", "counter", func(w *metrics.Writer) {
		pub, rel := p.pub.Stats(), p.relay.Stats()
		w.Value(float64(pub.Failed), metrics.Label{Name: "stage", Value: "publish"})
		w.Value(float64(pub.AckErrors), metrics.Label{Name: "stage", Value: "outbox_ack"})
		w.Value(float64(rel.Errors), metrics.Label{Name: "stage", Value: "relay"})
		if p.consumer != nil {
			cs := p.consumer.Stats()
			w.Value(float64(cs.InsertErrors), metrics.Label{Name: "stage", Value: "store"})
			w.Value(float64(cs.CommitErrors), metrics.Label{Name: "stage", Value: "commit"})
			w.Value(float64(cs.MarkErrors), metrics.Label{Name: "stage", Value: "mark"})
		}
	})
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
	reg.Register("flashgate_orders_consumer_rejoins_total", "Times this edge's consumer left and rejoined its group because a partition's lag stood still (a member holding it does not consume).", "counter", func(w *metrics.Writer) {
		w.Value(float64(p.consumer.Stats().Rejoins))
	})
}
