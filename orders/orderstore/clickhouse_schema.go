package orderstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
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

// IsSchemaError reports whether err is a wrong-schema refusal.
func IsSchemaError(err error) bool {
	var se *SchemaError
	return errors.As(err, &se)
}
