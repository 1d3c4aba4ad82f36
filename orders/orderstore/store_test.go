package orderstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/shopspring/decimal"

	"flashgate/orders/order"
)

func TestContractClickHouse(t *testing.T) {
	contract(t, func(t *testing.T) (Store, func() Store) {
		db := freshDB()
		s := openCH(t, db)
		return s, func() Store { s.Close(); return openCH(t, db) }
	})
}

func TestContractFile(t *testing.T) {
	contract(t, func(t *testing.T) (Store, func() Store) {
		dir := t.TempDir()
		open := func() *File {
			s, err := OpenFile(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		s := open()
		return s, func() Store { s.Close(); return open() }
	})
}

// A second open of the same database finds the first's tables: it keeps
// their rows and schema rather than creating, migrating or emptying them.
func TestClickHouseOpenIsIdempotent(t *testing.T) {
	ctx := context.Background()
	db := freshDB()
	first := openCH(t, db)
	want := Row{Order: order.Order{ID: 7, ProductID: "p-idem", UserID: "u1", Qty: 2, PriceCents: 990,
		CreatedMs: 1_700_000_000_000, Edge: 1}, Status: StatusUnpaid, UpdatedMs: 1_700_000_000_000}
	if err := first.Insert(ctx, []Row{want}); err != nil {
		t.Fatal(err)
	}
	rows := "SELECT count() FROM `" + db + "`." + Table
	before := count(t, first.conn, rows)
	if before != 1 {
		t.Fatalf("%d rows after one insert", before)
	}

	second := openCH(t, db)
	for _, tbl := range []*tableSpec{&orderTable, &catalogTable} {
		if err := second.checkSchema(ctx, tbl); err != nil {
			t.Errorf("schema of %s after the second open: %v", tbl.name, err)
		}
	}
	if after := count(t, second.conn, rows); after != before {
		t.Errorf("%d rows after the second open, %d before", after, before)
	}
	got, ok, err := second.Get(ctx, want.ProductID, want.ID)
	if err != nil || !ok || got != want {
		t.Fatalf("the first store's order through the second: %+v %v %v, want %+v", got, ok, err, want)
	}
}

func TestClickHouseWrongSchema(t *testing.T) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name, ddl string
		want      []string
	}{
		{"MissingAndMistyped",
			"(order_id UInt64, product_id String, user_id String, quantity UInt32, price Float64, status UInt8, create_time DateTime, update_ms UInt64, pay_time DateTime, expired UInt8, pay_by_ms UInt64) ENGINE = ReplacingMergeTree(update_ms) ORDER BY (product_id, order_id)",
			[]string{"2 problem(s)", "column price is Float64, want Decimal(10, 2)", "column edge is missing"}},
		{"PlainMergeTree",
			"(order_id UInt64, product_id String, user_id String, quantity UInt32, price Decimal(10,2), status UInt8, create_time DateTime, update_ms UInt64, edge UInt16, pay_time DateTime, expired UInt8, pay_by_ms UInt64) ENGINE = MergeTree ORDER BY (product_id, order_id)",
			[]string{"1 problem(s)", "engine is MergeTree"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := freshDB()
			if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
				t.Fatal(err)
			}
			if err := conn.Exec(ctx, "CREATE TABLE "+db+".seckill_order "+tc.ddl); err != nil {
				t.Fatal(err)
			}
			_, err := OpenClickHouse(ctx, ch.Addr(), db, ClickHouseOptions{})
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SchemaError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			t.Log(err)
		})
	}
}

func TestClickHouseWrongCatalogSchema(t *testing.T) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	db := freshDB()
	if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	// A catalogue whose switch is a string and whose rows never replace
	// each other.
	if err := conn.Exec(ctx, "CREATE TABLE "+db+".seckill_catalog (product_id String, kind UInt8, entry_id UInt64, activity String, "+
		"units Int64, degraded String, version UInt64, update_time DateTime) ENGINE = MergeTree ORDER BY (product_id, kind, entry_id)"); err != nil {
		t.Fatal(err)
	}
	_, err = OpenClickHouse(ctx, ch.Addr(), db, ClickHouseOptions{})
	if !IsSchemaError(err) {
		t.Fatalf("err = %v, want a *SchemaError", err)
	}
	for _, w := range []string{db + ".seckill_catalog", "column degraded is String, want UInt8", "engine is MergeTree"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestClickHouseBadDatabaseName(t *testing.T) {
	if _, err := OpenClickHouse(context.Background(), ch.Addr(), "x`; DROP", ClickHouseOptions{}); err == nil {
		t.Fatal("accepted a database name that needs quoting")
	}
}

func TestClickHouseUnreachable(t *testing.T) {
	start := time.Now()
	_, err := OpenClickHouse(context.Background(), "127.0.0.1:1", "x", ClickHouseOptions{DialTimeout: 200 * time.Millisecond})
	if err == nil {
		t.Fatal("opened a store on a closed port")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v to fail", d)
	}
}

func TestFileTornTailIsCut(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := Row{Order: order.Order{ID: 1, ProductID: "p", UserID: "u", Qty: 1, CreatedMs: 1000}, Status: 1, UpdatedMs: 1000}
	if err := s.Insert(context.Background(), []Row{r}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, _ := os.OpenFile(filepath.Join(dir, FileName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"o":2,"p":"p","u":`) // a crash mid-append
	f.Close()
	s, err = OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.ID = 3
	if err := s.Insert(context.Background(), []Row{r}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tot, _ := s.Totals(context.Background(), "p"); tot.HeldOrders() != 2 {
		t.Fatalf("orders %d, want 2", tot.HeldOrders())
	}
}

// TestFileReadsLinesOfEarlierReleases: a log written before pay deadlines
// (no deadline, pay time or expiry fields) loads with their zero values,
// its stored orders as paid (final once stored), its releases as cancels.
func TestFileReadsLinesOfEarlierReleases(t *testing.T) {
	dir := t.TempDir()
	old := `{"o":1,"p":"p","u":"ann","q":2,"c":9900,"s":1,"t":1796947200000,"v":1796947200000,"e":1}` + "\n" +
		`{"o":2,"p":"p","u":"bob","q":1,"c":9900,"s":2,"t":1796947200000,"v":1796947200001,"e":1}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tot, err := s.Totals(context.Background(), "p")
	if want := (Totals{PaidOrders: 1, PaidUnits: 2, CancelledOrders: 1, CancelledUnits: 1, MaxUser: "ann", MaxUserUnits: 2}); err != nil || tot != want {
		t.Fatalf("totals %+v %v, want %+v", tot, err, want)
	}
	if r, ok, _ := s.Get(context.Background(), "p", 1); !ok || r.PayByMs != 0 || r.PaidMs != 0 || r.Expired {
		t.Fatalf("old row %+v", r)
	}
}

func TestFileCorruptLineIsAnError(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, FileName), []byte("{\"o\":1}\nnot json\n"), 0o644)
	if _, err := OpenFile(dir); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want line 2", err)
	}
}

func TestLedgerSold(t *testing.T) {
	s, err := OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	s.Insert(ctx, []Row{
		{Order: order.Order{ID: 1, ProductID: "p", UserID: "u", Qty: 2, CreatedMs: 1}, Status: StatusUnpaid, UpdatedMs: 1},
		{Order: order.Order{ID: 2, ProductID: "p", UserID: "u", Qty: 3, CreatedMs: 1}, Status: StatusCancelled, UpdatedMs: 2},
	})
	if n, err := (Ledger{Store: s}).Sold(ctx, "p"); n != 2 || err != nil {
		t.Fatalf("sold %d %v", n, err)
	}
	if n, err := (Ledger{Store: s}).Released(ctx, "p"); n != 3 || err != nil {
		t.Fatalf("released %d %v", n, err)
	}
	boom := errors.New("lagging")
	if _, err := (Ledger{Store: s, Drain: func(context.Context) error { return boom }}).Sold(ctx, "p"); !errors.Is(err, boom) {
		t.Fatalf("sold answered before the drain: %v", err)
	}
}

func TestFileIsLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(dir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second open: %v, want in use", err)
	}
	s.Close()
	s, err = OpenFile(dir)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s.Close()
}

// legacyLedger is seckill_order as releases before pay deadlines created
// it: no pay_time, expired, pay_by_ms.
const legacyLedger = "(order_id UInt64, product_id String, user_id String, quantity UInt32, price Decimal(10,2), status UInt8, " +
	"create_time DateTime, update_ms UInt64, edge UInt16) ENGINE = ReplacingMergeTree(update_ms) PARTITION BY toYYYYMM(create_time) ORDER BY (product_id, order_id)"

// TestClickHouseMigratesLedgerWithoutPayColumns: a ledger of an earlier
// release gets the pay columns at open (two edges opening it at once), its
// rows keep their meaning (status 1, final once stored, reads as paid) and
// new rows go in beside them.
func TestClickHouseMigratesLedgerWithoutPayColumns(t *testing.T) {
	ctx := context.Background()
	db := freshDB()
	conn := dial(t, ch.Addr())
	for _, q := range []string{"CREATE DATABASE " + db, "CREATE TABLE " + db + ".seckill_order " + legacyLedger} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	insertLegacy(t, conn, db+".seckill_order")
	errs := make(chan error, 2)
	stores := make(chan *ClickHouse, 2)
	for range 2 {
		go func() {
			s, err := OpenClickHouse(ctx, ch.Addr(), db, ClickHouseOptions{})
			errs <- err
			stores <- s
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("open of a ledger without the pay columns: %v", err)
		}
		if s := <-stores; s != nil {
			s.Close()
		}
	}
	s := openCH(t, db)
	cols := count(t, conn, "SELECT count() FROM system.columns WHERE database = ? AND table = 'seckill_order' AND name IN ('pay_time', 'expired', 'pay_by_ms')", db)
	if cols != 3 {
		t.Fatalf("%d of the 3 pay columns added", cols)
	}
	old, ok, err := s.Get(ctx, "p", 1)
	if err != nil || !ok || old.Status != StatusPaid || old.PaidMs != 0 || old.PayByMs != 0 || old.Expired {
		t.Fatalf("an old stored order reads %+v %v %v, want paid without a pay time", old, ok, err)
	}
	created := time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC).UnixMilli()
	e := order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{ID: 3, ProductID: "p", UserID: "cid", Qty: 1, CreatedMs: created, PayByMs: created + 900_000}}
	if err := s.Insert(ctx, []Row{FromEvent(&e)}); err != nil {
		t.Fatal(err)
	}
	tot, err := s.Totals(ctx, "p")
	if want := (Totals{UnpaidOrders: 1, UnpaidUnits: 1, PaidOrders: 1, PaidUnits: 2, CancelledOrders: 1, CancelledUnits: 1, MaxUser: "ann", MaxUserUnits: 2}); err != nil || tot != want {
		t.Fatalf("totals %+v %v, want %+v", tot, err, want)
	}
	if due, err := s.Deadlines(ctx, "p"); err != nil || len(due) != 1 || due[0].PayByMs != created+900_000 {
		t.Fatalf("deadlines %+v %v", due, err)
	}
}

// insertLegacy stores two rows the way an earlier release did: ann's order
// (status 1) and bob's released one.
func insertLegacy(t *testing.T, conn driver.Conn, table string) {
	t.Helper()
	b, err := conn.PrepareBatch(context.Background(), "INSERT INTO "+table+" (order_id, product_id, user_id, quantity, price, status, create_time, update_ms, edge)")
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC)
	for _, r := range []struct {
		id     uint64
		user   string
		qty    uint32
		status uint8
	}{{1, "ann", 2, 1}, {2, "bob", 1, 2}} {
		if err := b.Append(r.id, "p", r.user, r.qty, decimal.New(9900, -2), r.status, created, uint64(created.UnixMilli())+r.id, uint16(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

// TestClickHouseMigrationKeepsOtherProblems: a table that lacks the pay
// columns and has another fault is refused, and nothing is added to it.
func TestClickHouseMigrationKeepsOtherProblems(t *testing.T) {
	ctx := context.Background()
	db := freshDB()
	conn := dial(t, ch.Addr())
	for _, q := range []string{"CREATE DATABASE " + db, "CREATE TABLE " + db + ".seckill_order " + strings.Replace(legacyLedger, "edge UInt16", "edge UInt32", 1)} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	_, err := OpenClickHouse(ctx, ch.Addr(), db, ClickHouseOptions{})
	if !IsSchemaError(err) || !strings.Contains(err.Error(), "column edge is UInt32, want UInt16") || !strings.Contains(err.Error(), "column pay_time is missing") {
		t.Fatalf("err = %v, want a *SchemaError naming edge and the pay columns", err)
	}
	if n := count(t, conn, "SELECT count() FROM system.columns WHERE database = ? AND table = 'seckill_order'", db); n != 9 {
		t.Fatalf("the refused table has %d columns now, want its 9", n)
	}
}
