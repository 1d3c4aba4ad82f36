package orderstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"flashgate/orders/order"
)

// contract is run against every Store implementation: open returns a fresh,
// empty store; reopen (may be nil) closes and opens the same one again.
func contract(t *testing.T, open func(t *testing.T) (s Store, reopen func() Store)) {
	ctx := context.Background()
	base := time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC).UnixMilli() + 123
	row := func(id int64, p, u string, qty int) Row {
		return Row{Status: StatusUnpaid, UpdatedMs: base + id, Order: order.Order{
			ID: id, ProductID: p, UserID: u, Qty: qty, PriceCents: 9900, CreatedMs: base + id, Edge: 3,
		}}
	}
	same := func(t *testing.T, got, want Row) {
		t.Helper()
		// ClickHouse keeps create_time to the second.
		if got.CreatedMs/1000 != want.CreatedMs/1000 {
			t.Errorf("created %d, want %d (seconds)", got.CreatedMs, want.CreatedMs)
		}
		got.CreatedMs, want.CreatedMs = 0, 0
		if got != want {
			t.Errorf("row\n got %+v\nwant %+v", got, want)
		}
	}
	totals := func(t *testing.T, s Store, p string, want Totals) {
		t.Helper()
		got, err := s.Totals(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("totals %s\n got %+v\nwant %+v", p, got, want)
		}
	}

	t.Run("InsertGetTotals", func(t *testing.T) {
		s, _ := open(t)
		big := row(1<<62+5, "p1", "bob", 2) // ids use all 63 bits
		big.PriceCents = maxPriceCents - 1
		big.CreatedMs, big.UpdatedMs = base, base
		rows := []Row{row(1, "p1", "alice", 1), row(2, "p1", "alice", 2), big, row(3, "p2", "carol", 1)}
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			got, ok, err := s.Get(ctx, r.ProductID, r.ID)
			if err != nil || !ok {
				t.Fatalf("get %d: %v %v", r.ID, ok, err)
			}
			same(t, got, r)
		}
		if _, ok, err := s.Get(ctx, "p2", 1); ok || err != nil {
			t.Fatalf("order 1 is p1's, not p2's: %v %v", ok, err)
		}
		totals(t, s, "p1", Totals{UnpaidOrders: 3, UnpaidUnits: 5, MaxUser: "alice", MaxUserUnits: 3})
		totals(t, s, "p2", Totals{UnpaidOrders: 1, UnpaidUnits: 1, MaxUser: "carol", MaxUserUnits: 1})
		totals(t, s, "nope", Totals{})
		ps, err := s.Products(ctx)
		if err != nil || !reflect.DeepEqual(ps, []string{"p1", "p2"}) {
			t.Fatalf("products %v %v", ps, err)
		}
	})

	t.Run("RedeliveredEventIsOneRow", func(t *testing.T) {
		s, _ := open(t)
		r := row(10, "p1", "u", 1)
		// Twice in one batch and once more in another: kafka-go retries.
		if err := s.Insert(ctx, []Row{r, r}); err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(ctx, []Row{r}); err != nil {
			t.Fatal(err)
		}
		totals(t, s, "p1", Totals{UnpaidOrders: 1, UnpaidUnits: 1, MaxUser: "u", MaxUserUnits: 1})
	})

	t.Run("ReleaseReplacesOrderOnce", func(t *testing.T) {
		s, _ := open(t)
		e := order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
			ID: 20, ProductID: "p1", UserID: "u", Qty: 2, PriceCents: 100, CreatedMs: base, Edge: 1,
		}}
		placed := FromEvent(&e)
		e.Type, e.ReleasedMs = order.TypeRelease, base+5000
		rel := FromEvent(&e)
		if rel.Status != StatusCancelled || rel.UpdatedMs != base+5000 {
			t.Fatalf("release row %+v", rel)
		}
		for _, batch := range [][]Row{{placed}, {rel}, {rel}, {placed}} { // the order re-sent after its release
			if err := s.Insert(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		got, ok, err := s.Get(ctx, "p1", 20)
		if err != nil || !ok || got.Status != StatusCancelled {
			t.Fatalf("get: %+v %v %v", got, ok, err)
		}
		totals(t, s, "p1", Totals{CancelledOrders: 1, CancelledUnits: 2})

		// A release without releasedMs still beats its order.
		e.ID, e.ReleasedMs = 21, 0
		rel = FromEvent(&e)
		e.Type = order.TypeOrder
		if err := s.Insert(ctx, []Row{rel, FromEvent(&e)}); err != nil {
			t.Fatal(err)
		}
		totals(t, s, "p1", Totals{CancelledOrders: 2, CancelledUnits: 4})
	})

	t.Run("InvalidRowsAreRefused", func(t *testing.T) {
		s, _ := open(t)
		for _, mut := range []func(*Row){
			func(r *Row) { r.ID = 0 },
			func(r *Row) { r.PriceCents = maxPriceCents },
			func(r *Row) { r.Status = 3 },
			func(r *Row) { r.Edge = 70000 },
			func(r *Row) { r.ProductID = "" },
			func(r *Row) { r.Expired = true },                            // expired but not released
			func(r *Row) { r.PaidMs = r.CreatedMs },                      // a pay time on an unpaid row
			func(r *Row) { r.Status, r.PaidMs = StatusPaid, -1000 },      // before 1970
			func(r *Row) { r.PayByMs = r.CreatedMs },                     // the deadline at creation
			func(r *Row) { r.Status, r.PaidMs = StatusPaid, 1<<33*1000 }, // beyond DateTime
		} {
			r := row(30, "p1", "u", 1)
			mut(&r)
			if err := s.Insert(ctx, []Row{row(31, "p1", "u", 1), r}); !errors.Is(err, ErrInvalidRow) {
				t.Errorf("insert %+v: %v, want ErrInvalidRow", r, err)
			}
		}
		totals(t, s, "p1", Totals{}) // nothing of a refused batch is stored
	})

	t.Run("PayLifecycle", func(t *testing.T) {
		s, reopen := open(t)
		ev := func(id int64, u string, qty int, payBy int64) order.Event {
			return order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
				ID: id, ProductID: "pp", UserID: u, Qty: qty, PriceCents: 100, CreatedMs: base, Edge: 2, PayByMs: payBy}}
		}
		settle := func(e order.Event, typ, reason string, at int64) Row {
			e.Type, e.Reason = typ, reason
			if typ == order.TypePaid {
				e.PaidMs = at
			} else {
				e.ReleasedMs = at
			}
			return FromEvent(&e)
		}
		o1, o2, o3 := ev(1, "ann", 1, base+60_000), ev(2, "bob", 2, base+60_000), ev(3, "cid", 3, base+5_000)
		o4, o5, o6 := ev(4, "dan", 1, base+60_000), ev(5, "ann", 2, 0), ev(6, "eve", 1, base+30_000)
		paid := settle(o2, order.TypePaid, "", base+4_321)
		if paid.Status != StatusPaid || paid.PaidMs != base+4_321 || paid.PayByMs != base+60_000 {
			t.Fatalf("paid row %+v", paid)
		}
		expired := settle(o3, order.TypeRelease, order.ReasonExpired, base+5_010)
		cancelled := settle(o4, order.TypeRelease, "", base+100) // a release from before reasons: a cancel
		if !expired.Expired || expired.Status != StatusCancelled || cancelled.Expired {
			t.Fatalf("release rows %+v %+v", expired, cancelled)
		}
		// The settlements first, their orders re-sent after them: the
		// settlements still win.
		for _, batch := range [][]Row{{paid, expired}, {cancelled, FromEvent(&o1)}, {FromEvent(&o2), FromEvent(&o3), FromEvent(&o4)},
			{FromEvent(&o5), FromEvent(&o6), paid}} {
			if err := s.Insert(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		check := func(s Store) {
			t.Helper()
			totals(t, s, "pp", Totals{UnpaidOrders: 3, UnpaidUnits: 4, PaidOrders: 1, PaidUnits: 2, CancelledOrders: 1, CancelledUnits: 1,
				ExpiredOrders: 1, ExpiredUnits: 3, MaxUser: "ann", MaxUserUnits: 3})
			got, ok, err := s.Get(ctx, "pp", 2)
			if err != nil || !ok || got.Status != StatusPaid || got.PaidMs/1000 != (base+4_321)/1000 || got.PayByMs != base+60_000 {
				t.Errorf("paid order: %+v %v %v", got, ok, err)
			}
			got, ok, err = s.Get(ctx, "pp", 3)
			if err != nil || !ok || got.Status != StatusCancelled || !got.Expired || got.PaidMs != 0 {
				t.Errorf("expired order: %+v %v %v", got, ok, err)
			}
			due, err := s.Deadlines(ctx, "pp")
			if err != nil || len(due) != 2 || due[0].ID != 6 || due[1].ID != 1 || due[0].PayByMs != base+30_000 || due[1].UserID != "ann" {
				t.Errorf("deadlines %+v %v, want orders 6 then 1", due, err)
			}
			if due, err := s.Deadlines(ctx, "nope"); err != nil || len(due) != 0 {
				t.Errorf("deadlines of an unknown product %+v %v", due, err)
			}
			st, err := s.Statuses(ctx, "pp", []int64{1, 2, 3, 4, 5, 99})
			want := map[int64]OrderStatus{
				1: {Status: StatusUnpaid, PayByMs: base + 60_000},
				2: {Status: StatusPaid, PayByMs: base + 60_000, PaidMs: st[2].PaidMs},
				3: {Status: StatusCancelled, Expired: true, PayByMs: base + 5_000},
				4: {Status: StatusCancelled, PayByMs: base + 60_000},
				5: {Status: StatusUnpaid},
			}
			if err != nil || !reflect.DeepEqual(st, want) || st[2].PaidMs/1000 != (base+4_321)/1000 {
				t.Errorf("statuses\n got %+v %v\nwant %+v", st, err, want)
			}
			b, err := s.Buyers(ctx, "pp")
			if err != nil || !reflect.DeepEqual(b, map[string]int64{"ann": 3, "bob": 2, "eve": 1}) {
				t.Errorf("buyers (unpaid and paid) %v %v", b, err)
			}
		}
		check(s)
		if reopen != nil {
			check(reopen())
		}
	})

	t.Run("SettledPages", func(t *testing.T) {
		s, reopen := open(t)
		ev := func(id int64, p string, payBy int64) order.Event {
			return order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
				ID: id, ProductID: p, UserID: "u" + fmt.Sprint(id), Qty: int(id), PriceCents: 100, CreatedMs: base, Edge: 1, PayByMs: payBy}}
		}
		settled := func(e order.Event, typ, reason string) Row {
			e.Type, e.Reason = typ, reason
			if typ == order.TypePaid {
				e.PaidMs = base + 2_000
			} else {
				e.ReleasedMs = base + 3_000
			}
			return FromEvent(&e)
		}
		o := make([]order.Event, 8)
		for id := int64(1); id < 8; id++ {
			o[id] = ev(id, "ps", 0)
		}
		o[4].PayByMs, o[7].ProductID = base+5_000, "px"
		rows := []Row{FromEvent(&o[1]), settled(o[2], order.TypePaid, ""), settled(o[3], order.TypeRelease, ""),
			settled(o[4], order.TypeRelease, order.ReasonExpired), settled(o[5], order.TypePaid, ""),
			settled(o[6], order.TypeRelease, ""), settled(o[7], order.TypePaid, "")}
		// The settlements first; the orders re-sent after them lose.
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(ctx, []Row{FromEvent(&o[2]), FromEvent(&o[6]), FromEvent(&o[3])}); err != nil {
			t.Fatal(err)
		}
		check := func(s Store) {
			t.Helper()
			var ids []int64
			pages := 0
			for after := int64(0); ; pages++ {
				page, err := s.Settled(ctx, "ps", after, 2)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > 2 {
					t.Fatalf("page of %d rows, limit 2", len(page))
				}
				for _, r := range page {
					ids = append(ids, r.ID)
					want := rows[r.ID-1]
					if r.Status != want.Status || r.Expired != want.Expired || r.PaidMs/1000 != want.PaidMs/1000 ||
						r.PayByMs != want.PayByMs || r.UserID != want.UserID || r.Qty != want.Qty {
						t.Errorf("settled row %+v, want %+v", r, want)
					}
				}
				if len(page) < 2 {
					break
				}
				after = page[len(page)-1].ID
			}
			if !reflect.DeepEqual(ids, []int64{2, 3, 4, 5, 6}) || pages != 2 {
				t.Errorf("settled ids %v in %d full pages, want 2..6 (order 1 unpaid, 7 another product's) in 2", ids, pages)
			}
			if page, err := s.Settled(ctx, "nope", 0, 10); err != nil || len(page) != 0 {
				t.Errorf("settled of an unknown product %+v %v", page, err)
			}
			if _, err := s.Settled(ctx, "ps", 0, 0); err == nil {
				t.Error("a page of 0 rows was accepted")
			}
			// Rows: every status, the newest row of each order.
			all, err := s.Rows(ctx, "ps", 0, 100)
			var statuses []uint8
			for _, r := range all {
				statuses = append(statuses, r.Status)
			}
			if err != nil || len(all) != 6 || all[0].ID != 1 || !reflect.DeepEqual(statuses, []uint8{0, 1, 2, 2, 1, 2}) {
				t.Errorf("rows %v (statuses %v), want orders 1..6 with their final statuses", err, statuses)
			}
			if page, err := s.Rows(ctx, "ps", 4, 1); err != nil || len(page) != 1 || page[0].ID != 5 {
				t.Errorf("rows after 4, limit 1: %+v %v", page, err)
			}
		}
		check(s)
		if reopen != nil {
			check(reopen())
		}
	})

	t.Run("BuyersAndStatuses", func(t *testing.T) {
		s, reopen := open(t)
		e := order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
			ID: 43, ProductID: "p1", UserID: "bob", Qty: 2, PriceCents: 100, CreatedMs: base, Edge: 1,
		}}
		placed := FromEvent(&e)
		e.Type, e.ReleasedMs = order.TypeRelease, base+10
		rows := []Row{row(40, "p1", "alice", 1), row(41, "p1", "alice", 2), row(42, "p1", "bob", 1),
			placed, FromEvent(&e), // bob's second order, released
			row(44, "p1", "carol", 3), row(45, "p2", "alice", 5), row(41, "p1", "alice", 2)}
		rel := row(44, "p1", "carol", 3) // carol's only order, released: she holds nothing
		rel.Status, rel.UpdatedMs = StatusCancelled, rel.UpdatedMs+1
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(ctx, []Row{rel}); err != nil {
			t.Fatal(err)
		}
		check := func(s Store) {
			t.Helper()
			b, err := s.Buyers(ctx, "p1")
			if err != nil || !reflect.DeepEqual(b, map[string]int64{"alice": 3, "bob": 1}) {
				t.Errorf("buyers p1 %v %v", b, err)
			}
			if b, err := s.Buyers(ctx, "nope"); err != nil || len(b) != 0 {
				t.Errorf("buyers of an unknown product %v %v", b, err)
			}
			st, err := s.Statuses(ctx, "p1", []int64{40, 43, 44, 45, 99})
			want := map[int64]OrderStatus{40: {Status: StatusUnpaid}, 43: {Status: StatusCancelled}, 44: {Status: StatusCancelled}}
			if err != nil || !reflect.DeepEqual(st, want) { // 45 is p2's, 99 unknown
				t.Errorf("statuses %v %v, want %v", st, err, want)
			}
			if st, err := s.Statuses(ctx, "p1", nil); err != nil || len(st) != 0 {
				t.Errorf("statuses of nothing %v %v", st, err)
			}
		}
		check(s)
		if reopen != nil {
			check(reopen())
		}
	})

	t.Run("ManyStatuses", func(t *testing.T) {
		s, _ := open(t)
		var rows []Row
		var ids []int64
		for i := range 12000 { // more than one IN list of the ClickHouse store
			if i%3 == 0 {
				rows = append(rows, row(int64(1000+i), "p4", "u", 1))
			}
			ids = append(ids, int64(1000+i))
		}
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		st, err := s.Statuses(ctx, "p4", ids)
		if err != nil || len(st) != len(rows) {
			t.Fatalf("statuses: %d of %d, %v", len(st), len(rows), err)
		}
	})

	t.Run("ManyRows", func(t *testing.T) {
		s, reopen := open(t)
		var rows []Row
		for i := range 5000 {
			rows = append(rows, row(int64(100+i), "p3", fmt.Sprintf("u%d", i%100), 1+i%2))
		}
		for lo := 0; lo < len(rows); lo += 1000 {
			if err := s.Insert(ctx, rows[lo:lo+1000]); err != nil {
				t.Fatal(err)
			}
		}
		want := Totals{UnpaidOrders: 5000, UnpaidUnits: 7500, MaxUser: "u1", MaxUserUnits: 100}
		totals(t, s, "p3", want)
		if reopen != nil {
			s = reopen()
			totals(t, s, "p3", want)
		}
	})

	t.Run("Catalog", func(t *testing.T) {
		s, reopen := open(t)
		act := func(p, js string, v int64) CatalogRecord {
			return CatalogRecord{ProductID: p, Kind: KindActivity, Activity: js, Version: v, UpdatedMs: base + v}
		}
		restock := func(p string, id, units, v int64) CatalogRecord {
			return CatalogRecord{ProductID: p, Kind: KindRestock, ID: id, Units: units, Version: v, UpdatedMs: base + v}
		}
		degrade := func(p string, on bool, v int64) CatalogRecord {
			return CatalogRecord{ProductID: p, Kind: KindDegrade, On: on, Version: v, UpdatedMs: base + v}
		}
		if recs, err := s.ReadCatalog(ctx, ""); err != nil || len(recs) != 0 {
			t.Fatalf("empty catalogue: %v %v", recs, err)
		}
		puts := [][]CatalogRecord{
			{act("c1", `{"v":1}`, 10), restock("c1", 7, 5, 11)},
			{act("c1", `{"v":2}`, 20), act("c1", `{"v":2}`, 20)},                        // written twice: one record
			{act("c1", `{"v":0}`, 5)},                                                   // an older version changes nothing
			{restock("c1", 8, 3, 21), restock("c1", 9, 4, 22), restock("c1", 9, 0, 23)}, // 9 withdrawn
			{degrade("c2", true, 30), degrade(AllProducts, true, 31), degrade(AllProducts, false, 32)},
		}
		for _, recs := range puts {
			if err := s.PutCatalog(ctx, recs...); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]CatalogEntry{
			"c1":        {Activity: `{"v":2}`, ActivityVersion: 20, Restocked: 8, Restocks: 2},
			"c2":        {Degraded: true, DegradeVersion: 30},
			AllProducts: {DegradeVersion: 32},
		}
		check := func(s Store) {
			t.Helper()
			recs, err := s.ReadCatalog(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := Entries(recs); !reflect.DeepEqual(got, want) {
				t.Errorf("entries\n got %+v\nwant %+v", got, want)
			}
			if len(recs) != 6 || recs[0].ProductID != AllProducts || recs[1].Kind != KindActivity || recs[1].UpdatedMs/1000 != (base+20)/1000 {
				t.Errorf("records (sorted by product, kind, id) %+v", recs)
			}
			one, err := s.ReadCatalog(ctx, "c1")
			if err != nil || len(one) != 4 || Entries(one)["c1"] != want["c1"] {
				t.Errorf("c1's records %+v %v", one, err)
			}
		}
		check(s)
		if reopen != nil {
			check(reopen())
		}
	})

	t.Run("InvalidCatalogRecordsAreRefused", func(t *testing.T) {
		s, _ := open(t)
		for _, r := range []CatalogRecord{
			{ProductID: "bad id", Kind: KindActivity, Activity: "{}", Version: 1},
			{ProductID: AllProducts, Kind: KindActivity, Activity: "{}", Version: 1}, // "*" only switches
			{ProductID: "c1", Kind: KindActivity, Version: 1},                        // no document
			{ProductID: "c1", Kind: KindRestock, ID: 0, Units: 1, Version: 1},
			{ProductID: "c1", Kind: KindRestock, ID: 1, Units: -1, Version: 1},
			{ProductID: "c1", Kind: 9, Version: 1},
			{ProductID: "c1", Kind: KindDegrade, Version: -1},
		} {
			ok := CatalogRecord{ProductID: "c1", Kind: KindDegrade, On: true, Version: 1}
			if err := s.PutCatalog(ctx, ok, r); !errors.Is(err, ErrInvalidRecord) {
				t.Errorf("put %+v: %v, want ErrInvalidRecord", r, err)
			}
		}
		if recs, err := s.ReadCatalog(ctx, ""); err != nil || len(recs) != 0 {
			t.Fatalf("a refused call stored %+v %v", recs, err)
		}
	})
}
