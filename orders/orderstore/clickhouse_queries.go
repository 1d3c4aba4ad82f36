package orderstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/shopspring/decimal"
)

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
	// Column by column, in colsList's order: a row at a time, the driver
	// took its twelve values as interfaces (an allocation each) and
	// dispatched each on its type — most of the insert's CPU per order.
	var c insertColumns
	c.fill(rows)
	for i, col := range []any{c.id, c.product, c.user, c.qty, c.price, c.status, c.created, c.updated, c.edge, c.paid, c.expired, c.payBy} {
		if err := b.Column(i).Append(col); err != nil {
			return fmt.Errorf("orderstore: insert: column %d: %w", i, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("orderstore: insert %d rows: %w", len(rows), err)
	}
	return nil
}

// insertColumns are the rows of an Insert as colsList's columns.
type insertColumns struct {
	id, updated, payBy []uint64
	product, user      []string
	qty                []uint32
	price              []decimal.Decimal
	status, expired    []uint8
	created, paid      []time.Time
	edge               []uint16
}

func (c *insertColumns) fill(rows []Row) {
	n := len(rows)
	c.id, c.updated, c.payBy = make([]uint64, n), make([]uint64, n), make([]uint64, n)
	c.product, c.user = make([]string, n), make([]string, n)
	c.qty, c.price = make([]uint32, n), make([]decimal.Decimal, n)
	c.status, c.expired = make([]uint8, n), make([]uint8, n)
	c.created, c.paid = make([]time.Time, n), make([]time.Time, n)
	c.edge = make([]uint16, n)
	for i := range rows {
		r := &rows[i]
		c.id[i], c.product[i], c.user[i], c.qty[i] = uint64(r.ID), r.ProductID, r.UserID, uint32(r.Qty)
		c.price[i], c.status[i] = decimal.New(r.PriceCents, -2), r.Status
		c.created[i], c.updated[i], c.edge[i] = time.UnixMilli(r.CreatedMs).Truncate(time.Second), uint64(r.UpdatedMs), uint16(r.Edge)
		c.paid[i], c.expired[i], c.payBy[i] = time.Unix(r.PaidMs/1000, 0), b2u(r.Expired), uint64(r.PayByMs)
	}
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

// Settled lists a page of the settled rows, by order id, after FINAL. The
// status filter may run before the rows are merged (ClickHouse moves it to
// PREWHERE): still right, since a settled row always outranks the order's
// unpaid row (FromEvent's versions) and only unpaid rows are filtered out.
func (s *ClickHouse) Settled(ctx context.Context, productID string, afterID int64, limit int) ([]Row, error) {
	return s.page(ctx, "settled", productID, afterID, limit, " AND status IN (1, 2)")
}

// Rows lists a page of every row, by order id, after FINAL.
func (s *ClickHouse) Rows(ctx context.Context, productID string, afterID int64, limit int) ([]Row, error) {
	return s.page(ctx, "rows", productID, afterID, limit, "")
}

// page lists the rows after afterID matching the extra condition (text of
// the caller's, never of outside input), by order id, at most limit.
func (s *ClickHouse) page(ctx context.Context, what, productID string, afterID int64, limit int, cond string) ([]Row, error) {
	if limit < 1 || afterID < 0 {
		return nil, fmt.Errorf("orderstore: %s %s: after %d limit %d", what, productID, afterID, limit)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// Numbers only in the text: LIMIT takes no placeholder on every
	// server version.
	rows, err := s.conn.Query(ctx, "SELECT "+colsList+" FROM "+s.table+
		" FINAL WHERE product_id = ? AND order_id > "+strconv.FormatInt(afterID, 10)+
		cond+" ORDER BY order_id LIMIT "+strconv.Itoa(limit), productID)
	if err != nil {
		return nil, fmt.Errorf("orderstore: %s %s: %w", what, productID, err)
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("orderstore: %s %s: %w", what, productID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orderstore: %s %s: %w", what, productID, err)
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
