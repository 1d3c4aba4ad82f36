package stock

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"flashgate/internal/await"
)

// The embedded miniredis runs the same scripts: a short version of the
// real-server suite.
func TestEmbedded(t *testing.T) {
	s := openEmbedded(t, Options{})
	if !s.Embedded() {
		t.Fatal("not embedded")
	}
	t.Run("no oversell", func(t *testing.T) {
		runNoOversell(t, s, "emb", 1, 1, 1, 16, 100)
	})
	t.Run("codes", func(t *testing.T) {
		warm(t, s, "ec", 3, 2)
		a := attempt("ec", "bob", 1, 2)
		if out := mustDeduct(t, s, a); out.Code != OK || out.Remaining != 2 {
			t.Fatalf("%+v", out)
		}
		replay := attempt("ec", "carol", 1, 2)
		replay.TokenNonceHex = a.TokenNonceHex
		for _, tc := range []struct {
			a    Attempt
			want Code
		}{
			{replay, BadToken},
			{attempt("ec", "bob", 2, 2), LimitReached},
			{attempt("ec", "dave", 3, 5), SoldOut},
			{attempt("ec-nowarm", "bob", 1, 2), NotReady},
		} {
			if out := mustDeduct(t, s, tc.a); out.Code != tc.want {
				t.Errorf("%+v: %v, want %v", tc.a, out.Code, tc.want)
			}
		}
	})
	t.Run("warm, restock, release", func(t *testing.T) {
		ctx := context.Background()
		warm(t, s, "ew", 10, 5)
		a := attempt("ew", "u", 3, 5)
		mustDeduct(t, s, a)
		if created, _ := s.Warm(ctx, SaleStock{ProductID: "ew", Stock: 100, Limit: 5}); created || remaining(t, s, "ew") != 7 {
			t.Fatal("warm raised live stock")
		}
		if n, err := s.Restock(ctx, "ew", 3); err != nil || n != 10 {
			t.Fatalf("Restock = %d, %v", n, err)
		}
		for _, want := range []bool{true, false} {
			if got, err := s.Release(ctx, "ew", a.ID); err != nil || got != want {
				t.Fatalf("Release = %v, %v; want %v", got, err, want)
			}
		}
		if r := remaining(t, s, "ew"); r != 13 {
			t.Errorf("remaining %d, want 13", r)
		}
		if ttl := pttl(t, s, BuyerKey("ew", "u")); ttl != -2 { // count back to 0: key deleted
			t.Errorf("buyer key PTTL %d", ttl)
		}
	})
	t.Run("broadcast", func(t *testing.T) {
		testBroadcast(t, s, s, nil)
	})
}

func TestEmbeddedDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(ctx, "", testOptions(Options{DataDir: dir}))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, s, "pd", 10, 5)
	var orders []Attempt
	for i := range 3 {
		a := attempt("pd", "u"+strconv.Itoa(i), 2, 5)
		mustDeduct(t, s, a)
		orders = append(orders, a)
	}
	// An order with a deadline, stored: its deadline survives the restart.
	due := attempt("pd", "due", 1, 5)
	due.PayByMs = due.CreatedMs + 3_600_000
	mustDeduct(t, s, due)
	s.MarkSuccess(ctx, "pd", due.ID)
	if ok, _ := s.Release(ctx, "pd", orders[2].ID); !ok {
		t.Fatal("release")
	}
	s.MarkSuccess(ctx, "pd", orders[1].ID)
	// A key outside sk:* is not the stock package's and is not kept.
	s.c.Do(ctx, s.c.B().Set().Key("other").Value("x").Build())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotFile)); err != nil {
		t.Fatal(err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}

	s2 := openEmbedded(t, Options{DataDir: dir})
	if r := remaining(t, s2, "pd"); r != 5 {
		t.Errorf("remaining %d after restart, want 5", r)
	}
	if n, _ := s2.OutboxLen(ctx, "pd"); n != 5 {
		t.Errorf("outbox %d entries, want 5 (four orders, one release)", n)
	}
	if ds, n, err := s2.NextDeadlines(ctx, "pd", 5); err != nil || n != 1 || ds[0].OrderID != due.ID || ds[0].PayByMs != due.PayByMs {
		t.Errorf("deadlines after restart %+v %d %v", ds, n, err)
	}
	for i, want := range []string{StatePending, StateSuccess, StateReleased} {
		info, ok, err := s2.OrderState(ctx, "pd", orders[i].ID)
		if err != nil || !ok || info.State != want || info.Qty != 2 {
			t.Errorf("order %d: %+v %v %v, want %s", i, info, ok, err, want)
		}
	}
	if n, _ := s2.Bought(ctx, "pd", "u0"); n != 2 {
		t.Errorf("bought %d", n)
	}
	if ok, ttl := buyerStored(t, s2, "pd", "u0"); !ok || ttl <= 0 {
		t.Errorf("buyer TTL lost across restart: %d", ttl)
	}
	info, _, _ := s2.SaleInfo(ctx, "pd")
	if info.Initial != 10 || info.Released != 2 {
		t.Errorf("meta %+v", info)
	}
	// The used token is still used; a second warm still cannot raise stock.
	replay := attempt("pd", "new", 1, 5)
	replay.TokenNonceHex = orders[0].TokenNonceHex
	if out := mustDeduct(t, s2, replay); out.Code != BadToken {
		t.Errorf("token replay after restart: %v", out.Code)
	}
	if created, _ := s2.Warm(ctx, SaleStock{ProductID: "pd", Stock: 10, Limit: 5}); created {
		t.Error("warm after restart recreated the sale")
	}
	if out := mustDeduct(t, s2, attempt("pd", "new", 1, 5)); out.Code != OK || out.Remaining != 4 {
		t.Errorf("deduct after restart: %+v", out)
	}
	if v, _ := s2.c.Do(ctx, s2.c.B().Exists().Key("other").Build()).AsInt64(); v != 0 {
		t.Error("non-sk key was persisted")
	}
}

func TestEmbeddedWithoutDataDirForgets(t *testing.T) {
	s := openEmbedded(t, Options{})
	warm(t, s, "f", 10, 1)
	s.Close()
	s2 := openEmbedded(t, Options{})
	if out := mustDeduct(t, s2, attempt("f", "u", 1, 1)); out.Code != NotReady {
		t.Fatalf("%v, want NOT_READY", out.Code)
	}
}

func TestEmbeddedBadSnapshot(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, snapshotFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(context.Background(), "", testOptions(Options{DataDir: dir})); err == nil {
		s.Close()
		t.Fatal("a corrupt snapshot must fail Open, not start an empty sale")
	}
}

// miniredis only expires keys when told time passed; the Store's clock
// makes TTLs real, so a used token becomes usable again once it expired.
func TestEmbeddedTTLsCountDown(t *testing.T) {
	s := openEmbedded(t, Options{})
	warm(t, s, "ttl", 100, 100)
	a := attempt("ttl", "u", 1, 100)
	a.TokenExpiresMs = a.CreatedMs + 300
	if out := mustDeduct(t, s, a); out.Code != OK {
		t.Fatal(out)
	}
	await.Until(t, 10*time.Second, "the condition", func() bool {
		b := attempt("ttl", "u", 1, 100)
		b.TokenNonceHex = a.TokenNonceHex
		return mustDeduct(t, s, b).Code == OK
	})
}
