package orderstore

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"flashgate/conf"
	"flashgate/conf/field"
)

// ClickHouseOptions tune OpenClickHouse. The zero value is usable.
type ClickHouseOptions struct {
	Username, Password string // default user "default", no password
	// DialTimeout bounds a connection attempt (default 2s): while
	// ClickHouse is down, each retry of the consumer fails this fast.
	DialTimeout time.Duration
	// Timeout bounds each call (default 30s).
	Timeout time.Duration
	// MaxOpenConns caps the pool (default 4).
	MaxOpenConns int
	// TLS, if set, is how every connection is made (the servers' secure
	// native port, tcp_port_secure).
	TLS *tls.Config
	// Cluster is the name of a cluster in the servers' remote_servers:
	// the tables are created ON CLUSTER, each a ReplicatedReplacingMergeTree
	// named *_local on every member and a Distributed table over them,
	// sharded by a hash of user_id (product_id for the catalogue). ""
	// keeps one table per server, the single-node layout.
	Cluster string
	// ZooKeeperPath and Replica are the replicated tables' ZooKeeper path
	// and replica name (defaults DefaultZooKeeperPath, DefaultReplica).
	ZooKeeperPath, Replica string
	// RetentionMonths, if positive, drops month partitions of the ledger
	// older than that many whole months (see DropExpired), RetentionFirst
	// after the open (default 1m: the caller's sales are known by then)
	// and every RetentionEvery (default 1h) after that.
	RetentionMonths int
	RetentionFirst  time.Duration
	RetentionEvery  time.Duration
	// Live, if set, lists products whose orders retention must keep
	// whatever their age (the sales still known).
	Live func(ctx context.Context) ([]string, error)
	// Log gets retention's drops and failures (nil: slog.Default()).
	Log *slog.Logger
	// Now is the clock retention counts months by (tests); time.Now if nil.
	Now func() time.Time
}

// OptionsFrom is the options the `clickhouse:` section asks for: the
// password resolved (env:NAME), the TLS files loaded, the cluster, its
// paths and the retention.
func OptionsFrom(c conf.ClickHouseConfig) (ClickHouseOptions, error) {
	pw, err := field.ResolveEnv(c.Password)
	if err != nil {
		return ClickHouseOptions{}, fmt.Errorf("clickhouse.password: %w", err)
	}
	tlsCfg, errs := c.TLS.Config()
	if len(errs) > 0 {
		return ClickHouseOptions{}, fmt.Errorf("clickhouse.tls: %w", errs)
	}
	return ClickHouseOptions{Username: c.Username, Password: pw, TLS: tlsCfg, Cluster: c.Cluster,
		ZooKeeperPath: c.ZooKeeperPath, Replica: c.Replica, RetentionMonths: c.RetentionMonths}, nil
}

// ClickHouse is the Store on a ClickHouse server (native protocol), or on
// a cluster of them.
type ClickHouse struct {
	conn     driver.Conn
	db       string
	timeout  time.Duration
	table    string // `db`.seckill_order
	catTable string // `db`.seckill_catalog
	lay      layout
	members  []member // the cluster's servers (nil alone)
	opts     ClickHouseOptions
	// replicated: some shard has several replicas, so a read may reach one
	// that lags behind an insert (SyncReplicas).
	replicated bool

	replicaMu    sync.Mutex
	replicaConns map[string]driver.Conn // by member address, dialled on first SyncReplicas

	stopRetention func()
	retentionDone chan struct{}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// zkPathRE bounds the ZooKeeper path to what needs no quoting.
var zkPathRE = regexp.MustCompile(`^/[A-Za-z0-9_{}./-]{1,255}$`)

// OpenClickHouse connects to addr (host:port of the native protocol,
// several comma-separated for failover), creates the database and the
// tables (the ledger's and the catalogue's) if missing, and checks that an
// existing table has the expected schema: a mismatch is a *SchemaError
// naming every wrong column.
//
// With opts.Cluster every member of the cluster must answer: the tables
// are created ON CLUSTER and checked on each member, so an unknown cluster
// name or an unreachable member is refused naming it.
func OpenClickHouse(ctx context.Context, addr, database string, opts ClickHouseOptions) (*ClickHouse, error) {
	if database == "" {
		database = "default"
	}
	if !identRE.MatchString(database) {
		return nil, fmt.Errorf("orderstore: database name %q: letters, digits and _ only", database)
	}
	if opts.Cluster != "" && !identRE.MatchString(opts.Cluster) {
		return nil, fmt.Errorf("orderstore: cluster name %q: letters, digits and _ only", opts.Cluster)
	}
	if opts.ZooKeeperPath == "" {
		opts.ZooKeeperPath = DefaultZooKeeperPath
	}
	if opts.Replica == "" {
		opts.Replica = DefaultReplica
	}
	if !zkPathRE.MatchString(opts.ZooKeeperPath) || !zkPathRE.MatchString("/"+opts.Replica) {
		return nil, fmt.Errorf("orderstore: zookeeper path %q / replica %q: letters, digits, _ - . / and {macros} only", opts.ZooKeeperPath, opts.Replica)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 2 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.MaxOpenConns <= 0 {
		opts.MaxOpenConns = 4
	}
	if opts.Username == "" {
		opts.Username = "default"
	}
	if opts.RetentionEvery <= 0 {
		opts.RetentionEvery = time.Hour
	}
	if opts.RetentionFirst <= 0 {
		opts.RetentionFirst = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol: clickhouse.Native, // the HTTP protocol does not work with 18.16
		Addr:     strings.Split(addr, ","),
		// The database is created below: connect to one that exists.
		Auth:         clickhouse.Auth{Database: "default", Username: opts.Username, Password: opts.Password},
		TLS:          opts.TLS,
		DialTimeout:  opts.DialTimeout,
		ReadTimeout:  opts.Timeout,
		MaxOpenConns: opts.MaxOpenConns,
		MaxIdleConns: opts.MaxOpenConns,
	})
	if err != nil {
		return nil, fmt.Errorf("orderstore: clickhouse %s: %w", addr, err)
	}
	s := &ClickHouse{conn: conn, db: database, timeout: opts.Timeout, opts: opts,
		table: "`" + database + "`." + Table, catTable: "`" + database + "`." + CatalogTable,
		lay: layout{db: database, cluster: opts.Cluster, zkPath: opts.ZooKeeperPath, replica: opts.Replica,
			legacyOK: opts.RetentionMonths <= 0}}
	if err := s.setup(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("orderstore: clickhouse %s: %w", addr, err)
	}
	if opts.RetentionMonths > 0 {
		s.startRetention()
	}
	return s, nil
}

// oneLine is a server's error on one line, its repeated lines once (a
// failed remote() lists every connection try).
func oneLine(err error) string {
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return strings.Join(out, " ")
}

// isNoRows reports a QueryRow that found nothing.
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// Ping checks that ClickHouse answers.
func (s *ClickHouse) Ping(ctx context.Context) error { return s.conn.Ping(ctx) }

// Close stops retention and closes the connection pools.
func (s *ClickHouse) Close() error {
	if s.stopRetention != nil {
		s.stopRetention()
		<-s.retentionDone
		s.stopRetention = nil
	}
	s.replicaMu.Lock()
	for _, c := range s.replicaConns {
		c.Close()
	}
	s.replicaConns = nil
	s.replicaMu.Unlock()
	return s.conn.Close()
}

var _ Store = (*ClickHouse)(nil)
