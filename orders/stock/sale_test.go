package stock

import (
	"context"
	"errors"
	"strconv"
	"testing"
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
