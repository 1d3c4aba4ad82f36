package orderstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/shopspring/decimal"
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
	engine  string // reads use FINAL to see one row per key
	orderBy string
}

// orderTable is seckill_order: one row per order, the newest (update_ms)
// wins.
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
	},
	engine:  "ReplacingMergeTree(update_ms)",
	orderBy: "ORDER BY (product_id, order_id)",
}

// catalogTable is seckill_catalog: one row per (product, kind, entry),
// the newest version wins (catalog.go). degraded is a UInt8 because 18.16
// has no Bool.
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
	engine:  "ReplacingMergeTree(version)",
	orderBy: "ORDER BY (product_id, kind, entry_id)",
}

const (
	colsList    = "order_id, product_id, user_id, quantity, price, status, create_time, update_ms, edge"
	catColsList = "product_id, kind, entry_id, activity, units, degraded, version, update_time"
)

func (t *tableSpec) createSQL(db string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS `%s`.%s (", db, t.name)
	for i, c := range t.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		// Decimal(10, 2) is accepted with the space by every version.
		b.WriteString(c.name + " " + c.typ)
	}
	b.WriteString(") ENGINE = " + t.engine + " " + t.orderBy)
	return b.String()
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
}

// SchemaError is a table (seckill_order, seckill_catalog) that exists with
// another schema.
// Problems names each missing or mistyped column (and a wrong engine).
type SchemaError struct {
	Table    string
	Problems []string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("table %s has the wrong schema (%d problem(s)): %s; migrate or drop it",
		e.Table, len(e.Problems), strings.Join(e.Problems, "; "))
}

// ClickHouse is the Store on a ClickHouse server (native protocol).
type ClickHouse struct {
	conn     driver.Conn
	db       string
	timeout  time.Duration
	table    string // `db`.seckill_order
	catTable string // `db`.seckill_catalog
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// OpenClickHouse connects to addr (host:port of the native protocol,
// several comma-separated for failover), creates the database and the
// tables (the ledger's and the catalogue's) if missing, and checks that an
// existing table has the expected schema: a mismatch is a *SchemaError
// naming every wrong column.
func OpenClickHouse(ctx context.Context, addr, database string, opts ClickHouseOptions) (*ClickHouse, error) {
	if database == "" {
		database = "default"
	}
	if !identRE.MatchString(database) {
		return nil, fmt.Errorf("orderstore: database name %q: letters, digits and _ only", database)
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
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol: clickhouse.Native, // the HTTP protocol does not work with 18.16
		Addr:     strings.Split(addr, ","),
		// The database is created below: connect to one that exists.
		Auth:         clickhouse.Auth{Database: "default", Username: opts.Username, Password: opts.Password},
		DialTimeout:  opts.DialTimeout,
		ReadTimeout:  opts.Timeout,
		MaxOpenConns: opts.MaxOpenConns,
		MaxIdleConns: opts.MaxOpenConns,
	})
	if err != nil {
		return nil, fmt.Errorf("orderstore: clickhouse %s: %w", addr, err)
	}
	s := &ClickHouse{conn: conn, db: database, timeout: opts.Timeout,
		table: "`" + database + "`." + Table, catTable: "`" + database + "`." + CatalogTable}
	if err := s.setup(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("orderstore: clickhouse %s: %w", addr, err)
	}
	return s, nil
}

func (s *ClickHouse) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+s.db+"`"); err != nil {
		return err
	}
	for _, t := range []*tableSpec{&orderTable, &catalogTable} {
		if err := s.conn.Exec(ctx, t.createSQL(s.db)); err != nil {
			return err
		}
		if err := s.checkSchema(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func (s *ClickHouse) checkSchema(ctx context.Context, t *tableSpec) error {
	rows, err := s.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?", s.db, t.name)
	if err != nil {
		return fmt.Errorf("read schema of %s: %w", t.name, err)
	}
	have := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			rows.Close()
			return fmt.Errorf("read schema of %s: %w", t.name, err)
		}
		have[name] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read schema of %s: %w", t.name, err)
	}
	var problems []string
	for _, c := range t.cols {
		typ, ok := have[c.name]
		switch {
		case !ok:
			problems = append(problems, "column "+c.name+" is missing (want "+c.typ+")")
		case strings.ReplaceAll(typ, " ", "") != strings.ReplaceAll(c.typ, " ", ""):
			problems = append(problems, "column "+c.name+" is "+typ+", want "+c.typ)
		}
	}
	var eng, full string
	if err := s.conn.QueryRow(ctx, "SELECT engine, engine_full FROM system.tables WHERE database = ? AND name = ?", s.db, t.name).Scan(&eng, &full); err != nil {
		return fmt.Errorf("read engine of %s: %w", t.name, err)
	}
	// A plain MergeTree would keep every redelivered event as a row.
	if eng != "ReplacingMergeTree" || !strings.Contains(full, t.engine) || !strings.Contains(full, t.orderBy) {
		problems = append(problems, "engine is "+full+", want "+t.engine+" "+t.orderBy)
	}
	if len(problems) > 0 {
		return &SchemaError{Table: s.db + "." + t.name, Problems: problems}
	}
	return nil
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
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table+" ("+colsList+")")
	if err != nil {
		return fmt.Errorf("orderstore: insert: %w", err)
	}
	defer b.Abort() //nolint:errcheck // a no-op once sent
	for i := range rows {
		r := &rows[i]
		if err := b.Append(uint64(r.ID), r.ProductID, r.UserID, uint32(r.Qty),
			decimal.New(r.PriceCents, -2), r.Status, time.UnixMilli(r.CreatedMs).Truncate(time.Second),
			uint64(r.UpdatedMs), uint16(r.Edge)); err != nil {
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
	var (
		id, upd uint64
		qty     uint32
		price   decimal.Decimal
		created time.Time
		edge    uint16
		r       Row
	)
	if err := rows.Scan(&id, &r.ProductID, &r.UserID, &qty, &price, &r.Status, &created, &upd, &edge); err != nil {
		return Row{}, false, fmt.Errorf("orderstore: get %s/%d: %w", productID, orderID, err)
	}
	r.ID, r.Qty, r.PriceCents = int64(id), int(qty), price.Shift(2).IntPart()
	r.CreatedMs, r.UpdatedMs, r.Edge = created.UnixMilli(), int64(upd), int(edge)
	return r, true, nil
}

// Totals counts one product's orders after FINAL.
func (s *ClickHouse) Totals(ctx context.Context, productID string) (Totals, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var t Totals
	// toInt64 everywhere: the driver scans only into the exact Go type,
	// and count()/sum() types differ between versions.
	err := s.conn.QueryRow(ctx, "SELECT toInt64(countIf(status = 1)), toInt64(sumIf(quantity, status = 1)), "+
		"toInt64(countIf(status = 2)), toInt64(sumIf(quantity, status = 2)), toInt64(count()) - toInt64(uniqExact(order_id)) "+
		"FROM "+s.table+" FINAL WHERE product_id = ?", productID).
		Scan(&t.Orders, &t.Units, &t.ReleasedOrders, &t.ReleasedUnits, &t.Duplicates)
	if err != nil {
		return Totals{}, fmt.Errorf("orderstore: totals %s: %w", productID, err)
	}
	if t.Orders == 0 {
		return t, nil
	}
	rows, err := s.conn.Query(ctx, "SELECT user_id, toInt64(sum(quantity)) AS u FROM "+s.table+
		" FINAL WHERE product_id = ? AND status = 1 GROUP BY user_id ORDER BY u DESC, user_id LIMIT 1", productID)
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

// Buyers is the status-1 units per user of one product, after FINAL.
func (s *ClickHouse) Buyers(ctx context.Context, productID string) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.conn.Query(ctx, "SELECT user_id, toInt64(sum(quantity)) FROM "+s.table+
		" FINAL WHERE product_id = ? AND status = 1 GROUP BY user_id", productID)
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
func (s *ClickHouse) Statuses(ctx context.Context, productID string, orderIDs []int64) (map[int64]uint8, error) {
	out := make(map[int64]uint8, len(orderIDs))
	for lo := 0; lo < len(orderIDs); lo += statusesChunk {
		if err := s.statuses(ctx, productID, orderIDs[lo:min(lo+statusesChunk, len(orderIDs))], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *ClickHouse) statuses(ctx context.Context, productID string, ids []int64, out map[int64]uint8) error {
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
	rows, err := s.conn.Query(ctx, "SELECT order_id, status FROM "+s.table+
		" FINAL WHERE product_id = ? AND order_id IN ("+string(in)+")", productID)
	if err != nil {
		return fmt.Errorf("orderstore: statuses %s: %w", productID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uint64
		var st uint8
		if err := rows.Scan(&id, &st); err != nil {
			return fmt.Errorf("orderstore: statuses %s: %w", productID, err)
		}
		out[int64(id)] = st
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

// Close closes the connection pool.
func (s *ClickHouse) Close() error { return s.conn.Close() }

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
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.catTable+" ("+catColsList+")")
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

// ReadCatalog reads the newest record of each key, after FINAL.
func (s *ClickHouse) ReadCatalog(ctx context.Context, productID string) ([]CatalogRecord, error) {
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
