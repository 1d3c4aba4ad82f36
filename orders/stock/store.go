package stock

import (
	"context"
	"crypto/tls"
	"errors"
	"flashgate/conf"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// Options tune a Store. Timeout, QueueTimeout, MaxBatch, WaitTimeout and
// OrderTTL are edge.yaml settings (redis.*, sale.order_ttl): left zero,
// they take conf's defaults, as a config file that leaves them out does.
// The others have defaults of their own.
type Options struct {
	// Timeout is the budget of every Redis call. A slow or dead Redis
	// yields an error within it: the script call that carries an attempt
	// gets a full Timeout from when it is sent.
	Timeout time.Duration
	// QueueTimeout is how long an attempt may wait in its product's
	// group-commit queue before it is dropped unsent (ErrNotSent). So an
	// attempt is answered within QueueTimeout + Timeout.
	// The queue is short while Redis answers and the edge has CPU to
	// spare; under a burst that saturates the edge it is the edge's run
	// queue, not Redis, that makes attempts wait, and dropping them then
	// answers 503 while stock is left and saves nothing (the attempt has
	// already cost its request; sending it costs Redis a few µs). During a
	// Redis stall the queue waits at most for the call in flight.
	QueueTimeout time.Duration
	// MaxFlushDelay is rueidis' auto-pipelining flush delay (0: none).
	// ~100µs batched 10-20% more commands per write in early measurements;
	// with group commit there are fewer commands to batch: measure.
	MaxFlushDelay time.Duration
	// MaxBatch caps the attempts one deduction script call carries
	// (default conf.DefaultMaxBatch, at most conf.MaxBatchLimit): a bigger
	// script blocks Redis longer for everyone.
	MaxBatch int
	// OrderTTL is how long orders live.
	OrderTTL time.Duration
	// OrderHashes makes every new order a hash, the layout of the versions
	// before the string one (docs/ledger.md). Set it while a fleet is upgraded
	// from such a version: its edges (their result calls, consumers' marks
	// and settlements) cannot read a string order, while this version reads
	// both either way. Unset once every edge runs this version.
	OrderHashes bool
	// BuyerKeys warms new sales in the per-key layout of buyer counts and
	// used tokens (sk:{p}:u:, sk:{p}:t:; docs/ledger.md), the only one older
	// versions know, instead of the per-product hashes. Set it while edges
	// of such a version serve the same Redis: they would neither see nor
	// keep the counts and marks of a hash sale. A sale keeps the layout it
	// was warmed with for life, so sales warmed meanwhile stay per-key
	// after it is unset; this version serves both.
	BuyerKeys bool
	// OrderKeys warms new sales in the per-order ledger: one key per order
	// (sk:{p}:o:) and one outbox entry per order, the only one older
	// versions know, instead of ledger "b" (order bucket hashes, one
	// outbox entry per deduction call; docs/ledger.md). Set it while edges
	// of such a version serve the same Redis: they can neither read a "b"
	// sale's orders and outbox entries nor rebuild it. A sale keeps the
	// ledger it was warmed with for life; this version serves both.
	// OrderHashes and BuyerKeys imply it (their versions know no other
	// ledger).
	OrderKeys bool
	// BuyerGrace is how long a buyer's count outlives the sale's end
	// (default 7 days), so that nobody can buy again after it expired.
	BuyerGrace time.Duration
	// DataDir, for the embedded server only, is where its state is saved
	// on Close and every SaveEvery, and loaded on Open (see Open). Ignored
	// for a real Redis.
	DataDir string
	// SaveEvery is how often the embedded server saves its state to
	// DataDir while open (default 1s; negative: only on Close). It bounds
	// what a crash forgets of the admin catalog, restocks, order states and
	// outbox entries; stock and buyers' counts are rebuilt from the ledger
	// after a crash whatever it is (see Open).
	SaveEvery time.Duration
	// WaitReplicas > 0 sends WAIT WaitReplicas WaitTimeout after every
	// deduction script call, on the same connection, before any of its
	// attempts is answered: the batch's writes are then on that many
	// replicas unless the WAIT timed out (counted in WaitStats). It narrows
	// the writes a failover can forget; it is not a guarantee (Redis may
	// still promote a replica that did not acknowledge), so the fence stays
	// what keeps the sale exact (see fence.go). Real Redis only.
	WaitReplicas int
	WaitTimeout  time.Duration
	// TestDialMap is for fault tests only (cmd/proxy -test-redis-dial):
	// a dial to a key's address goes to its value instead. A cluster
	// client dials the addresses the cluster announces, so a proxy put
	// between one edge and Redis must be reached this way. Not with a
	// unix:// URL.
	TestDialMap map[string]string
	// Username and Password authenticate to a real Redis (Username "": the
	// default user). Credentials in a redis:// URL take their place; giving
	// them in both is an error.
	Username, Password string
	// Sentinel, with MasterSet set, finds the master through Redis
	// Sentinel (see SentinelOptions).
	Sentinel SentinelOptions
	// TLS, if set, dials Redis, the cluster's nodes and the sentinels over
	// TLS with this configuration (a private CA, a client certificate). A
	// rediss:// URL without it verifies against the system's roots.
	TLS *tls.Config
}

// SentinelOptions find the master through Redis Sentinel. Open's addr is
// then "" and Addrs lists sentinels; a redis:// URL with ?master_set=NAME
// does the same with the URL's hosts as the sentinels.
type SentinelOptions struct {
	MasterSet string
	Addrs     []string
	// Username and Password authenticate to the sentinels; Options'
	// authenticate to the master.
	Username, Password string
}

// sentinelRefresh is how often the client asks the sentinels where the
// master is, besides following their +switch-master events. Without it one
// missed event binds the edge to a demoted master (every write READONLY)
// until it restarts; with it for at most this long. The cost is one round
// trip to a sentinel per edge per period.
const sentinelRefresh = 2 * time.Second

// check fills the zero edge.yaml settings (redis.*, sale.order_ttl) from
// conf's defaults, refuses one that is set but invalid, and fills the
// settings that are not edge.yaml's.
func (o *Options) check() error {
	r := conf.RedisConfig{Timeout: o.Timeout, QueueTimeout: o.QueueTimeout, MaxBatch: o.MaxBatch, WaitTimeout: o.WaitTimeout}.WithDefaults()
	o.Timeout, o.QueueTimeout, o.MaxBatch, o.WaitTimeout = r.Timeout, r.QueueTimeout, r.MaxBatch, r.WaitTimeout
	o.OrderTTL = conf.SaleConfig{OrderTTL: o.OrderTTL}.WithDefaults().OrderTTL
	if o.Timeout < 0 || o.QueueTimeout < 0 || o.OrderTTL < 0 {
		return fmt.Errorf("stock: Timeout, QueueTimeout and OrderTTL must not be negative (redis.timeout, redis.queue_timeout, sale.order_ttl), got %v, %v and %v",
			o.Timeout, o.QueueTimeout, o.OrderTTL)
	}
	if o.MaxBatch < 0 || o.MaxBatch > conf.MaxBatchLimit {
		return fmt.Errorf("stock: MaxBatch (redis.max_batch) must be between 1 and %d, got %d", conf.MaxBatchLimit, o.MaxBatch)
	}
	if o.BuyerGrace <= 0 {
		o.BuyerGrace = 7 * 24 * time.Hour
	}
	if o.SaveEvery == 0 {
		o.SaveEvery = time.Second
	}
	if o.WaitReplicas < 0 {
		return fmt.Errorf("stock: WaitReplicas %d is negative", o.WaitReplicas)
	}
	if o.WaitTimeout < 0 { // a zero took conf's default: WAIT with 0 would block forever
		return fmt.Errorf("stock: WaitTimeout (redis.wait_timeout) must not be negative, got %v", o.WaitTimeout)
	}
	return nil
}

// Errors. An error from Deduct that wraps ErrUnknown means the script may
// or may not have run: see Deduct.
var (
	ErrClosed    = errors.New("stock: store closed")
	ErrUnknown   = errors.New("stock: outcome unknown")
	ErrNotSent   = errors.New("stock: budget spent before the attempt was sent")
	ErrNotWarmed = errors.New("stock: sale not warmed")
	// ErrUnknownOrder and ErrRecovering: see settle.go.
)

// Store is the Redis side of the sale. It is safe for concurrent use.
type Store struct {
	c    rueidis.Client
	addr string
	opts Options

	mini    *miniredis.Miniredis // embedded mode only
	janitor chan struct{}        // closed to stop the embedded TTL clock and saver
	jdone   chan struct{}
	lost    int // stock keys dropped from an unclean snapshot at Open
	saveErr atomic.Pointer[error]

	// Pre-formatted shared script arguments.
	graceMs, orderTTLMs string
	layoutArg           string // "h" or "s": Options.OrderHashes, for the scripts that make orders
	buyersArg           string // "2" or "": the buyer layout of a sale warmed now (Options.BuyerKeys)
	ledgerArg           string // "b" or "": the ledger of a sale warmed now (Options.OrderKeys)

	products atomic.Pointer[map[string]*product]
	pmu      sync.Mutex

	// The broadcast subscriptions, one fanout per kind (pubsub.go).
	soldOutSubs, changesSubs, routeRoomSubs fanout

	shares shares // batch entries' acknowledged orders (AckOutbox)

	nCalls, nAttempts   atomic.Uint64
	nWaits, nWaitsShort atomic.Uint64
	rate                rateCalls

	// Redis' clock as the settle script last answered it (settle.go).
	clockOffsetMs atomic.Int64
	clockKnown    atomic.Bool

	closed atomic.Bool
}

// Open connects to Redis.
//
// addr "" or "embedded" starts github.com/alicebob/miniredis in this
// process: the zero-setup demo. It runs the same Lua but is ~15x slower than
// redis-server, has no persistence of its own, and only counts TTLs down
// while the Store is open. With Options.DataDir set, its sk:* keys (strings,
// hashes, sorted sets, streams, with their TTLs) are written to DataDir/stock.json
// (atomically: temp file, fsync, rename) on Close and every
// Options.SaveEvery, and loaded on Open.
//
// Only the save on Close is a clean snapshot. After a crash (kill -9, power
// loss) the file is an older, periodic one: its stock keys would hold more
// than is left and its buyers' counts less than was bought, so Open drops
// them — the sale then looks exactly like one a real Redis lost, and stays
// closed until warm-up rebuilt it from the ledger (sale.Ledger). The rest
// is kept: meta, admin catalog, order hashes, outbox entries, used tokens.
// The file is marked "not clean" again before Open returns. Correctness
// never depends on how recent the periodic save is; it only bounds what a
// crash forgets of the catalog, restocks, order states and outbox entries.
// Never use it for production or benchmarks.
//
// Otherwise addr is host:port, a comma-separated list of cluster seeds, or a
// redis://, rediss:// or unix:// URL (parameters: addr for more hosts, db,
// master_set for Sentinel); or "" with Options.Sentinel. rueidis
// auto-pipelines and follows the cluster topology, or the sentinels'
// choice of master. Errors never quote a password or the URL.
func Open(ctx context.Context, addr string, opts Options) (*Store, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	s := &Store{
		opts:       opts,
		graceMs:    strconv.FormatInt(opts.BuyerGrace.Milliseconds(), 10),
		orderTTLMs: strconv.FormatInt(opts.OrderTTL.Milliseconds(), 10),
		layoutArg:  layoutArg(opts.OrderHashes),
		buyersArg:  buyersArg(opts.BuyerKeys),
		ledgerArg:  ledgerArg(opts.OrderKeys || opts.OrderHashes || opts.BuyerKeys),
	}
	empty := map[string]*product{}
	s.products.Store(&empty)

	co := rueidis.ClientOption{
		MaxFlushDelay: opts.MaxFlushDelay,
		// Nothing here uses client-side caching; without it rueidis skips
		// the CLIENT TRACKING handshake.
		DisableCache: true,
		// A command alone on its connection would otherwise run in
		// rueidis' "sync mode", which puts the context's deadline on the
		// connection itself (redis/rueidis#7): one timed-out deduction
		// then breaks the connection and fails every call sent on it
		// behind it (other products' calls, outbox acks). Pipelined, a
		// timed-out call only stops waiting. Measured: the same
		// throughput in BenchmarkDeductBurst; in the normal scenario
		// (1.25 attempts per call) do p50 1.33-1.50 ms against 2.61-3.34
		// ms and 12% less edge CPU (2 alternating runs, a noisy machine).
		AlwaysPipelining: true,
		Username:         opts.Username,
		Password:         opts.Password,
		// A dial that takes longer than the budget would hold every caller
		// past it while rueidis reconnects.
		Dialer: net.Dialer{Timeout: max(opts.Timeout, 100*time.Millisecond), KeepAlive: 30 * time.Second},
	}
	switch {
	case (addr == "" || addr == "embedded") && opts.Sentinel.MasterSet == "":
		if sen := opts.Sentinel; opts.TLS != nil || len(sen.Addrs) > 0 || sen.Username != "" || sen.Password != "" {
			return nil, errors.New("stock: the embedded server has no TLS and no sentinels")
		}
		m := miniredis.NewMiniRedis()
		if opts.DataDir != "" {
			lost, err := loadSnapshot(m, opts.DataDir)
			if err != nil {
				return nil, err
			}
			s.lost = lost
			// From now on the stock keys move: a crash before the next
			// save must not find a file that still says "clean".
			if err := saveSnapshot(m, opts.DataDir, false); err != nil {
				return nil, err
			}
		}
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("stock: embedded redis: %w", err)
		}
		s.mini = m
		co.InitAddress = []string{m.Addr()}
		// RESP3 plus a subscription poisons the shared connection with
		// miniredis (seen with rueidis here); it is also not a cluster.
		co.AlwaysRESP2 = true
		co.ForceSingleClient = true
	default:
		if err := target(addr, opts, &co); err != nil {
			return nil, err
		}
	}
	s.addr = strings.Join(co.InitAddress, ",")
	c, err := rueidis.NewClient(co)
	if err != nil {
		s.stopEmbedded()
		return nil, fmt.Errorf("stock: connect %s: %w", s.describe(co), err)
	}
	s.c = c
	pctx, cancel := context.WithTimeout(ctx, max(opts.Timeout, time.Second))
	defer cancel()
	if err := ping(pctx, c); err != nil {
		c.Close()
		s.stopEmbedded()
		return nil, fmt.Errorf("stock: ping %s: %w", s.describe(co), err)
	}
	if s.mini != nil {
		s.startJanitor()
	}
	return s, nil
}

// ping checks that Redis answers. On a cluster a keyless PING goes to a
// random node, which after a failover may be the dead master a seed list
// still names: any node of the topology answering will do, as every
// command with a key is routed to its slot's master anyway.
func ping(ctx context.Context, c rueidis.Client) error {
	if c.Mode() != rueidis.ClientModeCluster {
		return c.Do(ctx, c.B().Ping().Build()).Error()
	}
	var errs []error
	for addr, n := range c.Nodes() {
		err := n.Do(ctx, n.B().Ping().Build()).Error()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	if len(errs) == 0 {
		return errors.New("no cluster node known")
	}
	return errors.Join(errs...)
}

// Unreachable pings every node of a cluster — the seeds redis.addr names
// and every node the topology lists — and returns one error per node that
// does not answer, naming it. Open needs only one node to answer, so that an
// edge restarted while a master is down still serves the other masters'
// products; this is how it can say at start which node it cannot reach (its
// products stay closed by their breakers until the node or its replica
// answers). Nil on a single server, Sentinel or the embedded stand-in.
func (s *Store) Unreachable(ctx context.Context) []error {
	if s.c.Mode() != rueidis.ClientModeCluster {
		return nil
	}
	nodes := s.c.Nodes()
	errs := make([]error, 0)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, n := range nodes {
		wg.Go(func() {
			if err := n.Do(ctx, n.B().Ping().Build()).Error(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("cluster node %s: %w", addr, err))
				mu.Unlock()
			}
		})
	}
	// A seed the topology does not list (a dead master after its failover,
	// a mistyped address) has no connection in the client: dial it.
	for _, addr := range strings.Split(s.addr, ",") {
		if _, known := nodes[addr]; known || addr == "" {
			continue
		}
		wg.Go(func() {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
				return
			}
			mu.Lock()
			errs = append(errs, fmt.Errorf("redis.addr names %s, which is not in the cluster and does not answer: %w", addr, err))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// target fills co with how to reach a real Redis at addr (see Open).
func target(addr string, opts Options, co *rueidis.ClientOption) error {
	sen := opts.Sentinel
	switch {
	case strings.HasPrefix(addr, "redis://") || strings.HasPrefix(addr, "rediss://") || strings.HasPrefix(addr, "unix://"):
		u, err := rueidis.ParseURL(addr)
		if err != nil {
			// url.Error quotes the whole URL, password included.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return fmt.Errorf("stock: redis URL: %v", err)
		}
		if sen.MasterSet != "" || len(sen.Addrs) > 0 {
			return errors.New("stock: a URL and Options.Sentinel both name servers (redis.addr, redis.sentinel): give one")
		}
		co.InitAddress, co.SelectDB = u.InitAddress, u.SelectDB
		// unix:// dials a socket; nil for the others.
		co.DialCtxFn = u.DialCtxFn
		if u.Username != "" || u.Password != "" {
			if opts.Username != "" || opts.Password != "" {
				return errors.New("stock: credentials both in the URL and in Options (redis.addr, redis.username/password): give them in one place")
			}
			co.Username, co.Password = u.Username, u.Password
		}
		if u.Sentinel.MasterSet != "" {
			if co.DialCtxFn != nil {
				return errors.New("stock: a unix:// URL cannot name sentinels (master_set)")
			}
			sen.MasterSet, sen.Addrs = u.Sentinel.MasterSet, u.InitAddress
		}
		switch {
		case u.TLSConfig != nil && u.TLSConfig.InsecureSkipVerify:
			return errors.New("stock: skip_verify in the URL is not supported: trust a private CA with Options.TLS (redis.tls.ca_file)")
		case u.TLSConfig == nil && opts.TLS != nil:
			return errors.New("stock: Options.TLS with a redis:// or unix:// URL: write rediss:// (redis.addr, redis.tls)")
		case u.TLSConfig != nil && opts.TLS == nil:
			// rueidis puts the first host's name into ServerName, for
			// every node; left empty, each dial checks its own host.
			co.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	case addr != "":
		if sen.MasterSet != "" || len(sen.Addrs) > 0 {
			return errors.New("stock: an address and Options.Sentinel both name servers (redis.addr, redis.sentinel): give one")
		}
		co.InitAddress = strings.Split(addr, ",")
	}
	if opts.TLS != nil {
		co.TLSConfig = opts.TLS.Clone()
	}
	if m := opts.TestDialMap; len(m) > 0 {
		if co.DialCtxFn != nil {
			return errors.New("stock: a test dial map with a unix:// URL")
		}
		co.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
			if to, ok := m[dst]; ok {
				dst = to
			}
			if tc != nil {
				return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
			}
			return d.DialContext(ctx, "tcp", dst)
		}
	}
	switch {
	case sen.MasterSet != "":
		if len(sen.Addrs) == 0 {
			return errors.New("stock: Options.Sentinel.MasterSet without sentinels' addresses (redis.sentinel.addrs)")
		}
		co.InitAddress = sen.Addrs
		co.Sentinel = rueidis.SentinelOption{
			MasterSet: sen.MasterSet,
			Username:  sen.Username, Password: sen.Password,
			// The sentinels sit in the same network as the servers:
			// the same dial budget, and TLS if the servers speak it.
			Dialer: co.Dialer, TLSConfig: co.TLSConfig,
			TopologyRefreshInterval: sentinelRefresh,
		}
	case len(sen.Addrs) > 0 || sen.Username != "" || sen.Password != "":
		return errors.New("stock: Options.Sentinel without a MasterSet (redis.sentinel.master_set)")
	}
	if len(co.InitAddress) == 0 {
		return errors.New("stock: no Redis address")
	}
	return nil
}

// describe names what Open connects to, for errors: the addresses (never
// credentials) and, through Sentinel, the master set.
func (s *Store) describe(co rueidis.ClientOption) string {
	if co.Sentinel.MasterSet != "" {
		return fmt.Sprintf("master %q through sentinels %s", co.Sentinel.MasterSet, s.addr)
	}
	return s.addr
}

// Addr is host:port of the Redis server the Store talks to (a
// comma-separated list for cluster seeds, the sentinels' for Sentinel;
// never credentials). For the embedded server it is its listener on
// 127.0.0.1, where redis-cli can inspect a demo's keys.
func (s *Store) Addr() string { return s.addr }

// Embedded reports whether the Store runs the in-process miniredis.
func (s *Store) Embedded() bool { return s.mini != nil }

// LostOnOpen is the number of sales whose stock key the embedded server
// dropped at Open because its snapshot was not clean (a crash): they stay
// closed until warm-up rebuilt them from the ledger.
func (s *Store) LostOnOpen() int { return s.lost }

// SaveErr is the last periodic save's error (nil after a success).
func (s *Store) SaveErr() error {
	if p := s.saveErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the subscriptions, closes the connection and, for the
// embedded server with a DataDir, saves its state. Attempts still queued or
// in flight fail (with an unknown outcome for those already sent).
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stopSubscription()
	s.c.Close()
	if s.mini == nil {
		return nil
	}
	s.stopJanitor()
	var err error
	if s.opts.DataDir != "" {
		// No client is connected any more: the snapshot is consistent
		// (a stock deduction is never saved without its outbox entry) and
		// clean, so the next Open keeps its stock.
		err = saveSnapshot(s.mini, s.opts.DataDir, true)
	}
	s.mini.Close()
	return err
}

func (s *Store) stopEmbedded() {
	if s.mini != nil {
		s.mini.Close()
	}
}

// startJanitor advances miniredis' clock: it only expires keys when told
// time has passed, and tokens, buyer counts and orders rely on TTLs. With a
// DataDir it also saves the state every SaveEvery.
func (s *Store) startJanitor() {
	s.janitor, s.jdone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.jdone)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		var save <-chan time.Time
		if s.opts.DataDir != "" && s.opts.SaveEvery > 0 {
			st := time.NewTicker(s.opts.SaveEvery)
			defer st.Stop()
			save = st.C
		}
		last := time.Now()
		for {
			select {
			case <-s.janitor:
				return
			case now := <-t.C:
				s.mini.FastForward(now.Sub(last))
				last = now
			case <-save:
				if err := saveSnapshot(s.mini, s.opts.DataDir, false); err != nil {
					s.saveErr.Store(&err)
				} else {
					s.saveErr.Store(nil)
				}
			}
		}
	}()
}

func (s *Store) stopJanitor() {
	if s.janitor != nil {
		close(s.janitor)
		<-s.jdone
	}
}

// call returns a context bounded by the store's budget for one-off calls.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.Timeout)
}
