package stock

import (
	"context"
	"strings"
	"testing"

	"flashgate/internal/redistest"
)

func settle(t *testing.T, s *Store, a *Attempt, fence bool) Verdict {
	t.Helper()
	v, err := s.ResolveUnknown(context.Background(), a, fence)
	if err != nil {
		t.Fatalf("ResolveUnknown(%d, fence %v): %v", a.ID, fence, err)
	}
	return v
}

// TestSettleUnknownFencesALateDeduction: an attempt settled as not placed
// can no longer happen, even if its deduction reaches Redis afterwards (a
// paused Redis runs what it had received when it resumes); its order reads
// failed, for the shopper's result call.
func TestSettleUnknownFencesALateDeduction(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		s, _ := openReal(t, Options{})
		fencesALateDeduction(t, s)
	})
	t.Run("embedded", func(t *testing.T) { fencesALateDeduction(t, openEmbedded(t, Options{})) })
}

func fencesALateDeduction(t *testing.T, s *Store) {
	warm(t, s, "fu", 10, 1)
	a := attempt("fu", "late", 1, 1)
	if v := settle(t, s, &a, false); v != Absent {
		t.Fatalf("look at an attempt never deducted: %v, want absent", v)
	}
	if o, ok, _ := s.OrderState(context.Background(), "fu", a.ID); ok {
		t.Fatalf("looking wrote an order: %+v", o)
	}
	if v := settle(t, s, &a, true); v != NotPlaced {
		t.Fatalf("fence: %v, want not placed", v)
	}
	if v := settle(t, s, &a, true); v != NotPlaced {
		t.Fatalf("fence again (a retried settle): %v, want not placed", v)
	}
	if v := settle(t, s, &a, false); v != NotPlaced {
		t.Fatalf("look after the fence: %v, want not placed", v)
	}
	out := mustDeduct(t, s, a) // the late deduction
	if out.Code != BadToken {
		t.Fatalf("deduction after the fence: %v, want BAD_TOKEN", out.Code)
	}
	if n := remaining(t, s, "fu"); n != 10 {
		t.Fatalf("stock %d after a fenced deduction, want 10", n)
	}
	o, ok, err := s.OrderState(context.Background(), "fu", a.ID)
	if err != nil || !ok || o.State != StateFailed || o.UserID != "late" || o.Qty != 1 || o.PriceCents != a.PriceCents {
		t.Fatalf("fenced order: %+v %v %v; want failed, the attempt's user, qty and price", o, ok, err)
	}
	if ttl := pttl(t, s, orderHome(t, s, "fu", a.ID)); ttl <= 0 {
		t.Fatalf("fenced order TTL %d, want one", ttl)
	}
	if ok, ttl := tokenMark(t, s, a); !ok || ttl < s.opts.OrderTTL.Milliseconds()/2 {
		t.Fatalf("fence token TTL %d ms, want about order_ttl (%v)", ttl, s.opts.OrderTTL)
	}
}

// The deduction ran first: placed, whatever its answer was lost to. One
// that was refused (limit) left nothing, and is fenced like one that never
// ran.
func TestSettleUnknownAfterTheDeduction(t *testing.T) {
	s, _ := openReal(t, Options{})
	warm(t, s, "fd", 10, 1)
	a := attempt("fd", "ran", 1, 1)
	if out := mustDeduct(t, s, a); out.Code != OK {
		t.Fatalf("deduct: %v", out.Code)
	}
	for _, fence := range []bool{false, true} {
		if v := settle(t, s, &a, fence); v != Placed {
			t.Fatalf("settle (fence %v) an order that was deducted: %v, want placed", fence, v)
		}
	}
	if o, _, _ := s.OrderState(context.Background(), "fd", a.ID); o.State != StatePending {
		t.Fatalf("settling changed a placed order: %+v", o)
	}
	over := attempt("fd", "ran", 1, 1) // the same buyer again: over the limit
	if out := mustDeduct(t, s, over); out.Code != LimitReached {
		t.Fatalf("second purchase: %v, want LIMIT_REACHED", out.Code)
	}
	if v := settle(t, s, &over, false); v != Absent {
		t.Fatalf("look at a refused attempt: %v, want absent", v)
	}
	if v := settle(t, s, &over, true); v != NotPlaced {
		t.Fatalf("fence a refused attempt: %v, want not placed", v)
	}
}

// A Redis that may have forgotten proves nothing by an order's absence:
// settling waits while the stock key is missing, while the sale is closed
// for recovery, and on a server other than the one the meta says was
// verified.
func TestSettleUnknownWaitsOnARedisThatMayHaveForgotten(t *testing.T) {
	s, srv := openReal(t, Options{})
	rd := redistest.Client(t, srv.Addr())
	ctx := context.Background()
	hset := func(f, v string) {
		t.Helper()
		if err := rd.Do(ctx, rd.B().Hset().Key(MetaKey("fw")).FieldValue().FieldValue(f, v).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	hdel := func(f string) {
		t.Helper()
		if err := rd.Do(ctx, rd.B().Hdel().Key(MetaKey("fw")).Field(f).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	a := attempt("fw", "w", 1, 1)
	if v := settle(t, s, &a, true); v != ResolveLater {
		t.Fatalf("no stock key: %v, want later", v)
	}
	warm(t, s, "fw", 10, 1)
	info, err := rd.Do(ctx, rd.B().Info().Section("server").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "run_id:")
	runID, _, _ := strings.Cut(rest, "\r\n")
	if len(runID) != 40 {
		t.Fatalf("run_id %q from INFO", runID)
	}

	hset("recovering", "1")
	if v := settle(t, s, &a, true); v != ResolveLater {
		t.Fatalf("closed for recovery: %v, want later", v)
	}
	hdel("recovering")
	hset("runid", strings.Repeat("0", 40))
	if v := settle(t, s, &a, true); v != ResolveLater {
		t.Fatalf("another server than the one verified: %v, want later", v)
	}
	if o, ok, _ := s.OrderState(ctx, "fw", a.ID); ok {
		t.Fatalf("a refused settle wrote an order: %+v", o)
	}
	hset("runid", runID)
	if v := settle(t, s, &a, true); v != NotPlaced {
		t.Fatalf("on the verified server: %v, want not placed", v)
	}
}

// TestResolveOrphanRefusesItsToken: an orphan (its edge died before it
// settled it; another edge knows only its order id and user) is settled
// failed, and its deduction arriving late is refused: every token
// expiring by the horizon is, while a token minted after still sells. An
// orphan whose order exists is placed, and changes nothing.
func TestResolveOrphanRefusesItsToken(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "or", 10, 1)
	a := attempt("or", "orphan", 1, 1)
	o := Orphan{ProductID: "or", OrderID: a.ID, UserID: "orphan", CoveredMs: a.TokenExpiresMs, TokensFromMs: a.TokenExpiresMs + 1000}
	if v, err := s.ResolveOrphan(ctx, o); err != nil || v != NotPlaced {
		t.Fatalf("orphan never deducted: %v %v, want not placed", v, err)
	}
	if st, ok, err := s.OrderState(ctx, "or", a.ID); err != nil || !ok || st.State != StateFailed || st.UserID != "orphan" {
		t.Fatalf("its order: %+v %v %v, want failed, the caller's user", st, ok, err)
	}
	if out := mustDeduct(t, s, a); out.Code != BadToken {
		t.Fatalf("its late deduction: %v, want BAD_TOKEN", out.Code)
	}
	b := attempt("or", "minted-before", 1, 1)
	b.TokenExpiresMs = o.TokensFromMs
	if out := mustDeduct(t, s, b); out.Code != BadToken {
		t.Fatalf("a token expiring at the horizon: %v, want BAD_TOKEN", out.Code)
	}
	c := attempt("or", "minted-after", 1, 1)
	c.TokenExpiresMs = o.TokensFromMs + 1
	if out := mustDeduct(t, s, c); out.Code != OK {
		t.Fatalf("a token expiring after the horizon: %v, want OK", out.Code)
	}
	placed := Orphan{ProductID: "or", OrderID: c.ID, UserID: "minted-after", CoveredMs: c.TokenExpiresMs, TokensFromMs: c.TokenExpiresMs + 60_000}
	if v, err := s.ResolveOrphan(ctx, placed); err != nil || v != Placed {
		t.Fatalf("orphan whose order exists: %v %v, want placed", v, err)
	}
	d := attempt("or", "later", 1, 1)
	d.TokenExpiresMs = c.TokenExpiresMs + 1
	if out := mustDeduct(t, s, d); out.Code != OK {
		t.Fatalf("a placed orphan moved the horizon: %v, want OK", out.Code)
	}
	if n := remaining(t, s, "or"); n != 8 {
		t.Fatalf("stock %d, want 8", n)
	}
}
