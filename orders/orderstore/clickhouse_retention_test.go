package orderstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/orders/order"
)

func TestCutoffCountsWholeMonths(t *testing.T) {
	for _, tc := range []struct {
		now    string
		months int
		want   uint32
	}{
		{"2026-12-15T10:00:00Z", 3, 202609},
		{"2026-12-01T00:00:00Z", 1, 202611},
		{"2027-01-31T23:59:59Z", 12, 202601},
		{"2026-03-31T23:00:00-05:00", 1, 202603}, // 04-01 in UTC
	} {
		now, _ := time.Parse(time.RFC3339, tc.now)
		if got := yyyymm(cutoff(now, tc.months)); got != tc.want {
			t.Errorf("cutoff(%s, %d) = %d, want %d", tc.now, tc.months, got, tc.want)
		}
	}
}

// agedRow is one order of product p created at day (YYYY-MM-DD).
func agedRow(id int64, p, user, day string) Row {
	at, err := time.Parse(time.DateOnly, day)
	if err != nil {
		panic(err)
	}
	ms := at.Add(time.Hour).UnixMilli()
	return Row{Status: StatusUnpaid, UpdatedMs: ms, Order: order.Order{
		ID: id, ProductID: p, UserID: user, Qty: 1, PriceCents: 100, CreatedMs: ms}}
}

// retentionRows are orders in the months 2026-01 to 2026-09 seen from
// 2026-12-15 with three months kept (cutoff 2026-09-01).
func retentionRows() []Row {
	released := agedRow(50, "p-rel", "u5", "2026-05-01")
	released.Status, released.UpdatedMs = StatusCancelled, time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC).UnixMilli()
	return []Row{
		agedRow(10, "p-old", "u1", "2026-01-10"), agedRow(11, "p-old", "u2", "2026-02-03"), // gone: nothing recent
		agedRow(20, "p-mixed", "u3", "2026-03-05"), agedRow(21, "p-mixed", "u3", "2026-11-01"), // kept: sold recently
		agedRow(30, "p-live", "u4", "2026-04-02"), // kept: a sale still known (Live)
		released, // kept: released recently
		agedRow(60, "p-edge", "u6", "2026-08-31"), // gone: the last month before the cutoff
		agedRow(70, "p-new", "u7", "2026-09-01"),  // kept: within the retention
	}
}

var retentionNow = func() time.Time { return time.Date(2026, 12, 15, 10, 0, 0, 0, time.UTC) }

func live(context.Context) ([]string, error) { return []string{"p-live"}, nil }

func TestClickHouseRetentionDropsOnlyOldMonthsOutOfUse(t *testing.T) {
	ctx := context.Background()
	db := freshDB()
	w := openCH(t, db)
	if err := w.Insert(ctx, retentionRows()); err != nil {
		t.Fatal(err)
	}
	// The store that keeps three months runs retention as it opens.
	s, err := OpenClickHouse(ctx, ch.Addr(), db, ClickHouseOptions{RetentionMonths: 3, RetentionFirst: time.Millisecond, Now: retentionNow, Live: live})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	await.Until(t, 10*time.Second, "retention dropped p-old's months", func() bool {
		got, err := s.Totals(ctx, "p-old")
		return err == nil && got.HeldOrders() == 0
	})
	want := map[string]Totals{
		"p-old": {}, "p-edge": {},
		"p-mixed": {UnpaidOrders: 2, UnpaidUnits: 2, MaxUser: "u3", MaxUserUnits: 2},
		"p-live":  {UnpaidOrders: 1, UnpaidUnits: 1, MaxUser: "u4", MaxUserUnits: 1},
		"p-rel":   {CancelledOrders: 1, CancelledUnits: 1},
		"p-new":   {UnpaidOrders: 1, UnpaidUnits: 1, MaxUser: "u7", MaxUserUnits: 1},
	}
	await.Until(t, 10*time.Second, "p-edge's month dropped", func() bool {
		got, err := s.Totals(ctx, "p-edge")
		return err == nil && got.HeldOrders() == 0
	})
	for p, w := range want {
		got, err := s.Totals(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("%s after retention: %+v, want %+v", p, got, w)
		}
	}
	if more, err := s.DropExpired(ctx); err != nil || len(more) != 0 {
		t.Fatalf("a second pass dropped %v, %v; want nothing", more, err)
	}
	months := partitionsOf(t, db, "seckill_order")
	if wantM := []string{"202603", "202604", "202605", "202609", "202611"}; !reflect.DeepEqual(months, wantM) {
		t.Errorf("months left %v, want %v", months, wantM)
	}
	// Nothing of the catalogue is touched.
	if err := s.PutCatalog(ctx, CatalogRecord{ProductID: "p-old", Kind: KindDegrade, On: true, Version: 1, UpdatedMs: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DropExpired(ctx); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.ReadCatalog(ctx, "p-old"); err != nil || len(recs) != 1 {
		t.Fatalf("catalogue after retention: %v, %v", recs, err)
	}
}

func partitionsOf(t *testing.T, db, table string) []string {
	t.Helper()
	rows, err := dial(t, ch.Addr()).Query(context.Background(), "SELECT DISTINCT partition FROM system.parts WHERE database = ? AND table = ? AND active ORDER BY partition", db, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// A ledger created before tables were partitioned stays usable, but
// retention cannot drop its months: refused at open, saying so.
func TestClickHouseUnpartitionedLedger(t *testing.T) {
	ctx := context.Background()
	db := freshDB()
	conn := dial(t, ch.Addr())
	if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	legacy := "(order_id UInt64, product_id String, user_id String, quantity UInt32, price Decimal(10,2), status UInt8, create_time DateTime, update_ms UInt64, edge UInt16) " +
		"ENGINE = ReplacingMergeTree(update_ms) ORDER BY (product_id, order_id)"
	if err := conn.Exec(ctx, "CREATE TABLE "+db+".seckill_order "+legacy); err != nil {
		t.Fatal(err)
	}
	s, err := OpenClickHouse(ctx, ch.Addr(), db, ClickHouseOptions{})
	if err != nil {
		t.Fatalf("the unpartitioned ledger of an earlier release is refused: %v", err)
	}
	s.Close()
	_, err = OpenClickHouse(ctx, ch.Addr(), db, ClickHouseOptions{RetentionMonths: 6})
	var se *SchemaError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "partition key is none, want toYYYYMM(create_time) (clickhouse.retention_months drops whole months)") {
		t.Fatalf("err = %v, want a *SchemaError about the partition key", err)
	}

	// Another partition is another layout, retention or not.
	db2 := freshDB()
	if err := conn.Exec(ctx, "CREATE DATABASE "+db2); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE "+db2+".seckill_order "+strings.Replace(legacy, "ORDER BY", "PARTITION BY toYYYYMMDD(create_time) ORDER BY", 1)); err != nil {
		t.Fatal(err)
	}
	_, err = OpenClickHouse(ctx, ch.Addr(), db2, ClickHouseOptions{})
	if !IsSchemaError(err) || !strings.Contains(err.Error(), "partition key is toYYYYMMDD(create_time), want toYYYYMM(create_time)") {
		t.Fatalf("err = %v, want a *SchemaError naming both partition keys", err)
	}
	t.Log(err)
}

func TestClickHouseNewLedgerIsPartitionedByMonth(t *testing.T) {
	db := freshDB()
	s := openCH(t, db)
	if err := s.Insert(context.Background(), []Row{agedRow(1, "p1", "u1", "2026-01-10"), agedRow(2, "p1", "u1", "2026-02-10")}); err != nil {
		t.Fatal(err)
	}
	if got := partitionsOf(t, db, "seckill_order"); fmt.Sprint(got) != "[202601 202602]" {
		t.Fatalf("partitions %v", got)
	}
}
