package proxy

import (
	"context"
	"crypto/rand"
	"errors"
	"flashgate/proxy/routeroom"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/filters"
	"flashgate/orders/broker"
	"flashgate/orders/consumer"
	"flashgate/orders/deadline"
	"flashgate/orders/order"
	"flashgate/orders/orderid"
	"flashgate/orders/orderstore"
	"flashgate/orders/reconcile"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/push"
)

// The composition root. Every long-lived part of an edge process is built
// here, in dependency order, complete at construction: the Redis store, the
// order pipeline, the event-stream hub, the sale service. The subcommands
// (`proxy orders`, `proxy reconcile`) are built from the same constructors,
// so a consumer or a reconcile run is wired exactly as the edge wires its
// own. Redis, Kafka and ClickHouse settings are read once: changing them
// needs a restart.

// parts are the long-lived collaborators New hands to the Server.
type parts struct {
	store  *stock.Store
	orders *pipeline
	events *push.Hub // nil when events.disabled
	sale   *sale.Service
	// sweeper releases unpaid orders past their pay deadline; started by
	// New once the Server holds the parts (its OnReleased clears the edge).
	sweeper *deadline.Sweeper
}

// assemble builds the parts of an edge for doc, compiles the first
// snapshot on its Redis store and warms its sales. On error everything it
// started is stopped again.
func (s *Server) assemble(doc *conf.Document) (*parts, *Snapshot, error) {
	cfg := doc.Config
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := openStock(ctx, cfg, s.log, true, s.opts.TestRedisDial)
	if err != nil {
		return nil, nil, err
	}
	s.env.Stock = store
	s.env.Rooms = routeroom.NewRegistry(store, s.log, s.opts.Now)
	s.env.Rooms.RegisterMetrics(&s.m.reg)
	filters.RegisterRedisMetrics(&s.m.reg, store)
	snap, err := Compile(doc, s.env, s.version.Add(1))
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	ids, err := orderid.NewGenerator(cfg.NodeID, func() int64 { return s.opts.Now() / 1e6 })
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	p, err := openPipeline(cfg, store, s.productIDs, storedPublisher(store, s.log), s.log)
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("orders pipeline: %w", err)
	}
	var events *push.Hub
	if !cfg.Events.Disabled {
		ec := push.Config{EventsConfig: cfg.Events, KeepHijackedConns: true, Render: sale.AppendResult, Log: s.log, Now: s.opts.Now}
		if events, err = push.New(store, ec); err != nil {
			p.close()
			store.Close()
			return nil, nil, err
		}
		events.Start(ctx)
	}
	breakers := sale.NewBreakers(cfg.Sale.BreakerFailures, cfg.Sale.BreakerOpenFor, nil, func(product string, from, to sale.BreakerState) {
		s.log.Warn("redis circuit breaker changed state", "product", product, "from", from.String(), "to", to.String())
	})
	deps := sale.Deps{
		Store: store, Sales: s.env.Sales, IDs: ids, Bought: s.env.Bought,
		Log: s.log, Node: cfg.NodeID, Now: s.opts.Now, Breakers: breakers, Events: events,
		Orders: sink{p.pub}, Flights: p.pub.Flights(), InFlight: p.pub.InFlightBound(),
		RefreshInterval: cfg.Sale.RefreshInterval,
	}
	if store.Embedded() {
		// Its only edge died with it: nothing of a deduction from before a
		// loss can still be in flight.
		deps.InFlight = 0
	}
	if p.store != nil {
		deps.Ledger, deps.Results, deps.Catalog = p.ledger(cfg), p.store, p.store
	}
	// The sale settles orders (pay, cancel, expiry) and publishes them.
	deps.Settlements = p.pub
	svc := sale.New(deps)
	if err := svc.Apply(ctx, snap.Sale); err != nil {
		s.log.Warn("sale warm-up incomplete; the refresh loop retries", "err", err)
	}
	svc.Start()
	if _, random, _ := cfg.Auth.SessionSecrets(); random {
		s.log.Warn("auth.secrets is not set: sessions use a random per-process secret (they end on restart and are not valid on other edges)")
	}
	if _, random, _ := cfg.Sale.TokenSecretBytes(); random {
		s.log.Warn("sale.token_secret is not set: purchase tokens use a random per-process secret (not valid on other edges)")
	}
	// Every edge sweeps the pay deadlines (any may fire one; the script
	// releases each order once); the sale forgets what it knew of a
	// product whose units the sweep put back (the sweep broadcast already).
	sweeper, err := deadline.New(deadline.Config{
		Store: store, Publisher: p.pub, Products: s.productIDs, Log: s.log,
		OnReleased: svc.Swept,
	})
	if err != nil {
		svc.Stop()
		if events != nil {
			events.Close()
		}
		p.close()
		store.Close()
		return nil, nil, err
	}
	s.realServers = cfg.RealServers()
	s.warnDemoLogin(cfg, "start")
	return &parts{store: store, orders: p, events: events, sale: svc, sweeper: sweeper}, snap, nil
}

// warnDemoLogin says, at start and on every reload, that demo login is on:
// an operator must not miss that anyone can sign in as anyone.
func (s *Server) warnDemoLogin(cfg *conf.Config, trigger string) {
	if !cfg.Auth.DemoLogin {
		return
	}
	if len(s.realServers) > 0 {
		s.log.Error("DEMO LOGIN IS ON over real servers (auth.demo_login_force): POST /api/login signs anyone in as any user id they name; never let shoppers reach this edge", "trigger", trigger, "real_servers", strings.Join(s.realServers, ","))
		return
	}
	s.log.Warn("DEMO LOGIN IS ON: POST /api/login signs anyone in as any user id they name (the embedded demo); set auth.demo_login: false before shoppers reach this edge", "trigger", trigger)
}

// checkReloadDemoLogin is the reload's half of conf's check. Redis, Kafka
// and ClickHouse change on restart only, so a reloaded file that shows the
// embedded stand-ins must not turn demo login on over the real servers this
// process runs on.
func (s *Server) checkReloadDemoLogin(doc *conf.Document) error {
	a := doc.Config.Auth
	if !a.DemoLogin || a.DemoLoginForce || len(s.realServers) == 0 {
		return nil
	}
	errs := field.Errors{{
		Path: "auth.demo_login", Line: field.Line(doc.Root, "auth.demo_login"),
		Msg: "signs anyone in as any user; it is refused on an edge running on real servers (" + strings.Join(s.realServers, ", ") +
			"; they change on restart only): set auth.demo_login: false, or auth.demo_login_force: true on a test rig",
	}}
	return fmt.Errorf("%s: %w", doc.Source, errs)
}

// openStock connects to Redis, or, for an edge (embeddedOK) whose
// redis.addr is empty, starts the embedded stand-in under data_dir. dial
// is the test-only dial map (Options.TestRedisDial; nil in production).
func openStock(ctx context.Context, cfg *conf.Config, log *slog.Logger, embeddedOK bool, dial map[string]string) (*stock.Store, error) {
	rc := cfg.Redis
	if rc.Embedded() && !embeddedOK {
		return nil, errors.New("redis.addr is empty: the embedded Redis exists only inside an edge")
	}
	var err error
	// env resolves an "env:NAME" setting; the first failure is kept.
	env := func(path, v string) string {
		r, rerr := field.ResolveEnv(v)
		if rerr != nil && err == nil {
			err = fmt.Errorf("redis.%s: %w", path, rerr)
		}
		return r
	}
	username, password := env("username", rc.Username), env("password", rc.Password)
	sentinel := stock.SentinelOptions{MasterSet: rc.Sentinel.MasterSet, Addrs: rc.Sentinel.Addrs,
		Username: env("sentinel.username", rc.Sentinel.Username), Password: env("sentinel.password", rc.Sentinel.Password)}
	if err != nil {
		return nil, err
	}
	tlsConf, tlsErrs := rc.TLS.Config()
	if err := tlsErrs.Err(); err != nil {
		return nil, fmt.Errorf("redis.tls: %w", err)
	}
	dataDir := ""
	if rc.Embedded() {
		if cfg.DataDir != "" {
			dataDir = filepath.Join(cfg.DataDir, "redis")
		}
		log.Warn("redis.addr is empty: using the embedded in-process Redis stand-in (demo only, ~15x slower than redis-server)", "data_dir", dataDir)
	}
	store, err := stock.Open(ctx, rc.Addr, stock.Options{
		Timeout:       rc.Timeout,
		QueueTimeout:  rc.QueueTimeout,
		MaxBatch:      rc.MaxBatch,
		MaxFlushDelay: rc.MaxFlushDelay,
		OrderTTL:      cfg.Sale.OrderTTL,
		OrderHashes:   cfg.Sale.OrderHashes,
		BuyerKeys:     cfg.Sale.BuyerKeys,
		OrderKeys:     cfg.Sale.OrderKeys,
		DataDir:       dataDir,
		Username:      username,
		Password:      password,
		Sentinel:      sentinel,
		TLS:           tlsConf,
		WaitReplicas:  rc.WaitReplicas,
		WaitTimeout:   rc.WaitTimeout,
		TestDialMap:   dial,
	})
	if err != nil {
		// Not rc.Addr: a URL may hold the password. The error names the
		// addresses.
		return nil, fmt.Errorf("redis: %w", err)
	}
	if store.Embedded() {
		// Where redis-cli can inspect the demo's keys.
		log.Info("embedded Redis listening", "addr", store.Addr())
	}
	uctx, cancel := context.WithTimeout(ctx, max(rc.Timeout, time.Second))
	for _, err := range store.Unreachable(uctx) {
		log.Warn("redis: a node does not answer at start; the products whose slots it serves stay closed until it or its replica does", "err", err)
	}
	cancel()
	if n := store.LostOnOpen(); n > 0 {
		log.Warn("the embedded Redis did not stop cleanly last time: its sales are rebuilt from the order ledger before they reopen", "sales", n)
	}
	return store, nil
}

// OpenOrderStore opens the configured order store: ClickHouse, or the
// embedded file store under dir. live lists the sales this process knows:
// ClickHouse's retention runs only where it is given (an edge), and keeps
// their orders whatever their age.
func OpenOrderStore(ctx context.Context, cfg *conf.Config, dir string, live func() []string) (orderstore.Store, error) {
	ch := cfg.ClickHouse
	if ch.Addr == "" {
		f, err := orderstore.OpenFile(dir)
		if err != nil {
			return nil, err // not a nil *File in the interface: a caller's close would call it
		}
		return f, nil
	}
	opts, err := orderstore.OptionsFrom(ch)
	if err != nil {
		return nil, err
	}
	if live == nil {
		opts.RetentionMonths = 0
	} else {
		opts.Live = func(context.Context) ([]string, error) { return live(), nil }
	}
	s, err := orderstore.OpenClickHouse(ctx, ch.Addr, ch.Database, opts)
	if err != nil {
		// Not a nil *ClickHouse in the interface: openPipeline's close
		// called its Close and the edge panicked when it started while
		// ClickHouse was down (bench nemesis seed 108).
		return nil, err
	}
	return s, nil
}

// sink adapts the publisher to the sale's OrderSink.
type sink struct{ p *broker.Publisher }

func (k sink) PublishAndAck(ctx context.Context, o *order.Order, outboxID string) error {
	return k.p.PublishAndAck(ctx, broker.OrderEvent(o), outboxID)
}

// openPipeline starts the orders side of an edge: the broker (or the
// embedded one), the publisher, the outbox relay over products, and the
// consumer with its order store when orders.consumer is set — else the
// order store alone when one is configured, for warm-up and results.
func openPipeline(cfg *conf.Config, st *stock.Store, products func() []string, onStored func(map[string][]int64), log *slog.Logger) (*pipeline, error) {
	p := &pipeline{storeName: "clickhouse"}
	if cfg.ClickHouse.Addr == "" {
		p.storeName = "embedded_store"
	}
	for b := range p.up {
		p.up[b].Store(-1)
	}
	fail := func(err error) (*pipeline, error) {
		p.close()
		return nil, err
	}
	p.brokers = cfg.Kafka.Brokers
	topics := broker.Replicated(broker.Topics(cfg.Kafka.Topic, cfg.Kafka.DLQTopic, cfg.Kafka.Partitions),
		cfg.Kafka.ReplicationFactor, cfg.Kafka.MinInsyncReplicas)
	sec, err := broker.SecurityFrom(cfg.Kafka) // the zero value for the embedded broker (conf refuses tls and sasl there)
	if err != nil {
		return fail(err)
	}
	if len(p.brokers) == 0 {
		dir, err := p.dataPath(cfg, "kafka")
		if err != nil {
			return fail(err)
		}
		log.Warn("kafka.brokers is empty: using the embedded in-process Kafka-protocol broker (demo only)", "data_dir", dir)
		if p.brokers, p.stopBroker, err = broker.StartEmbeddedWith(broker.EmbeddedConfig{DataDir: dir, Topics: topics}); err != nil {
			return fail(err)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := broker.EnsureTopics(ctx, p.brokers, sec, topics...); err != nil {
			return fail(fmt.Errorf("kafka: %w", err))
		}
	}
	p.pub, err = broker.NewPublisher(broker.PublisherConfig{
		Brokers: p.brokers, Security: sec, Topic: cfg.Kafka.Topic, DLQTopic: cfg.Kafka.DLQTopic,
		BatchTimeout: cfg.Kafka.BatchTimeout, Timeout: cfg.Kafka.Timeout,
		Outbox: st, Log: log,
	})
	if err != nil {
		return fail(err)
	}
	p.relay, err = broker.NewRelay(broker.RelayConfig{
		Store: st, Publisher: p.pub, Node: cfg.NodeID,
		Interval: cfg.Orders.RelayInterval, MinAge: cfg.Orders.RelayMinAge,
		Products: products, Log: log,
	})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	switch {
	case cfg.Orders.Consumer:
		dir, err := p.dataPath(cfg, "orders")
		if err != nil {
			return fail(err)
		}
		if cfg.ClickHouse.Addr == "" {
			log.Warn("clickhouse.addr is empty: using the embedded order store (a log file; demo only)", "dir", dir)
		}
		if p.store, err = OpenOrderStore(ctx, cfg, dir, products); err != nil {
			return fail(fmt.Errorf("order store: %w", err))
		}
		if p.consumer, err = consumer.New(consumerConfig(cfg, p.brokers, sec, p.store, st, log, onStored)); err != nil {
			return fail(err)
		}
		cctx, stop := context.WithCancel(context.Background())
		p.stopCons, p.consDone = stop, make(chan struct{})
		go func() {
			defer close(p.consDone)
			if err := p.consumer.Run(cctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("order consumer stopped", "err", err)
			}
		}()
	case cfg.ClickHouse.Addr != "":
		// The consumer runs elsewhere; the edge still reads the store for
		// warm-up after a Redis loss and for expired results.
		if p.store, err = OpenOrderStore(ctx, cfg, "", products); err != nil {
			return fail(fmt.Errorf("order store: %w", err))
		}
	}
	p.relay.Start()
	p.outbox.Store(-1)
	p.lag.Store(-1)
	wctx, stopWatch := context.WithCancel(context.Background())
	p.stopWatch, p.watchDone = stopWatch, make(chan struct{})
	go func() { defer close(p.watchDone); p.watch(wctx, st, products, 2*time.Second) }()
	return p, nil
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

// ledger is what a recovery reads: the store and the topic's uncommitted
// tail (what the consumer group has not stored yet), or, when the tail
// cannot be read, the store once every published event is stored (the
// recovery itself waits until no event can still be in flight, see
// sale.Deps.InFlight). The tail keeps a rebuild independent of the group's
// health: waiting for the drain kept sales closed 8–30 s when consumers
// were killed in the window (bench/README finding 3).
func (p *pipeline) ledger(cfg *conf.Config) orderstore.Ledger {
	return orderstore.Ledger{Store: p.store, Tail: tailReader(cfg, p.brokers), Drain: drainer(cfg, p.brokers)}
}

// tailReader reads a product's events the consumer group has not
// committed (consumer.Tail).
func tailReader(cfg *conf.Config, brokers []string) func(context.Context, string) ([]order.Event, error) {
	topic, group := cfg.Kafka.Topic, cfg.Orders.Group
	sec, secErr := broker.SecurityFrom(cfg.Kafka)
	return func(ctx context.Context, productID string) ([]order.Event, error) {
		if secErr != nil {
			return nil, secErr
		}
		return consumer.Tail(ctx, brokers, sec, topic, group, productID)
	}
}

// consumerConfig is the order consumer as every process runs it.
func consumerConfig(cfg *conf.Config, brokers []string, sec broker.Security, store orderstore.Store, st *stock.Store, log *slog.Logger, onStored func(map[string][]int64)) consumer.Config {
	return consumer.Config{
		Brokers: brokers, Security: sec, Topic: cfg.Kafka.Topic, DLQTopic: cfg.Kafka.DLQTopic,
		ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsyncReplicas: cfg.Kafka.MinInsyncReplicas,
		Group: cfg.Orders.Group, BatchSize: cfg.Orders.BatchSize, BatchTime: cfg.Orders.BatchTime, BatchTimeMax: cfg.Orders.BatchTimeMax,
		Store: store, Stock: st, Log: log, OnStored: onStored,
	}
}

// drainer waits until the consumer group has stored every published event.
func drainer(cfg *conf.Config, brokers []string) func(context.Context) error {
	topic, group := cfg.Kafka.Topic, cfg.Orders.Group
	sec, secErr := broker.SecurityFrom(cfg.Kafka)
	return func(ctx context.Context) error {
		if secErr != nil {
			return secErr
		}
		return consumer.WaitDrained(ctx, brokers, sec, topic, group, 100*time.Millisecond)
	}
}

// storedPublisher tells every edge's event streams of a stored batch; it
// runs on the consumer's goroutine after each batch.
func storedPublisher(st *stock.Store, log *slog.Logger) func(map[string][]int64) {
	return func(products map[string][]int64) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := st.PublishStored(ctx, products); err != nil {
			log.Warn("stored orders not pushed; their streams end at the deadline with the state read then", "err", err)
		}
	}
}

// reconcileOrders runs reconcile once the pipeline drained (at most
// drainFor), for products (nil: every product Redis knows).
func reconcileOrders(ctx context.Context, cfg *conf.Config, brokers []string, st *stock.Store, store orderstore.Store, products []string, drainFor time.Duration) (reconcile.Report, error) {
	return reconcile.Run(ctx, st, store, products, nil,
		reconcile.WithDrain(drainer(cfg, brokers), drainFor), reconcile.WithRetry(10*time.Second, 200*time.Millisecond))
}

// RunOrders is `proxy orders`: the order consumer on its own, against real
// Redis and Kafka, until ctx ends.
func RunOrders(ctx context.Context, cfg *conf.Config, log *slog.Logger) error {
	st, store, err := openLedger(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	defer store.Close()
	sec, err := broker.SecurityFrom(cfg.Kafka)
	if err != nil {
		return err
	}
	c, err := consumer.New(consumerConfig(cfg, cfg.Kafka.Brokers, sec, store, st, log, storedPublisher(st, log)))
	if err != nil {
		return err
	}
	log.Info("order consumer started", "topic", cfg.Kafka.Topic, "group", cfg.Orders.Group)
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("order consumer stopped", "stored", c.Stats().Stored)
	return nil
}

// RunReconcile is `proxy reconcile` against real Redis, Kafka and
// ClickHouse: every product Redis knows, after the consumer group drained.
func RunReconcile(ctx context.Context, cfg *conf.Config, log *slog.Logger) (reconcile.Report, error) {
	st, store, err := openLedger(ctx, cfg, log)
	if err != nil {
		return reconcile.Report{}, err
	}
	defer st.Close()
	defer store.Close()
	return reconcileOrders(ctx, cfg, cfg.Kafka.Brokers, st, store, nil, 60*time.Second)
}

// openLedger opens the two halves of the ledger a subcommand works on: the
// Redis side and the order store.
func openLedger(ctx context.Context, cfg *conf.Config, log *slog.Logger) (*stock.Store, orderstore.Store, error) {
	st, err := openStock(ctx, cfg, log, false, nil)
	if err != nil {
		return nil, nil, err
	}
	store, err := OpenOrderStore(ctx, cfg, "", nil)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("order store: %w", err)
	}
	return st, store, nil
}

// productIDs lists the sales this edge knows, for the relay.
func (s *Server) productIDs() []string {
	list := s.env.Sales.List()
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.ProductID
	}
	return out
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}
