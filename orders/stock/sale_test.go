package stock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestWarmNeverRaisesStock(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "w", 10, 5)
	for range 3 {
		if out := mustDeduct(t, s, attempt("w", "u"+strconv.FormatInt(orderSeq.Load(), 10), 1, 5)); out.Code != OK {
			t.Fatal(out)
		}
	}
	created, err := s.Warm(ctx, SaleStock{ProductID: "w", Stock: 50, Limit: 2, Price: 500, EndMs: 123})
	if err != nil || created {
		t.Fatalf("second Warm = %v, %v; want false", created, err)
	}
	info, ok, err := s.SaleInfo(ctx, "w")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if info.Remaining != 7 || info.Initial != 10 {
		t.Errorf("after re-warm: remaining %d initial %d, want 7 and 10", info.Remaining, info.Initial)
	}
	if info.Limit != 2 || info.Price != 500 || info.EndMs != 123 {
		t.Errorf("schedule not updated: %+v", info)
	}
	// Warm to a lower number does not lower it either: only scripts move stock.
	if created, _ := s.Warm(ctx, SaleStock{ProductID: "w", Stock: 1, Limit: 2}); created || remaining(t, s, "w") != 7 {
		t.Error("warm changed a live sale's stock")
	}
	if _, err := s.Warm(ctx, SaleStock{ProductID: "w", Stock: -1, Limit: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative stock: %v", err)
	}
}

func TestRestock(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	if _, err := s.Restock(ctx, "rs", 5); !errors.Is(err, ErrNotWarmed) {
		t.Fatalf("restock of an unwarmed sale: %v", err)
	}
	if _, ok, _ := s.Remaining(ctx, "rs"); ok {
		t.Fatal("restock created a stock key")
	}
	warm(t, s, "rs", 2, 5)
	mustDeduct(t, s, attempt("rs", "u", 2, 5))
	if out := mustDeduct(t, s, attempt("rs", "v", 1, 5)); out.Code != SoldOut {
		t.Fatalf("want sold out, got %v", out)
	}
	if n, err := s.Restock(ctx, "rs", 5); err != nil || n != 5 {
		t.Fatalf("Restock = %d, %v", n, err)
	}
	if out := mustDeduct(t, s, attempt("rs", "v", 1, 5)); out.Code != OK || out.Remaining != 4 {
		t.Fatalf("after restock: %+v", out)
	}
	info, _, _ := s.SaleInfo(ctx, "rs")
	if info.Restocked != 5 || info.Initial != 2 {
		t.Errorf("meta %+v", info)
	}
	for _, add := range []int64{0, -3} {
		if _, err := s.Restock(ctx, "rs", add); !errors.Is(err, ErrInvalid) {
			t.Errorf("Restock(%d): %v", add, err)
		}
	}
}

func TestMarkSuccess(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "ms", 10, 5)
	a, b := attempt("ms", "u", 1, 5), attempt("ms", "v", 1, 5)
	mustDeduct(t, s, a)
	mustDeduct(t, s, b)
	for _, want := range []int{2, 0} {
		if n, err := s.MarkSuccess(ctx, "ms", a.ID, b.ID, 1<<61); err != nil || n != want {
			t.Fatalf("MarkSuccess = %d, %v; want %d", n, err, want)
		}
	}
	info, ok, _ := s.OrderState(ctx, "ms", a.ID)
	if !ok || info.State != StateSuccess {
		t.Errorf("%+v", info)
	}
	if _, ok, _ := s.OrderState(ctx, "ms", 1<<61); ok {
		t.Error("unknown order reported")
	}
}

// TestResultStateVerifiesTheServer: ResultState answers a final state as
// read, and a pending or success order verified only on the server the
// sale was verified on — unverified while the sale is fenced, or when the
// meta names another server's run id (a promoted replica, a restart from a
// snapshot), which it then fences with the id given; a verification is
// stamped (and trusted for VerifyTrust). The embedded server has no run id.
func TestResultStateVerifiesTheServer(t *testing.T) {
	ctx := context.Background()
	for _, l := range []struct {
		name string
		opts Options
	}{{"orders", Options{OrderKeys: true}}, {"batches", Options{}}, {"an older edge's hashes", Options{OrderKeys: true, OrderHashes: true}}} {
		t.Run(l.name, func(t *testing.T) {
			s, _ := openReal(t, l.opts)
			const p = "rv"
			warm(t, s, p, 10, 5)
			a, b := attempt(p, "u", 1, 5), attempt(p, "v", 1, 5)
			mustDeduct(t, s, a)
			mustDeduct(t, s, b)
			read := func(id int64) (string, bool) {
				t.Helper()
				o, ok, verified, err := s.ResultState(ctx, p, id, "7:3:runid")
				if err != nil || !ok {
					t.Fatalf("ResultState(%d) = %v, %v", id, ok, err)
				}
				return o.State, verified
			}
			if typ, _ := s.c.Do(ctx, s.c.B().Type().Key(OrderKey(p, a.ID)).Build()).ToString(); l.opts.OrderHashes && typ != "hash" {
				t.Fatalf("the order of an older edge is a %q", typ)
			}
			if st, v := read(a.ID); st != StatePending || !v {
				t.Fatalf("a pending order on its own server: %s, verified %v", st, v)
			}
			if _, ok, _, err := s.ResultState(ctx, p, 1<<61, "x"); ok || err != nil {
				t.Fatalf("an unknown order: %v, %v", ok, err)
			}
			meta := MetaKey(p)
			stamp, err := s.c.Do(ctx, s.c.B().Hget().Key(meta).Field("verified").Build()).AsInt64()
			if err != nil || stamp == 0 {
				t.Fatalf("no verification stamped: %d, %v", stamp, err)
			}
			if _, err := s.MarkSuccess(ctx, p, a.ID, b.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Pay(ctx, p, b.ID, "", time.Minute); err != nil {
				t.Fatal(err)
			}
			// Another server's run id in the meta, as a promoted replica
			// holds it, with a stamp from the past.
			if err := s.c.Do(ctx, s.c.B().Hset().Key(meta).FieldValue().FieldValue("runid", "0123abcd").FieldValue("verified", "1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if st, v := read(b.ID); st != StatePaid || !v {
				t.Errorf("a paid order: %s, verified %v; a final state is answered as read", st, v)
			}
			if info, _, _ := s.SaleInfo(ctx, p); info.Fence != "" {
				t.Fatalf("reading a final state fenced the sale: %q", info.Fence)
			}
			if st, v := read(a.ID); st != StateSuccess || v {
				t.Fatalf("a success order on another server: %s, verified %v", st, v)
			}
			if info, _, _ := s.SaleInfo(ctx, p); info.Fence != "7:3:runid" {
				t.Fatalf("the sale's fence after the read: %q, want the one given", info.Fence)
			}
			if out := mustDeduct(t, s, attempt(p, "w", 1, 5)); out.Code != Recovering {
				t.Errorf("a purchase on the fenced sale: %v", out.Code)
			}
			// Fenced: unverified whatever the run id (the rebuild corrects
			// the states, then names this server).
			if err := s.c.Do(ctx, s.c.B().Hdel().Key(meta).Field("runid").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if _, v := read(a.ID); v {
				t.Fatal("a success order of a fenced sale read verified")
			}
		})
	}
	t.Run("embedded", func(t *testing.T) {
		s := openEmbedded(t, Options{})
		warm(t, s, "re", 10, 5)
		a := attempt("re", "u", 1, 5)
		mustDeduct(t, s, a)
		if o, ok, v, err := s.ResultState(ctx, "re", a.ID, "x"); err != nil || !ok || !v || o.State != StatePending || o.UserID != "u" {
			t.Fatalf("embedded: %+v %v %v %v", o, ok, v, err)
		}
	})
}

// TestMarkSuccessCallArgs: the ids' arguments, slices of one string, are
// each id's decimal text, each followed by its bucket's position.
func TestMarkSuccessCallArgs(t *testing.T) {
	ids := []int64{1, 120850008860790784, 42, 120850008860790785, 9, 1<<63 - 1}
	_, args := markSuccessCall("p1", ids)
	if len(args) != 2+2*len(ids) {
		t.Fatalf("%d arguments for %d ids", len(args), len(ids))
	}
	for k, id := range ids {
		if got := args[2+2*k]; got != strconv.FormatInt(id, 10) {
			t.Errorf("id %d: argument %q", id, got)
		}
	}
}
