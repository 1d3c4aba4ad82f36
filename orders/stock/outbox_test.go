package stock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"flashgate/orders/order"
)

// TestOutboxIDAndAck: every successful attempt learns the id of the entry
// its deduction wrote (also inside a group-commit batch), rejected ones get
// none, and AckOutbox removes the entry from the stream and from the relay
// group's pending list — on redis-server and on the embedded server.
func TestOutboxIDAndAck(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			var s *Store
			if kind == "real" {
				s, _ = openReal(t, Options{})
			} else {
				s = openEmbedded(t, Options{})
			}
			ctx := context.Background()
			c := s.c
			warm(t, s, "ack", 20, 1)
			key := OutboxKey("ack")
			if err := c.Do(ctx, c.B().XgroupCreate().Key(key).Group(RelayGroup).Id("0").Mkstream().Build()).Error(); err != nil {
				t.Fatal(err)
			}

			// 16 concurrent attempts: most share a script call.
			outs := make([]Outcome, 16)
			orders := make([]int64, 16)
			var wg sync.WaitGroup
			for i := range outs {
				a := attempt("ack", "u"+strconv.Itoa(i), 1, 1)
				orders[i] = a.ID
				wg.Go(func() { outs[i] = mustDeduct(t, s, a) })
			}
			wg.Wait()
			entries, err := c.Do(ctx, c.B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
			if err != nil || len(entries) != 16 {
				t.Fatalf("XRANGE: %d entries, %v", len(entries), err)
			}
			byID := map[string]string{}
			for _, e := range entries {
				byID[e.ID] = e.FieldValues[fieldOrder]
			}
			for i, out := range outs {
				if out.Code != OK || byID[out.OutboxID] != strconv.FormatInt(orders[i], 10) {
					t.Fatalf("attempt %d: %+v, entry holds order %q", i, out, byID[out.OutboxID])
				}
			}
			// A rejected attempt has no entry.
			if out := mustDeduct(t, s, attempt("ack", "u0", 1, 1)); out.Code != LimitReached || out.OutboxID != "" {
				t.Fatalf("rejected: %+v", out)
			}

			// The relay took the first 8 into its pending list.
			if _, err := c.Do(ctx, c.B().Xreadgroup().Group(RelayGroup, "r1").Count(8).Streams().Key(key).Id(">").Build()).AsXRead(); err != nil {
				t.Fatal(err)
			}
			ids := make([]string, 0, 16)
			for _, e := range entries {
				ids = append(ids, e.ID)
			}
			if err := s.AckOutbox(ctx, "ack", ids[:12]...); err != nil {
				t.Fatal(err)
			}
			// Acking again is harmless.
			if err := s.AckOutbox(ctx, "ack", ids[0]); err != nil {
				t.Fatal(err)
			}
			if n, _ := s.OutboxLen(ctx, "ack"); n != 4 {
				t.Errorf("outbox len %d after acking 12 of 16", n)
			}
			pending, err := c.Do(ctx, c.B().Xpending().Key(key).Group(RelayGroup).Start("-").End("+").Count(100).Build()).ToArray()
			if err != nil || len(pending) != 0 {
				t.Errorf("relay pending list after ack: %d entries (%v), want 0", len(pending), err)
			}
			if err := s.AckOutbox(ctx, "bad{id}", ids[0]); err == nil {
				t.Error("AckOutbox accepted an invalid product id")
			}
		})
	}
}

func TestOutboxEntryOrder(t *testing.T) {
	a := attempt("p1", "bob", 2, 5)
	e := OutboxEntry{ID: "1796038487397-0", Fields: map[string]string{
		fieldOrder: strconv.FormatInt(a.ID, 10), fieldProduct: "p1", fieldUser: "bob", fieldQty: "2",
		fieldPrice: "1999", fieldCreated: strconv.FormatInt(a.CreatedMs, 10), fieldNode: "7",
	}}
	o, err := e.Order()
	if err != nil || o != a.Order {
		t.Fatalf("%+v %v, want %+v", o, err, a.Order)
	}
	if tm, ok := e.Time(); !ok || tm.UnixMilli() != 1796038487397 {
		t.Errorf("entry time %v %v", tm, ok)
	}
	if e.RawOrderID() != strconv.FormatInt(a.ID, 10) || e.Deleted() {
		t.Errorf("raw order id %q, deleted %v", e.RawOrderID(), e.Deleted())
	}
	e.Fields[fieldQty] = "x"
	if _, err := e.Order(); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("bad qty: %v, want order.ErrInvalid", err)
	}
}
