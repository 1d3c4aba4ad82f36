package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/metrics"
	"flashgate/orders"
	"flashgate/orders/consumer"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
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

// sink adapts the publisher to the sale's OrderSink.
type sink struct{ p *orders.Publisher }

func (k sink) Publish(ctx context.Context, o *order.Order, outboxID string) error {
	return k.p.PublishAndAck(ctx, orders.OrderEvent(o), outboxID)
}

// dataPath is where an embedded stand-in keeps its state: under data_dir,
// or in a temporary directory removed on shutdown when data_dir is empty.
func (p *pipeline) dataPath(cfg *conf.Config, name string) (string, error) {
	if cfg.DataDir != "" {
		return filepath.Join(cfg.DataDir, name), nil
	}
	if p.tmpDir == "" {
		d, err := os.MkdirTemp("", "flashgate-")
		if err != nil {
			return "", err
		}
		p.tmpDir = d
	}
	return filepath.Join(p.tmpDir, name), nil
}

// OpenOrderStore opens the configured order store: ClickHouse, or the
// embedded file store under dir.
func OpenOrderStore(ctx context.Context, cfg *conf.Config, dir string) (orderstore.Store, error) {
	ch := cfg.ClickHouse
	if ch.Addr == "" {
		return orderstore.OpenFile(dir)
	}
	pw, err := field.ResolveEnv(ch.Password)
	if err != nil {
		return nil, err
	}
	return orderstore.OpenClickHouse(ctx, ch.Addr, ch.Database, orderstore.ClickHouseOptions{Username: ch.Username, Password: pw})
}

// openOrders starts the pipeline for an edge.
func (s *Server) openOrders(cfg *conf.Config) error {
	p := &pipeline{}
	fail := func(err error) error {
		p.close()
		return err
	}
	p.brokers = cfg.Kafka.Brokers
	if len(p.brokers) == 0 {
		dir, err := p.dataPath(cfg, "kafka")
		if err != nil {
			return err
		}
		s.log.Warn("kafka.brokers is empty: using the embedded in-process Kafka-protocol broker (demo only)", "data_dir", dir)
		if p.brokers, p.stopBroker, err = orders.StartEmbeddedWith(orders.EmbeddedConfig{DataDir: dir, Partitions: cfg.Kafka.Partitions}); err != nil {
			return fail(err)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := orders.EnsureTopics(ctx, p.brokers,
			orders.Topic{Name: cfg.Kafka.Topic, Partitions: cfg.Kafka.Partitions},
			orders.Topic{Name: cfg.Kafka.DLQTopic, Partitions: 1}); err != nil {
			return fail(fmt.Errorf("kafka: %w", err))
		}
	}
	var err error
	p.pub, err = orders.NewPublisher(orders.PublisherConfig{
		Brokers: p.brokers, Topic: cfg.Kafka.Topic, DLQTopic: cfg.Kafka.DLQTopic,
		BatchTimeout: cfg.Kafka.BatchTimeout, Timeout: cfg.Kafka.Timeout,
		Outbox: s.store, Log: s.log,
	})
	if err != nil {
		return fail(err)
	}
	p.relay, err = orders.NewRelay(orders.RelayConfig{
		Store: s.store, Publisher: p.pub, Node: cfg.NodeID,
		Interval: cfg.Orders.RelayInterval, MinAge: cfg.Orders.RelayMinAge,
		Products: s.productIDs, Log: s.log,
	})
	if err != nil {
		return fail(err)
	}
	if cfg.Orders.Consumer {
		if err := p.startConsumer(s, cfg); err != nil {
			return fail(err)
		}
	} else if cfg.ClickHouse.Addr != "" {
		// The consumer runs elsewhere; the edge still reads the store for
		// warm-up after a Redis loss and for expired results.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		p.store, err = OpenOrderStore(ctx, cfg, "")
		cancel()
		if err != nil {
			return fail(fmt.Errorf("order store: %w", err))
		}
	}
	p.relay.Start()
	p.outbox.Store(-1)
	p.lag.Store(-1)
	wctx, stopWatch := context.WithCancel(context.Background())
	p.stopWatch, p.watchDone = stopWatch, make(chan struct{})
	go func() { defer close(p.watchDone); p.watch(wctx, s, 2*time.Second) }()
	s.orders = p
	s.sale.Orders = sink{p.pub}
	if p.store != nil {
		// Warm-up after Redis lost a sale first waits until every published
		// event is stored (and none can still be in flight), then trusts
		// the store.
		brokers, topic, group := p.brokers, cfg.Kafka.Topic, cfg.Orders.Group
		drain := func(ctx context.Context) error {
			return consumer.WaitDrained(ctx, brokers, topic, group, 100*time.Millisecond)
		}
		inFlight := time.Duration(0) // embedded Redis: its only edge died with it
		if !s.store.Embedded() {
			// A publish that timed out for the shopper is still retried by
			// kafka-go: up to MaxAttempts × (WriteTimeout + backoff).
			inFlight = cfg.Kafka.Timeout + 25*time.Second
		}
		s.sale.Ledger = orderstore.Ledger{Store: p.store, Drain: drain, InFlight: inFlight}
		s.sale.Results = p.store
	}
	s.pipeline = p.fillDashboard
	p.registerMetrics(&s.m.reg)
	return nil
}

func (p *pipeline) startConsumer(s *Server, cfg *conf.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dir, err := p.dataPath(cfg, "orders")
	if err != nil {
		return err
	}
	if cfg.ClickHouse.Addr == "" {
		s.log.Warn("clickhouse.addr is empty: using the embedded order store (a log file; demo only)", "dir", dir)
	}
	if p.store, err = OpenOrderStore(ctx, cfg, dir); err != nil {
		return fmt.Errorf("order store: %w", err)
	}
	p.consumer, err = consumer.New(consumer.Config{
		Brokers: p.brokers, Topic: cfg.Kafka.Topic, DLQTopic: cfg.Kafka.DLQTopic,
		Group: cfg.Orders.Group, BatchSize: cfg.Orders.BatchSize, BatchTime: cfg.Orders.BatchTime,
		Store: p.store, Stock: s.store, Log: s.log, OnStored: s.onStored,
	})
	if err != nil {
		return err
	}
	cctx, stop := context.WithCancel(context.Background())
	p.stopCons = stop
	p.consDone = make(chan struct{})
	go func() {
		defer close(p.consDone)
		if err := p.consumer.Run(cctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("order consumer stopped", "err", err)
		}
	}()
	return nil
}

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

// productIDs lists the sales this edge knows, for the relay.
func (s *Server) productIDs() []string {
	list := s.env.Activities.List()
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.ProductID
	}
	return out
}

// onStored runs on the consumer's goroutine after each stored batch.
func (s *Server) onStored(products map[string][]int64) {
	// Every edge's event streams hear of the batch (this one's included).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	if err := s.store.PublishStored(ctx, products); err != nil {
		s.log.Warn("stored orders not pushed; their streams end at the deadline with the state read then", "err", err)
	}
	cancel()
	if s.storedHook != nil {
		s.storedHook(products)
	}
}

// watch samples what the dashboard and metrics show about the pipeline's
// backlog (outbox entries, consumer lag) every interval, off the request
// path, until ctx ends.
func (p *pipeline) watch(ctx context.Context, s *Server, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var outbox int64
		per := map[string]productPipe{}
		for _, id := range s.productIDs() {
			pp := productPipe{outbox: -1, stored: -1}
			if n, err := s.store.OutboxLen(ctx, id); err == nil {
				pp.outbox = n
				if outbox >= 0 {
					outbox += n
				}
			} else {
				outbox = -1
			}
			if p.store != nil {
				if t, err := p.store.Totals(ctx, id); err == nil {
					pp.stored = t.Orders
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
