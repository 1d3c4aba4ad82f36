package proxy

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"time"

	"flashgate/metrics"
	"flashgate/orders"
	"flashgate/orders/consumer"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/proxy/dashboard"
)

// pipeline is the orders side of an edge: the publisher the purchase path
// waits on, the outbox relay, and optionally the consumer and order store.
type pipeline struct {
	brokers    []string
	pub        *orders.Publisher
	relay      *orders.Relay
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

// productPipe is one product's backlog as last sampled.
type productPipe struct{ outbox, stored int64 }

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
			pp := productPipe{outbox: -1, stored: -1}
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
				d.Products[i].OutboxPending, d.Products[i].Stored = pp.outbox, pp.stored
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
