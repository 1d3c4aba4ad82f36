package orderstore

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
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

// member is one server of the cluster as system.clusters names it.
type member struct {
	shard, replica uint32
	addr           string // host:port of its native protocol
}

func (m member) String() string {
	return fmt.Sprintf("%s (shard %d, replica %d)", m.addr, m.shard, m.replica)
}

// ddlCtx bounds an ON CLUSTER statement, which waits for every member, by
// the call's timeout rather than the server's 180 s.
func ddlCtx(ctx context.Context, timeout time.Duration) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"distributed_ddl_task_timeout": max(1, int(timeout/time.Second))}))
}

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
