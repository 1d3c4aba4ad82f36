package orderstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"flashgate/orders/order"
)

// ClickHouse 18.16 has no table TTL (it came with 19.6), so retention is
// what ClickHouse users did before: the ledger is partitioned by month
// (toYYYYMM(create_time)) and whole months past the retention are dropped
// with ALTER TABLE ... DROP PARTITION (ON CLUSTER on a cluster), which
// removes their parts at once, without a merge. One mechanism for every
// server version: a TTL would delete rows one merge at a time, and cannot
// know the guard below.
//
// A month is dropped only when none of its products is still in use: a
// product with any row (an order, or the release of an older order) newer
// than the cutoff, or one that opts.Live lists, keeps every month it has
// rows in. The ledger is what warm-up rebuilds a sale from after Redis lost
// it: dropping the orders of a sale that can still sell (or be rebuilt, or
// reconciled) would reopen it with units already sold.

// cutoff is the first day of the oldest month kept: months whole months
// before the current one.
func cutoff(now time.Time, months int) time.Time {
	now = now.UTC()
	return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, -months, 0)
}

func yyyymm(t time.Time) uint32 { return uint32(t.Year()*100 + int(t.Month())) }

// DropExpired drops the ledger's month partitions older than
// opts.RetentionMonths whose products are all out of use (see above), and
// returns the partitions it dropped (YYYYMM). The catalogue is never
// dropped.
func (s *ClickHouse) DropExpired(ctx context.Context) ([]uint32, error) {
	if s.opts.RetentionMonths <= 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cut := cutoff(s.opts.Now(), s.opts.RetentionMonths)
	months, err := s.partitions(ctx, yyyymm(cut))
	if err != nil {
		return nil, err
	}
	if len(months) == 0 {
		return nil, nil
	}
	live := map[string]bool{}
	if s.opts.Live != nil {
		ps, err := s.opts.Live(ctx)
		if err != nil {
			return nil, fmt.Errorf("orderstore: retention: live products: %w", err)
		}
		for _, p := range ps {
			live[p] = true
		}
	}
	var dropped []uint32
	for _, m := range months {
		keep, err := s.inUse(ctx, m, cut, live)
		if err != nil {
			return dropped, err
		}
		if keep != "" {
			s.opts.Log.Info("clickhouse retention keeps an old month: a product in it is still in use", "month", m, "product", keep)
			continue
		}
		if err := s.dropMonth(ctx, m); err != nil {
			return dropped, err
		}
		s.opts.Log.Info("clickhouse retention dropped a month of orders", "month", m, "table", s.db+"."+s.rowTable())
		dropped = append(dropped, m)
	}
	return dropped, nil
}

// rowTable is the table that holds the ledger's parts.
func (s *ClickHouse) rowTable() string {
	if s.lay.cluster != "" {
		return Table + LocalSuffix
	}
	return Table
}

// partitions lists the ledger's months before first, oldest first, on
// every shard.
func (s *ClickHouse) partitions(ctx context.Context, first uint32) ([]uint32, error) {
	parts := "system.parts"
	if s.lay.cluster != "" {
		parts = "cluster('" + s.lay.cluster + "', system.parts)"
	}
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT partition FROM "+parts+" WHERE database = ? AND table = ? AND active ORDER BY partition",
		s.db, s.rowTable())
	if err != nil {
		return nil, fmt.Errorf("orderstore: retention: list partitions: %w", err)
	}
	defer rows.Close()
	var out []uint32
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("orderstore: retention: list partitions: %w", err)
		}
		m, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("orderstore: retention: partition %q of %s is not a month", p, s.rowTable())
		}
		if uint32(m) < first {
			out = append(out, uint32(m))
		}
	}
	return out, rows.Err()
}

// inUse returns a product of month m that is still in use ("" if none).
func (s *ClickHouse) inUse(ctx context.Context, m uint32, cut time.Time, live map[string]bool) (string, error) {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT product_id FROM "+s.table+" WHERE toYYYYMM(create_time) = ?", m)
	if err != nil {
		return "", fmt.Errorf("orderstore: retention: products of %d: %w", m, err)
	}
	var products []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return "", fmt.Errorf("orderstore: retention: products of %d: %w", m, err)
		}
		if live[p] {
			rows.Close()
			return p, nil
		}
		products = append(products, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("orderstore: retention: products of %d: %w", m, err)
	}
	for lo := 0; lo < len(products); lo += statusesChunk {
		chunk := products[lo:min(lo+statusesChunk, len(products))]
		// Product ids are validated on the way in (order.ValidProductID:
		// no quote can be in one), so they are safe to write into the text.
		in := make([]string, 0, len(chunk))
		for _, p := range chunk {
			if !order.ValidProductID(p) {
				return p, nil // not ours to judge: keep the month
			}
			in = append(in, "'"+p+"'")
		}
		var p string
		err := s.conn.QueryRow(ctx, "SELECT product_id FROM "+s.table+" WHERE product_id IN ("+strings.Join(in, ",")+
			") AND (create_time >= ? OR update_ms >= ?) LIMIT 1", cut, uint64(cut.UnixMilli())).Scan(&p)
		if err == nil {
			return p, nil
		}
		if !isNoRows(err) {
			return "", fmt.Errorf("orderstore: retention: recent rows of %d's products: %w", m, err)
		}
	}
	return "", nil
}

func (s *ClickHouse) dropMonth(ctx context.Context, m uint32) error {
	if s.lay.cluster != "" {
		ctx = ddlCtx(ctx, s.timeout)
	}
	q := "ALTER TABLE `" + s.db + "`." + s.rowTable() + s.lay.onCluster() + " DROP PARTITION " + strconv.FormatUint(uint64(m), 10)
	if err := s.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("orderstore: retention: drop month %d: %w", m, err)
	}
	return nil
}

// startRetention runs DropExpired opts.RetentionFirst after the open and
// every opts.RetentionEvery after that, until Close.
func (s *ClickHouse) startRetention() {
	ctx, stop := context.WithCancel(context.Background())
	s.stopRetention, s.retentionDone = stop, make(chan struct{})
	go func() {
		defer close(s.retentionDone)
		t := time.NewTimer(s.opts.RetentionFirst)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := s.DropExpired(ctx); err != nil && ctx.Err() == nil {
				s.opts.Log.Warn("clickhouse retention failed; it runs again later", "err", err)
			}
			t.Reset(s.opts.RetentionEvery)
		}
	}()
}
