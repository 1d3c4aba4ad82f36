package stock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/orders/order"
)

// TestOutboxIDAndAck: every successful attempt learns the id of the entry
// its deduction wrote (also inside a group-commit batch), rejected ones get
// none, and AckOutbox removes the entry from the stream and from the relay
// group's pending list — on redis-server and on the embedded server. The
// per-order ledger; TestOutboxBatchEntryAndAck is ledger "b"'s.
func TestOutboxIDAndAck(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			var s *Store
			if kind == "real" {
				s, _ = openReal(t, Options{OrderKeys: true})
			} else {
				s = openEmbedded(t, Options{OrderKeys: true})
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

// relayConsumers is XINFO CONSUMERS of the relay group: name -> pending
// entries and idle ms.
func relayConsumers(t testing.TB, s *Store, product string) map[string][2]int64 {
	t.Helper()
	arr, err := s.c.Do(context.Background(), s.c.B().XinfoConsumers().Key(OutboxKey(product)).Group(RelayGroup).Build()).ToArray()
	if err != nil {
		t.Fatalf("XINFO CONSUMERS: %v", err)
	}
	out := map[string][2]int64{}
	for i := range arr {
		m, err := arr[i].AsMap()
		if err != nil {
			t.Fatalf("XINFO CONSUMERS entry: %v", err)
		}
		nm, pm, im := m["name"], m["pending"], m["idle"]
		name, _ := nm.ToString()
		pending, _ := pm.AsInt64()
		idle, _ := im.AsInt64()
		out[name] = [2]int64{pending, idle}
	}
	return out
}

// TestForgetDeadRelays: a consumer that took entries and went silent (a
// dead edge) is not removed while it holds pending entries, however long
// it has been idle; once a live relay claimed and acknowledged them it is.
// A consumer whose XINFO idle time is past the bound but that keeps
// reading the outbox (a live relay on a quiet outbox: Redis 7.0 restarts
// idle only when a consumer is handed entries) is left alone, and so is
// the caller itself.
func TestForgetDeadRelays(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			var s *Store
			if kind == "real" {
				s, _ = openReal(t, Options{})
			} else {
				s = openEmbedded(t, Options{})
			}
			ctx := context.Background()
			const p = "forget"
			const bound = 300 * time.Millisecond
			warm(t, s, p, 20, 1)
			if err := s.CreateRelayGroup(ctx, p); err != nil {
				t.Fatal(err)
			}
			take := func(consumer string, keepAlive time.Duration) int {
				t.Helper()
				n, err := s.TakeOutbox(ctx, p, consumer, 10, keepAlive)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			forget := func() []string {
				t.Helper()
				gone, err := s.ForgetDeadRelays(ctx, p, "self", bound)
				if err != nil {
					t.Fatal(err)
				}
				return gone
			}
			deductN := func(n int) []string {
				t.Helper()
				var ids []string
				for range n {
					ids = append(ids, mustDeduct(t, s, attempt(p, "u"+strconv.FormatInt(time.Now().UnixNano(), 36), 1, 1)).OutboxID)
				}
				return ids
			}

			// The dead edge: takes three entries, heartbeats once, never
			// again. "quiet" takes one, acknowledges it, and goes on
			// reading an empty outbox. "self" takes one too.
			deadIDs := deductN(3)
			if n := take("dead", time.Hour); n != 3 {
				t.Fatalf("dead took %d entries, want 3", n)
			}
			deadAt := time.Now()
			quietIDs := deductN(1)
			if n := take("quiet", bound); n != 1 {
				t.Fatalf("quiet took %d entries", n)
			}
			if err := s.AckOutbox(ctx, p, quietIDs...); err != nil {
				t.Fatal(err)
			}
			selfIDs := deductN(1)
			if n := take("self", bound); n != 1 {
				t.Fatalf("self took %d entries", n)
			}
			if err := s.AckOutbox(ctx, p, selfIDs...); err != nil {
				t.Fatal(err)
			}

			// Wait until XINFO reports all three idle past the bound,
			// quiet reading all along. (miniredis reports no idle time, -1:
			// there the heartbeats alone decide, once the bound passed.)
			await.Until(t, 20*time.Second, "dead, quiet and self to be idle past the bound", func() bool {
				take("quiet", bound)
				c := relayConsumers(t, s, p)
				past := func(name string) bool { return c[name][1] >= bound.Milliseconds() }
				if kind == "embedded" {
					return time.Since(deadAt) >= bound
				}
				return past("dead") && past("self") && past("quiet")
			})
			take("quiet", bound)
			if gone := forget(); len(gone) != 0 {
				t.Fatalf("removed %v: dead still holds 3 entries, quiet reads, self is the caller", gone)
			}
			c := relayConsumers(t, s, p)
			if c["dead"][0] != 3 {
				t.Fatalf("dead's pending entries: %v", c)
			}
			if _, ok := c["self"]; !ok {
				t.Fatalf("the caller removed itself: %v", c)
			}

			// A live relay (which reads, so heartbeats, first, as the relay
			// does every sweep) claims dead's entries and acknowledges them.
			take("live", bound)
			_, claimed, err := s.ClaimOutbox(ctx, p, "live", 0, "0-0", 10)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range claimed {
				ids = append(ids, e.ID)
			}
			if len(ids) < len(deadIDs) {
				t.Fatalf("claimed %v, want at least dead's %v", ids, deadIDs)
			}
			if err := s.AckOutbox(ctx, p, ids...); err != nil {
				t.Fatal(err)
			}
			take("quiet", bound)
			gone := forget()
			if len(gone) != 1 || gone[0] != "dead" {
				t.Fatalf("removed %v, want [dead]", gone)
			}
			c = relayConsumers(t, s, p)
			if _, ok := c["dead"]; ok {
				t.Errorf("dead still in the group: %v", c)
			}
			for _, keep := range []string{"quiet", "self", "live"} {
				if _, ok := c[keep]; !ok {
					t.Errorf("%s was removed: %v", keep, c)
				}
			}
			// Once quiet stops reading too, it goes after the bound.
			await.Until(t, 20*time.Second, "quiet, silent now, to be removed", func() bool {
				for _, g := range forget() {
					if g == "quiet" {
						return true
					}
				}
				return false
			})
			if _, ok := relayConsumers(t, s, p)["self"]; !ok {
				t.Errorf("the caller removed itself")
			}
			if _, err := s.ForgetDeadRelays(ctx, p, "self", 0); err == nil {
				t.Errorf("a zero bound was accepted")
			}
		})
	}
}

func TestOutboxEntryFields(t *testing.T) {
	s, _ := openReal(t, Options{OrderKeys: true})
	warm(t, s, "ob", 5, 5)
	a := attempt("ob", "alice", 2, 5)
	a.PayByMs = a.CreatedMs + 900_000
	if out := mustDeduct(t, s, a); out.Code != OK || out.Remaining != 3 {
		t.Fatalf("outcome %+v", out)
	}
	c := s.c
	entries, err := c.Do(context.Background(), c.B().Xrange().Key(OutboxKey("ob")).Start("-").End("+").Build()).AsXRange()
	if err != nil || len(entries) != 1 {
		t.Fatalf("XRANGE: %v %v", entries, err)
	}
	want := map[string]string{
		fieldOrder: strconv.FormatInt(a.ID, 10), fieldProduct: "ob", fieldUser: "alice", fieldQty: "2",
		fieldPrice: "1999", fieldCreated: strconv.FormatInt(a.CreatedMs, 10), fieldNode: "7",
		fieldPayBy: strconv.FormatInt(a.PayByMs, 10),
	}
	if fmt.Sprint(entries[0].FieldValues) != fmt.Sprint(want) {
		t.Errorf("outbox entry %v, want %v", entries[0].FieldValues, want)
	}
	// The token's hash lives until the end of the bucket it expires in.
	end := (a.TokenExpiresMs/tokenBucketMs + 1) * tokenBucketMs
	if ok, ttl := tokenMark(t, s, a); !ok || ttl <= 50_000 || ttl > end-a.CreatedMs {
		t.Errorf("token mark %v PTTL %d, want from the token's expiry (about 60s) to the end of its bucket", ok, ttl)
	}
	// The buyer hash outlives the sale's end (1h) by BuyerGrace (7d).
	if _, ttl := buyerStored(t, s, "ob", "alice"); ttl < (7*24*time.Hour + 50*time.Minute).Milliseconds() {
		t.Errorf("buyer PTTL %d, want > 7d + sale end", ttl)
	}
}

// TestOutboxBatchEntryAndAck, ledger "b": the successful attempts of one
// script call share one outbox entry that carries all of their orders,
// each learns it as "<entry id>/<orders>", and AckOutbox removes the entry
// with the last of its orders acknowledged (an entry id alone, the relay's,
// removes it at once) — on redis-server and on the embedded server.
func TestOutboxBatchEntryAndAck(t *testing.T) {
	onBothServers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const p = "back"
		warm(t, s, p, 40, 1)
		if !batchedSale(t, s, p) {
			t.Fatal("a sale warmed without OrderKeys is not of ledger b")
		}
		// 24 concurrent attempts: most share a script call.
		outs := make([]Outcome, 24)
		as := make([]Attempt, 24)
		var wg sync.WaitGroup
		for i := range outs {
			as[i] = attempt(p, "u"+strconv.Itoa(i), 1, 1)
			as[i].PayByMs = as[i].CreatedMs + 900_000
			wg.Go(func() { outs[i] = mustDeduct(t, s, as[i]) })
		}
		wg.Wait()
		c := s.c
		entries, err := c.Do(ctx, c.B().Xrange().Key(OutboxKey(p)).Start("-").End("+").Build()).AsXRange()
		if err != nil || len(entries) == 0 || len(entries) >= len(outs) {
			t.Fatalf("XRANGE: %d entries for %d orders, %v: want fewer, not none", len(entries), len(outs), err)
		}
		byEntry := map[string]map[int64]order.Order{}
		for _, e := range entries {
			oe := OutboxEntry{ID: e.ID, Fields: e.FieldValues}
			evs, err := oe.Events()
			if err != nil || !oe.Batch() || len(e.FieldValues) != 2 {
				t.Fatalf("entry %v: %v", e.FieldValues, err)
			}
			m := map[int64]order.Order{}
			for _, ev := range evs {
				m[ev.ID] = ev.Order
			}
			byEntry[e.ID] = m
		}
		shares := map[string][]string{} // entry -> the outcomes' ids
		for i, out := range outs {
			entry, n, _ := strings.Cut(out.OutboxID, "/")
			got, ok := byEntry[entry][as[i].ID]
			if out.Code != OK || !ok || got != as[i].Order || n != strconv.Itoa(len(byEntry[entry])) {
				t.Fatalf("attempt %d: %+v, its entry holds %+v (%v) of %d", i, out, got, ok, len(byEntry[entry]))
			}
			shares[entry] = append(shares[entry], out.OutboxID)
		}
		// Every order readable by id, from its bucket, with its TTL.
		for _, a := range as {
			mustState(t, s, a, StatePending)
			if home := orderHome(t, s, p, a.ID); home != OrderBucketKey(p, a.ID) || pttl(t, s, home) <= 0 {
				t.Fatalf("order %d lives in %s, PTTL %d", a.ID, home, pttl(t, s, home))
			}
		}
		// All of an entry's orders but one acknowledged: it stays; the
		// last removes it. An id given twice counts twice: the edge
		// gives each order's once.
		var big string
		for e, ids := range shares {
			if len(ids) > len(shares[big]) {
				big = e
			}
		}
		ids := shares[big]
		if len(ids) < 2 {
			t.Fatalf("no entry with two orders: %v", shares)
		}
		before, _ := s.OutboxLen(ctx, p)
		if err := s.AckOutbox(ctx, p, ids[:len(ids)-1]...); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.OutboxLen(ctx, p); n != before {
			t.Fatalf("outbox %d entries after all but one order of an entry acknowledged, want %d", n, before)
		}
		if err := s.AckOutbox(ctx, p, ids[len(ids)-1]); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.OutboxLen(ctx, p); n != before-1 {
			t.Fatalf("outbox %d entries after its last order acknowledged, want %d", n, before-1)
		}
		// The relay acknowledges entries whole.
		for e := range shares {
			if e != big {
				if err := s.AckOutbox(ctx, p, e); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n, _ := s.OutboxLen(ctx, p); n != 0 {
			t.Fatalf("outbox %d entries after the relay acknowledged every entry", n)
		}
	})
}

// TestOutboxSharesCountedPerProduct: outbox entry ids are unique per
// stream only — two products' batch entries written in the same
// millisecond both get "<ms>-0". The acknowledged orders of one must not
// count toward the other: one order of each acknowledged leaves both
// entries, which still carry an order Kafka has not acknowledged. (Found by
// TestEdgeKilledMidRun: counted together, an entry went with half its
// orders unpublished, and a kill -9 lost them.)
func TestOutboxSharesCountedPerProduct(t *testing.T) {
	onBothServers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		c := s.c
		const id = "1000-0"
		products := []string{"sha", "shb"}
		for _, p := range products {
			err := c.Do(ctx, c.B().Xadd().Key(OutboxKey(p)).Id(id).FieldValue().FieldValue("product", p).Build()).Error()
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range products {
			if err := s.AckOutbox(ctx, p, id+"/2"); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range products {
			if n, _ := s.OutboxLen(ctx, p); n != 1 {
				t.Fatalf("outbox of %s holds %d entries after one of its entry's two orders was acknowledged, want 1", p, n)
			}
		}
		// The second order of each removes its own entry.
		for _, p := range products {
			if err := s.AckOutbox(ctx, p, id+"/2"); err != nil {
				t.Fatal(err)
			}
			if n, _ := s.OutboxLen(ctx, p); n != 0 {
				t.Fatalf("outbox of %s holds %d entries after both orders were acknowledged, want 0", p, n)
			}
		}
	})
}
