package orderstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/shopspring/decimal"

	"flashgate/conf"
	"flashgate/conf/field"
)

// Table is the ledger's table, CatalogTable the catalogue's.
const (
	Table        = "seckill_order"
	CatalogTable = "seckill_catalog"
)

// column is one column of the expected schema, with its type spelled the
// way system.columns spells it.
type column struct{ name, typ string }

// tableSpec is a table as OpenClickHouse creates it and expects to find it.
// Changing one needs a migration: OpenClickHouse refuses a table that
// differs.
type tableSpec struct {
	name    string
	cols    []column
	version string // ReplacingMergeTree's version column: reads use FINAL to see one row per key
	orderBy string // the sorting key as system.tables spells it
	// partitionBy is the month partition of the ledger (retention drops
	// whole months); "" for the catalogue, which is never dropped.
	partitionBy string
	// shardBy is the Distributed table's sharding key on a cluster.
	shardBy string
	// added are the columns that came after the table's first release:
	// a table without them is migrated (ALTER TABLE ADD COLUMN, which
	// 18.16 does in metadata only; the old rows read the type's default,
	// 0) rather than refused.
	added []string
}

// orderTable is seckill_order: one row per order, the newest (update_ms)
// wins.
//
// On a cluster it is sharded by a hash of user_id. Every row of one order
// (the order, its redeliveries, its release) carries the same user id, so
// they all land on one shard, where ReplacingMergeTree replaces them: FINAL
// through the Distributed table dedupes per shard, and since no order spans
// two shards that is complete. One user's orders share a shard too, so the
// per-buyer sums (Buyers, MaxUser) add up across shards exactly. order_id
// would spread rows as evenly, but the seed asks for user_id and the buyer
// sums then need no cross-shard merge of one user.
var orderTable = tableSpec{
	name: Table,
	cols: []column{
		{"order_id", "UInt64"},
		{"product_id", "String"},
		{"user_id", "String"},
		{"quantity", "UInt32"},
		{"price", "Decimal(10, 2)"},
		{"status", "UInt8"},
		{"create_time", "DateTime"},
		{"update_ms", "UInt64"},
		{"edge", "UInt16"},
		// Added with pay deadlines; OpenClickHouse adds them to a table
		// created before (added).
		{"pay_time", "DateTime"}, // 0 = not paid
		{"expired", "UInt8"},     // 1: status 2 by the pay deadline
		{"pay_by_ms", "UInt64"},  // 0 = no deadline
	},
	added:       []string{"pay_time", "expired", "pay_by_ms"},
	version:     "update_ms",
	orderBy:     "product_id, order_id",
	partitionBy: "toYYYYMM(create_time)",
	shardBy:     "cityHash64(user_id)",
}

// catalogTable is seckill_catalog: one row per (product, kind, entry),
// the newest version wins (catalog.go). degraded is a UInt8 because 18.16
// has no Bool.
//
// On a cluster it is sharded like the ledger, by a hash of its product:
// every version of a key lands on one shard, so FINAL through the
// Distributed table is exact, and it is as durable as the orders (the
// shard's replicas). Kept on one node it would be a single point of
// failure; copied to every node by one replicated table, a read on a
// replica that lags would miss an admin change.
var catalogTable = tableSpec{
	name: CatalogTable,
	cols: []column{
		{"product_id", "String"},
		{"kind", "UInt8"},
		{"entry_id", "UInt64"},
		{"activity", "String"},
		{"units", "Int64"},
		{"degraded", "UInt8"},
		{"version", "UInt64"},
		{"update_time", "DateTime"},
	},
	version: "version",
	orderBy: "product_id, kind, entry_id",
	shardBy: "cityHash64(product_id)",
}

const (
	colsList    = "order_id, product_id, user_id, quantity, price, status, create_time, update_ms, edge, pay_time, expired, pay_by_ms"
	catColsList = "product_id, kind, entry_id, activity, units, degraded, version, update_time"
)

// LocalSuffix names a cluster's local tables: seckill_order_local holds a
// shard's rows, seckill_order is the Distributed table over them that
// everything reads and writes.
const LocalSuffix = "_local"

// DefaultZooKeeperPath is where a cluster's replicated tables keep their
// replication state: {shard} and {replica} are the servers' macros,
// {database} and {table} are filled in by OpenClickHouse (18.16 does not
// know them), so that two databases on one cluster never share a path.
const (
	DefaultZooKeeperPath = "/clickhouse/tables/{shard}/{database}/{table}"
	DefaultReplica       = "{replica}"
)

// layout is how a table is created: alone, or as a cluster's local
// table and the Distributed one over it.
type layout struct {
	db      string
	cluster string // "" alone
	zkPath  string // with {database} and {table} still in it
	replica string
	// legacyOK accepts a single-node ledger created before tables were
	// partitioned (no partition key): nothing about it is wrong, it only
	// cannot drop old months (retention refuses it).
	legacyOK bool
}

func (l *layout) onCluster() string {
	if l.cluster == "" {
		return ""
	}
	return " ON CLUSTER " + l.cluster
}

func (l *layout) path(t *tableSpec) string {
	p := strings.ReplaceAll(l.zkPath, "{database}", l.db)
	return strings.ReplaceAll(p, "{table}", t.name+LocalSuffix)
}

// engine is the MergeTree engine clause of t's (local) table.
func (l *layout) engine(t *tableSpec) string {
	e := "ReplacingMergeTree(" + t.version + ")"
	if l.cluster != "" {
		e = "ReplicatedReplacingMergeTree('" + l.path(t) + "', '" + l.replica + "', " + t.version + ")"
	}
	if t.partitionBy != "" {
		e += " PARTITION BY " + t.partitionBy
	}
	return e + " ORDER BY (" + t.orderBy + ")"
}

// distributed is the engine of the Distributed table on a cluster.
func (l *layout) distributed(t *tableSpec) string {
	return "Distributed(" + l.cluster + ", " + l.db + ", " + t.name + LocalSuffix + ", " + t.shardBy + ")"
}

// createSQL is the DDL of t: one statement alone, the local table then
// the Distributed one on a cluster.
func (l *layout) createSQL(t *tableSpec) []string {
	var cols strings.Builder
	for i, c := range t.cols {
		if i > 0 {
			cols.WriteString(", ")
		}
		// Decimal(10, 2) is accepted with the space by every version.
		cols.WriteString(c.name + " " + c.typ)
	}
	if l.cluster == "" {
		return []string{"CREATE TABLE IF NOT EXISTS `" + l.db + "`." + t.name + " (" + cols.String() + ") ENGINE = " + l.engine(t)}
	}
	return []string{
		"CREATE TABLE IF NOT EXISTS `" + l.db + "`." + t.name + LocalSuffix + l.onCluster() + " (" + cols.String() + ") ENGINE = " + l.engine(t),
		"CREATE TABLE IF NOT EXISTS `" + l.db + "`." + t.name + l.onCluster() + " (" + cols.String() + ") ENGINE = " + l.distributed(t),
	}
}

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

// SchemaError is a table (seckill_order, seckill_catalog, or a cluster's
// *_local tables) that exists with another schema or layout.
// Problems names each missing or mistyped column, a wrong engine, key,
// partition or sharding, and the member it was found on.
type SchemaError struct {
	Table    string
	Problems []string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("table %s has the wrong schema (%d problem(s)): %s; migrate or drop it",
		e.Table, len(e.Problems), strings.Join(e.Problems, "; "))
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

// member is one server of the cluster as system.clusters names it.
type member struct {
	shard, replica uint32
	addr           string // host:port of its native protocol
}

func (m member) String() string {
	return fmt.Sprintf("%s (shard %d, replica %d)", m.addr, m.shard, m.replica)
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

func (s *ClickHouse) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// A refused handshake (TLS, credentials) is named as such, not as the
	// first statement that failed.
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if s.lay.cluster != "" {
		if err := s.findMembers(ctx); err != nil {
			return err
		}
		// Every edge opens the store at every start: an ON CLUSTER
		// statement goes through ZooKeeper's DDL queue to every member,
		// so it is sent only when a table or a column is missing somewhere.
		fix := false
		for _, t := range []*tableSpec{&orderTable, &catalogTable} {
			err := s.checkSchema(ctx, t)
			var se *SchemaError
			switch {
			case err == nil:
			case errors.As(err, &se) && onlyMissing(t, se):
				fix = true
			default:
				return err
			}
		}
		if !fix {
			return nil
		}
		ctx = ddlCtx(ctx, s.timeout)
	}
	if err := s.conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+s.db+"`"+s.lay.onCluster()); err != nil {
		return fmt.Errorf("create database %s%s: %w", s.db, s.lay.onCluster(), err)
	}
	for _, t := range []*tableSpec{&orderTable, &catalogTable} {
		for _, q := range s.lay.createSQL(t) {
			if err := s.conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("create %s: %w", t.name, err)
			}
		}
		err := s.checkSchema(ctx, t)
		var se *SchemaError
		if errors.As(err, &se) && onlyMissing(t, se) && len(t.added) > 0 {
			if err := s.migrate(ctx, t); err != nil {
				return err
			}
			err = s.checkSchema(ctx, t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// migrate adds t's added columns to a table created before them, on the
// server alone or on every member of a cluster (its local table and its
// Distributed table), each table getting the ones it lacks. 18.16 has no
// ADD COLUMN IF NOT EXISTS, so a member's columns are read right before
// its ALTER and again after a failed one: another edge opening the store
// at the same time, or a replica of the shard (an ALTER of a replicated
// table reaches every replica through ZooKeeper), may have added them
// meanwhile, which is success. ADD COLUMN changes metadata only; rows
// already stored read the default, 0 (no deadline, not paid, not expired).
func (s *ClickHouse) migrate(ctx context.Context, t *tableSpec) error {
	type target struct {
		conn   driver.Conn
		from   string // "" = the pool's server
		tables []string
	}
	targets := []target{{conn: s.conn, tables: []string{t.name}}}
	if s.lay.cluster != "" {
		targets = targets[:0]
		for _, m := range s.members {
			c, err := s.memberConn(m)
			if err != nil {
				return err
			}
			targets = append(targets, target{conn: c, from: m.addr, tables: []string{t.name + LocalSuffix, t.name}})
		}
	}
	for _, tg := range targets {
		for _, name := range tg.tables {
			lacks := func() ([]string, error) {
				info, err := s.readTable(ctx, tg.from, name)
				if err != nil {
					return nil, fmt.Errorf("migrate %s: %w", name, err)
				}
				var out []string
				for _, c := range t.added {
					if _, ok := info.cols[c]; !ok {
						out = append(out, c)
					}
				}
				return out, nil
			}
			missing, err := lacks()
			if err != nil || len(missing) == 0 {
				if err != nil {
					return err
				}
				continue
			}
			add := make([]string, len(missing))
			for i, c := range missing {
				add[i] = "ADD COLUMN " + c + " " + t.col(c).typ
			}
			err = tg.conn.Exec(ctx, "ALTER TABLE `"+s.db+"`."+name+" "+strings.Join(add, ", "))
			if err != nil {
				if still, rerr := lacks(); rerr == nil && len(still) == 0 {
					err = nil
				}
			}
			if err != nil {
				return fmt.Errorf("migrate %s on %s (add %s): %w", name, cmp.Or(tg.from, "the server"), strings.Join(missing, ", "), err)
			}
			s.opts.Log.Info("clickhouse table migrated: columns added", "table", s.db+"."+name, "member", tg.from, "columns", strings.Join(missing, ", "))
		}
	}
	return nil
}

func (t *tableSpec) col(name string) column {
	for _, c := range t.cols {
		if c.name == name {
			return c
		}
	}
	panic("orderstore: no column " + name + " in " + t.name)
}

// onlyMissing reports a schema refusal that lists only what setup adds:
// missing tables, or the missing columns of t that migrate adds.
func onlyMissing(t *tableSpec, se *SchemaError) bool {
next:
	for _, p := range se.Problems {
		if strings.HasSuffix(p, tableMissing) {
			continue
		}
		for _, name := range t.added {
			if strings.HasSuffix(p, missingColumn(t.col(name))) {
				continue next
			}
		}
		return false
	}
	return true
}

const tableMissing = "table is missing"

func missingColumn(c column) string { return "column " + c.name + " is missing (want " + c.typ + ")" }

// ddlCtx bounds an ON CLUSTER statement, which waits for every member, by
// the call's timeout rather than the server's 180 s.
func ddlCtx(ctx context.Context, timeout time.Duration) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"distributed_ddl_task_timeout": max(1, int(timeout/time.Second))}))
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

// findMembers reads the cluster's members from the server, refuses a name
// it does not know and checks that every member answers it.
func (s *ClickHouse) findMembers(ctx context.Context) error {
	rows, err := s.conn.Query(ctx, "SELECT shard_num, replica_num, host_name, port FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num", s.lay.cluster)
	if err != nil {
		return fmt.Errorf("read system.clusters: %w", err)
	}
	for rows.Next() {
		var m member
		var host string
		var port uint16
		if err := rows.Scan(&m.shard, &m.replica, &host, &port); err != nil {
			rows.Close()
			return fmt.Errorf("read system.clusters: %w", err)
		}
		m.addr = net.JoinHostPort(host, strconv.Itoa(int(port)))
		s.members = append(s.members, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read system.clusters: %w", err)
	}
	if len(s.members) == 0 {
		var known []string
		if err := s.conn.QueryRow(ctx, "SELECT groupUniqArray(cluster) FROM system.clusters").Scan(&known); err != nil {
			return fmt.Errorf("cluster %q is not in the server's system.clusters", s.lay.cluster)
		}
		sort.Strings(known)
		return fmt.Errorf("cluster %q is not in the server's system.clusters (remote_servers); it knows: %s",
			s.lay.cluster, strings.Join(known, ", "))
	}
	for _, m := range s.members {
		if m.replica > 1 {
			s.replicated = true
		}
		var one uint8
		if err := s.conn.QueryRow(ctx, "SELECT dummy FROM remote('"+m.addr+"', system.one)").Scan(&one); err != nil {
			return fmt.Errorf("cluster %s: member %v does not answer: %s", s.lay.cluster, m, oneLine(err))
		}
	}
	return nil
}

// tableInfo is what system.tables and system.columns say of one table.
type tableInfo struct {
	cols                                   map[string]string
	engine, full, partitionKey, sortingKey string
	found                                  bool
}

// readTable reads one table's description, on the server the pool is
// connected to (from "") or on a cluster member through remote().
func (s *ClickHouse) readTable(ctx context.Context, from, name string) (tableInfo, error) {
	sys := func(t string) string {
		if from == "" {
			return "system." + t
		}
		return "remote('" + from + "', system." + t + ")"
	}
	info := tableInfo{cols: map[string]string{}}
	rows, err := s.conn.Query(ctx, "SELECT name, type FROM "+sys("columns")+" WHERE database = ? AND table = ?", s.db, name)
	if err != nil {
		return info, err
	}
	for rows.Next() {
		var n, typ string
		if err := rows.Scan(&n, &typ); err != nil {
			rows.Close()
			return info, err
		}
		info.cols[n] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return info, err
	}
	rows, err = s.conn.Query(ctx, "SELECT engine, engine_full, partition_key, sorting_key FROM "+sys("tables")+" WHERE database = ? AND name = ?", s.db, name)
	if err != nil {
		return info, err
	}
	defer rows.Close()
	if rows.Next() {
		info.found = true
		if err := rows.Scan(&info.engine, &info.full, &info.partitionKey, &info.sortingKey); err != nil {
			return info, err
		}
	}
	return info, rows.Err()
}

func (s *ClickHouse) checkSchema(ctx context.Context, t *tableSpec) error {
	if s.lay.cluster == "" {
		info, err := s.readTable(ctx, "", t.name)
		if err != nil {
			return fmt.Errorf("read schema of %s: %w", t.name, err)
		}
		if p := s.problems(t, info, false, ""); len(p) > 0 {
			return &SchemaError{Table: s.db + "." + t.name, Problems: p}
		}
		return nil
	}
	var problems []string
	for _, m := range s.members {
		for _, local := range []bool{true, false} {
			name := t.name
			if local {
				name += LocalSuffix
			}
			info, err := s.readTable(ctx, m.addr, name)
			if err != nil {
				return fmt.Errorf("read schema of %s on member %v: %w", name, m, err)
			}
			problems = append(problems, s.problems(t, info, local, m.String()+": "+name+": ")...)
		}
	}
	if len(problems) > 0 {
		return &SchemaError{Table: s.db + "." + t.name, Problems: problems}
	}
	return nil
}

// problems compares what a server has with the spec: the columns always;
// the engine, keys and partition of the table holding the rows (local, or
// the one table alone); the engine and sharding of a Distributed table.
func (s *ClickHouse) problems(t *tableSpec, info tableInfo, local bool, where string) []string {
	if !info.found {
		return []string{where + tableMissing}
	}
	var problems []string
	for _, c := range t.cols {
		typ, ok := info.cols[c.name]
		switch {
		case !ok:
			problems = append(problems, where+missingColumn(c))
		case strings.ReplaceAll(typ, " ", "") != strings.ReplaceAll(c.typ, " ", ""):
			problems = append(problems, where+"column "+c.name+" is "+typ+", want "+c.typ)
		}
	}
	if s.lay.cluster != "" && !local {
		// The Distributed table: its shards and their sharding key decide
		// that an order's rows meet on one shard.
		if want := s.lay.distributed(t); strings.ReplaceAll(info.full, " ", "") != strings.ReplaceAll(want, " ", "") {
			problems = append(problems, where+"engine is "+info.full+", want "+want)
		}
		return problems
	}
	want := s.lay.engine(t)
	engine := "ReplacingMergeTree"
	if s.lay.cluster != "" {
		engine = "ReplicatedReplacingMergeTree"
	}
	// A plain MergeTree would keep every redelivered event as a row.
	versionOK := strings.HasSuffix(strings.SplitN(info.full, ")", 2)[0], t.version) // the engine's last argument
	if info.engine != engine || !versionOK {
		problems = append(problems, where+"engine is "+info.full+", want "+want)
	} else if s.lay.cluster != "" {
		if args := "('" + s.lay.path(t) + "', '" + s.lay.replica + "', "; !strings.HasPrefix(info.full, engine+args) {
			problems = append(problems, where+"engine is "+info.full+", want the ZooKeeper path and replica of "+want)
		}
	}
	if strings.ReplaceAll(info.sortingKey, " ", "") != strings.ReplaceAll(t.orderBy, " ", "") {
		problems = append(problems, where+"sorting key is ("+info.sortingKey+"), want ("+t.orderBy+")")
	}
	if info.partitionKey != t.partitionBy && !(info.partitionKey == "" && s.lay.cluster == "" && s.lay.legacyOK) {
		have := info.partitionKey
		if have == "" {
			have = "none"
		}
		msg := where + "partition key is " + have + ", want " + t.partitionBy
		if t.partitionBy == "" {
			msg = where + "partition key is " + have + ", want none"
		} else if info.partitionKey == "" {
			msg += " (clickhouse.retention_months drops whole months)"
		}
		problems = append(problems, msg)
	}
	return problems
}

// insertCtx carries the settings of an INSERT. On a cluster the rows go
// through the Distributed table, synchronously (insert_distributed_sync):
// by default a Distributed table only queues them on the local disk and
// sends them to the shards later, so an INSERT that returned would not mean
// stored, and the consumer commits its Kafka offsets after Insert returns
// (promise 3) — a crash of that server then would lose acknowledged
// orders. Synchronously, Insert returns once every shard's local table
// (one replica each; replication copies the rest) has its rows, or fails
// and the consumer retries the whole batch, which is idempotent. Writing
// each shard's local table from here instead would need the cluster's
// topology and ClickHouse's hash in the client, and a second place that
// decides the shard of an order.
func (s *ClickHouse) insertCtx(ctx context.Context) context.Context {
	if s.lay.cluster == "" {
		return ctx
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
}

// Insert stores rows in one batch (one INSERT with named columns over the
// native protocol).
func (s *ClickHouse) Insert(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+s.table+" ("+colsList+")")
	if err != nil {
		return fmt.Errorf("orderstore: insert: %w", err)
	}
	defer b.Abort() //nolint:errcheck // a no-op once sent
	for i := range rows {
		r := &rows[i]
		if err := b.Append(uint64(r.ID), r.ProductID, r.UserID, uint32(r.Qty),
			decimal.New(r.PriceCents, -2), r.Status, time.UnixMilli(r.CreatedMs).Truncate(time.Second),
			uint64(r.UpdatedMs), uint16(r.Edge), time.Unix(r.PaidMs/1000, 0), b2u(r.Expired), uint64(r.PayByMs)); err != nil {
			return fmt.Errorf("orderstore: insert: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("orderstore: insert %d rows: %w", len(rows), err)
	}
	return nil
}

// Get reads the newest row of one order.
func (s *ClickHouse) Get(ctx context.Context, productID string, orderID int64) (Row, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.conn.Query(ctx, "SELECT "+colsList+" FROM "+s.table+" FINAL WHERE product_id = ? AND order_id = ?",
		productID, uint64(orderID))
	if err != nil {
		return Row{}, false, fmt.Errorf("orderstore: get %s/%d: %w", productID, orderID, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return Row{}, false, rows.Err()
	}
	r, err := scanRow(rows)
	if err != nil {
		return Row{}, false, fmt.Errorf("orderstore: get %s/%d: %w", productID, orderID, err)
	}
	return r, true, nil
}

// scanRow reads one row of colsList.
func scanRow(rows driver.Rows) (Row, error) {
	var (
		id, upd, payBy uint64
		qty            uint32
		price          decimal.Decimal
		created, paid  time.Time
		edge           uint16
		expired        uint8
		r              Row
	)
	if err := rows.Scan(&id, &r.ProductID, &r.UserID, &qty, &price, &r.Status, &created, &upd, &edge, &paid, &expired, &payBy); err != nil {
		return Row{}, err
	}
	r.ID, r.Qty, r.PriceCents = int64(id), int(qty), price.Shift(2).IntPart()
	r.CreatedMs, r.UpdatedMs, r.Edge = created.UnixMilli(), int64(upd), int(edge)
	r.PaidMs, r.Expired, r.PayByMs = paid.Unix()*1000, expired == 1, int64(payBy)
	return r, nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Deadlines lists the unpaid rows with a pay deadline, after FINAL.
func (s *ClickHouse) Deadlines(ctx context.Context, productID string) ([]Row, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.conn.Query(ctx, "SELECT "+colsList+" FROM "+s.table+
		" FINAL WHERE product_id = ? AND status = 0 AND pay_by_ms > 0 ORDER BY pay_by_ms, order_id", productID)
	if err != nil {
		return nil, fmt.Errorf("orderstore: deadlines %s: %w", productID, err)
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("orderstore: deadlines %s: %w", productID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orderstore: deadlines %s: %w", productID, err)
	}
	return out, nil
}

// Totals counts one product's orders after FINAL.
func (s *ClickHouse) Totals(ctx context.Context, productID string) (Totals, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var t Totals
	// toInt64 everywhere: the driver scans only into the exact Go type,
	// and count()/sum() types differ between versions.
	err := s.conn.QueryRow(ctx, "SELECT toInt64(countIf(status = 0)), toInt64(sumIf(quantity, status = 0)), "+
		"toInt64(countIf(status = 1)), toInt64(sumIf(quantity, status = 1)), "+
		"toInt64(countIf(status = 2 AND expired = 0)), toInt64(sumIf(quantity, status = 2 AND expired = 0)), "+
		"toInt64(countIf(status = 2 AND expired = 1)), toInt64(sumIf(quantity, status = 2 AND expired = 1)), "+
		"toInt64(count()) - toInt64(uniqExact(order_id)) "+
		"FROM "+s.table+" FINAL WHERE product_id = ?", productID).
		Scan(&t.UnpaidOrders, &t.UnpaidUnits, &t.PaidOrders, &t.PaidUnits, &t.CancelledOrders, &t.CancelledUnits,
			&t.ExpiredOrders, &t.ExpiredUnits, &t.Duplicates)
	if err != nil {
		return Totals{}, fmt.Errorf("orderstore: totals %s: %w", productID, err)
	}
	if t.HeldOrders() == 0 {
		return t, nil
	}
	rows, err := s.conn.Query(ctx, "SELECT user_id, toInt64(sum(quantity)) AS u FROM "+s.table+
		" FINAL WHERE product_id = ? AND status IN (0, 1) GROUP BY user_id ORDER BY u DESC, user_id LIMIT 1", productID)
	if err != nil {
		return Totals{}, fmt.Errorf("orderstore: totals %s: %w", productID, err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&t.MaxUser, &t.MaxUserUnits); err != nil {
			return Totals{}, fmt.Errorf("orderstore: totals %s: %w", productID, err)
		}
	}
	return t, rows.Err()
}

// Buyers is the held (status 0 and 1) units per user of one product,
// after FINAL.
func (s *ClickHouse) Buyers(ctx context.Context, productID string) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.conn.Query(ctx, "SELECT user_id, toInt64(sum(quantity)) FROM "+s.table+
		" FINAL WHERE product_id = ? AND status IN (0, 1) GROUP BY user_id", productID)
	if err != nil {
		return nil, fmt.Errorf("orderstore: buyers %s: %w", productID, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var u string
		var n int64
		if err := rows.Scan(&u, &n); err != nil {
			return nil, fmt.Errorf("orderstore: buyers %s: %w", productID, err)
		}
		out[u] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orderstore: buyers %s: %w", productID, err)
	}
	return out, nil
}

// statusesChunk bounds the ids of one Statuses query (the IN list is
// written into the SQL text).
const statusesChunk = 5000

// Statuses reads the status of the stored ones of orderIDs, after FINAL.
func (s *ClickHouse) Statuses(ctx context.Context, productID string, orderIDs []int64) (map[int64]OrderStatus, error) {
	out := make(map[int64]OrderStatus, len(orderIDs))
	for lo := 0; lo < len(orderIDs); lo += statusesChunk {
		if err := s.statuses(ctx, productID, orderIDs[lo:min(lo+statusesChunk, len(orderIDs))], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *ClickHouse) statuses(ctx context.Context, productID string, ids []int64, out map[int64]OrderStatus) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// Numbers only: formatting them into the text is safe, and binding a
	// slice is not something every server version takes the same way.
	in := make([]byte, 0, len(ids)*20)
	for i, id := range ids {
		if i > 0 {
			in = append(in, ',')
		}
		in = strconv.AppendUint(in, uint64(id), 10)
	}
	rows, err := s.conn.Query(ctx, "SELECT order_id, status, expired, pay_by_ms, pay_time FROM "+s.table+
		" FINAL WHERE product_id = ? AND order_id IN ("+string(in)+")", productID)
	if err != nil {
		return fmt.Errorf("orderstore: statuses %s: %w", productID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, payBy   uint64
			st, expired uint8
			paid        time.Time
		)
		if err := rows.Scan(&id, &st, &expired, &payBy, &paid); err != nil {
			return fmt.Errorf("orderstore: statuses %s: %w", productID, err)
		}
		out[int64(id)] = OrderStatus{Status: st, Expired: expired == 1, PayByMs: int64(payBy), PaidMs: paid.Unix() * 1000}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("orderstore: statuses %s: %w", productID, err)
	}
	return nil
}

// Products lists the products with at least one row.
func (s *ClickHouse) Products(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT product_id FROM "+s.table+" ORDER BY product_id")
	if err != nil {
		return nil, fmt.Errorf("orderstore: products: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("orderstore: products: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Ping checks that ClickHouse answers.
func (s *ClickHouse) Ping(ctx context.Context) error { return s.conn.Ping(ctx) }

// ReplicaSyncer is a store whose reads may lag behind its inserts; Ledger
// syncs it after the drain, before it reads.
type ReplicaSyncer interface {
	SyncReplicas(ctx context.Context) error
}

// SyncReplicas makes every replica that answers hold every part of the
// ledger inserted before the call (SYSTEM SYNC REPLICA on each, which
// pulls the shard's replication log and waits until it fetched what it
// lists), so that a read through the Distributed table counts every
// stored order whichever replica answers it. Without it, with several
// replicas per shard, warm-up could read a replica a moment behind and
// reopen a sale with units already sold. A replica that does not answer is
// skipped: the Distributed table does not read from it either (one that
// comes back during the read is the window left). It does nothing on one
// server or with one replica per shard. The replicas are dialled at the
// addresses remote_servers names, with the store's credentials and TLS.
func (s *ClickHouse) SyncReplicas(ctx context.Context) error {
	return s.syncReplicas(ctx, Table)
}

// syncReplicas syncs table's local table on every replica that answers.
func (s *ClickHouse) syncReplicas(ctx context.Context, table string) error {
	if !s.replicated {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for _, m := range s.members {
		c, err := s.memberConn(m)
		if err != nil {
			return err
		}
		if err := c.Ping(ctx); err != nil {
			s.opts.Log.Warn("clickhouse replica does not answer: the ledger is read without it", "member", m.String(), "err", oneLine(err))
			continue
		}
		if err := c.Exec(ctx, "SYSTEM SYNC REPLICA `"+s.db+"`."+table+LocalSuffix); err != nil {
			return fmt.Errorf("orderstore: sync replica %v: %w", m, err)
		}
	}
	return nil
}

func (s *ClickHouse) memberConn(m member) (driver.Conn, error) {
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	if c, ok := s.replicaConns[m.addr]; ok {
		return c, nil
	}
	c, err := clickhouse.Open(&clickhouse.Options{
		Protocol:     clickhouse.Native,
		Addr:         []string{m.addr},
		Auth:         clickhouse.Auth{Database: "default", Username: s.opts.Username, Password: s.opts.Password},
		TLS:          s.opts.TLS,
		DialTimeout:  s.opts.DialTimeout,
		ReadTimeout:  s.timeout,
		MaxOpenConns: 1,
		MaxIdleConns: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("orderstore: replica %v: %w", m, err)
	}
	if s.replicaConns == nil {
		s.replicaConns = map[string]driver.Conn{}
	}
	s.replicaConns[m.addr] = c
	return c, nil
}

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

// PutCatalog stores records in one batch (one INSERT with named columns).
func (s *ClickHouse) PutCatalog(ctx context.Context, recs ...CatalogRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if err := validateRecords(recs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+s.catTable+" ("+catColsList+")")
	if err != nil {
		return fmt.Errorf("orderstore: catalogue insert: %w", err)
	}
	defer b.Abort() //nolint:errcheck // a no-op once sent
	for i := range recs {
		r := &recs[i]
		var on uint8
		if r.On {
			on = 1
		}
		if err := b.Append(r.ProductID, uint8(r.Kind), uint64(r.ID), r.Activity, r.Units, on,
			uint64(r.Version), time.UnixMilli(r.UpdatedMs).Truncate(time.Second)); err != nil {
			return fmt.Errorf("orderstore: catalogue insert: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("orderstore: catalogue insert %d records: %w", len(recs), err)
	}
	return nil
}

// ReadCatalog reads the newest record of each key, after FINAL. With
// several replicas per shard it syncs them first (as the ledger does):
// the catalogue is read to give Redis back what it lost, and a replica
// behind would give back an older version.
func (s *ClickHouse) ReadCatalog(ctx context.Context, productID string) ([]CatalogRecord, error) {
	if err := s.syncReplicas(ctx, CatalogTable); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	q := "SELECT " + catColsList + " FROM " + s.catTable + " FINAL"
	var args []any
	if productID != "" {
		q += " WHERE product_id = ?"
		args = append(args, productID)
	}
	rows, err := s.conn.Query(ctx, q+" ORDER BY product_id, kind, entry_id", args...)
	if err != nil {
		return nil, fmt.Errorf("orderstore: read catalogue: %w", err)
	}
	defer rows.Close()
	out := []CatalogRecord{}
	for rows.Next() {
		var (
			r        CatalogRecord
			kind, on uint8
			id, ver  uint64
			updated  time.Time
		)
		if err := rows.Scan(&r.ProductID, &kind, &id, &r.Activity, &r.Units, &on, &ver, &updated); err != nil {
			return nil, fmt.Errorf("orderstore: read catalogue: %w", err)
		}
		r.Kind, r.ID, r.On, r.Version, r.UpdatedMs = CatalogKind(kind), int64(id), on == 1, int64(ver), updated.UnixMilli()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orderstore: read catalogue: %w", err)
	}
	return out, nil
}

var _ Store = (*ClickHouse)(nil)

// IsSchemaError reports whether err is a wrong-schema refusal.
func IsSchemaError(err error) bool {
	var se *SchemaError
	return errors.As(err, &se)
}
