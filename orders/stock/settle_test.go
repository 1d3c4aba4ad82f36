package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/orders/order"
)

// stored deducts an order with a pay deadline payIn from now and marks it
// success, as the consumer does once it is stored.
func stored(t testing.TB, s *Store, product, user string, qty int, payIn time.Duration) Attempt {
	t.Helper()
	a := attempt(product, user, qty, 10)
	if payIn != 0 {
		a.PayByMs = a.CreatedMs + payIn.Milliseconds()
	}
	if out := mustDeduct(t, s, a); out.Code != OK {
		t.Fatalf("deduct %+v: %v", a, out.Code)
	}
	if n, err := s.MarkSuccess(context.Background(), product, a.ID); err != nil || n != 1 {
		t.Fatalf("MarkSuccess = %d, %v", n, err)
	}
	return a
}

func saleInfo(t testing.TB, s *Store, product string) SaleInfo {
	t.Helper()
	info, ok, err := s.SaleInfo(context.Background(), product)
	if err != nil || !ok {
		t.Fatalf("SaleInfo(%s) = %v, %v", product, ok, err)
	}
	return info
}

// outboxEvent reads the outbox entry id as the relay would and checks it
// is the event the settlement says to publish.
func outboxEvent(t testing.TB, s *Store, product string, st Settlement) order.Event {
	t.Helper()
	c := s.c
	es, err := c.Do(context.Background(), c.B().Xrange().Key(OutboxKey(product)).Start(st.OutboxID).End(st.OutboxID).Build()).AsXRange()
	if err != nil || len(es) != 1 {
		t.Fatalf("outbox entry %s: %v %v", st.OutboxID, es, err)
	}
	ev, err := (&OutboxEntry{ID: es[0].ID, Fields: es[0].FieldValues}).Event()
	if err != nil {
		t.Fatalf("outbox entry %v: %v", es[0].FieldValues, err)
	}
	if want := st.Event(); ev != want {
		t.Fatalf("outbox event %+v, settlement's event %+v", ev, want)
	}
	return ev
}

func TestPayKeepsTheOrderAndIsFinal(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "pay", 10, 10)
	a := stored(t, s, "pay", "alice", 2, time.Minute)
	if _, n, _ := s.NextDeadlines(ctx, "pay", 5); n != 1 {
		t.Fatalf("due %d, want 1", n)
	}
	st, err := s.Pay(ctx, "pay", a.ID, "", 0)
	if err != nil || !st.Changed || st.Info.State != StatePaid || st.Info.PaidMs == 0 || st.Info.PaidMs != st.AtMs ||
		st.Info.PayByMs != a.PayByMs || st.Info.Qty != 2 || st.Info.UserID != "alice" {
		t.Fatalf("Pay = %+v, %v", st, err)
	}
	ev := outboxEvent(t, s, "pay", st)
	if ev.Type != order.TypePaid || ev.PaidMs != st.AtMs || ev.PayByMs != a.PayByMs {
		t.Fatalf("paid event %+v", ev)
	}
	if ds, n, _ := s.NextDeadlines(ctx, "pay", 5); n != 0 || len(ds) != 0 {
		t.Fatalf("paid order still due: %v %d", ds, n)
	}
	// Again: nothing changes, the same event to publish again.
	again, err := s.Pay(ctx, "pay", a.ID, "", 0)
	if err != nil || again.Changed || again.Info.State != StatePaid || again.OutboxID != "" || again.Event() != st.Event() {
		t.Fatalf("Pay again = %+v, %v", again, err)
	}
	// Paid is final: no cancel.
	c, err := s.Cancel(ctx, "pay", a.ID)
	if err != nil || c.Changed || c.Info.State != StatePaid {
		t.Fatalf("Cancel of a paid order = %+v, %v", c, err)
	}
	if r := remaining(t, s, "pay"); r != 8 {
		t.Fatalf("remaining %d, want 8", r)
	}
	if info := saleInfo(t, s, "pay"); info.Paid != 2 || info.Released != 0 || info.Expired != 0 {
		t.Fatalf("meta %+v", info.SaleStock)
	}
}

func TestPayAfterTheDeadlineExpiresTheOrder(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "late", 10, 10)
	a := stored(t, s, "late", "bob", 3, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // the deadline is a time: it has to pass
	st, err := s.Pay(ctx, "late", a.ID, "evt_1", time.Minute)
	if err != nil || !st.Changed || st.Info.State != StateExpired || st.Info.ClosedMs != st.AtMs || st.Replayed {
		t.Fatalf("late Pay = %+v, %v", st, err)
	}
	ev := outboxEvent(t, s, "late", st)
	if ev.Type != order.TypeRelease || ev.Reason != order.ReasonExpired || ev.ReleasedMs != st.AtMs {
		t.Fatalf("release event %+v", ev)
	}
	if r := remaining(t, s, "late"); r != 10 {
		t.Fatalf("remaining %d, want 10", r)
	}
	if n, _ := s.Bought(ctx, "late", "bob"); n != 0 {
		t.Fatalf("bob still holds %d", n)
	}
	if info := saleInfo(t, s, "late"); info.Released != 3 || info.Expired != 3 || info.Paid != 0 {
		t.Fatalf("meta %+v", info.SaleStock)
	}
	// The sweep finds nothing left to do.
	if got, err := s.ExpireDue(ctx, "late", 10); err != nil || len(got) != 0 {
		t.Fatalf("ExpireDue after = %+v, %v", got, err)
	}
	// The webhook's id was recorded with the decision: a replay changes
	// nothing and says so.
	rep, err := s.Pay(ctx, "late", a.ID, "evt_1", time.Minute)
	if err != nil || !rep.Replayed || rep.Changed || rep.Info.State != StateExpired {
		t.Fatalf("replayed Pay = %+v, %v", rep, err)
	}
	if ttl := pttl(t, s, ReplayKey("late", "evt_1")); ttl <= 50_000 || ttl > 60_000 {
		t.Fatalf("replay key PTTL %d, want about a minute", ttl)
	}
}

func TestReplayedPaymentChangesNothing(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "rp", 10, 10)
	a := stored(t, s, "rp", "u1", 1, time.Minute)
	b := stored(t, s, "rp", "u2", 1, time.Minute)
	if st, err := s.Pay(ctx, "rp", a.ID, "evt-a", time.Minute); err != nil || !st.Changed {
		t.Fatalf("Pay = %+v, %v", st, err)
	}
	// The same event id for another order is a replay too: the provider's
	// id names one delivery.
	st, err := s.Pay(ctx, "rp", b.ID, "evt-a", time.Minute)
	if err != nil || !st.Replayed || st.Changed || st.Info.State != StateSuccess {
		t.Fatalf("replayed Pay = %+v, %v", st, err)
	}
	if info := saleInfo(t, s, "rp"); info.Paid != 1 {
		t.Fatalf("paid %d, want 1", info.Paid)
	}
	for _, bad := range []string{"has space", "x{y}", string(make([]byte, 65))} {
		if _, err := s.Pay(ctx, "rp", b.ID, bad, time.Minute); !errors.Is(err, ErrInvalid) {
			t.Errorf("Pay with replay id %q = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.Pay(ctx, "rp", b.ID, "ok", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Pay with a replay id and no TTL = %v, want ErrInvalid", err)
	}
}

func TestSettleUnknownOrders(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "ua", 10, 10)
	warm(t, s, "ub", 10, 10)
	a := stored(t, s, "ua", "u1", 1, time.Minute)
	// Another sale's order is not this sale's.
	if _, err := s.Pay(ctx, "ub", a.ID, "evt", time.Minute); !errors.Is(err, ErrUnknownOrder) {
		t.Fatalf("Pay of another sale's order = %v", err)
	}
	if _, err := s.Cancel(ctx, "ub", 12345); !errors.Is(err, ErrUnknownOrder) {
		t.Fatalf("Cancel of an unknown order = %v", err)
	}
	// Nothing was recorded: the id is still fresh for the right sale.
	if st, err := s.Pay(ctx, "ua", a.ID, "evt", time.Minute); err != nil || !st.Changed || st.Replayed {
		t.Fatalf("Pay = %+v, %v", st, err)
	}
	if n := len(scanKeys(t, s, "sk:{ub}:wh:*")); n != 0 {
		t.Fatalf("%d replay keys on the other sale", n)
	}
}

func TestCancelReleasesOnceWithItsEvent(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "cx", 10, 10)
	a := stored(t, s, "cx", "carol", 4, time.Minute)
	st, err := s.Cancel(ctx, "cx", a.ID)
	if err != nil || !st.Changed || st.Info.State != StateReleased {
		t.Fatalf("Cancel = %+v, %v", st, err)
	}
	ev := outboxEvent(t, s, "cx", st)
	if ev.Type != order.TypeRelease || ev.Reason != order.ReasonCancelled {
		t.Fatalf("release event %+v", ev)
	}
	if _, n, _ := s.NextDeadlines(ctx, "cx", 1); n != 0 {
		t.Fatalf("cancelled order still due")
	}
	// Cancelled: too late to pay.
	p, err := s.Pay(ctx, "cx", a.ID, "", 0)
	if err != nil || p.Changed || p.Info.State != StateReleased {
		t.Fatalf("Pay of a cancelled order = %+v, %v", p, err)
	}
	if ok, err := s.Release(ctx, "cx", a.ID); ok || err != nil {
		t.Fatalf("Release again = %v, %v", ok, err)
	}
	if r := remaining(t, s, "cx"); r != 10 {
		t.Fatalf("remaining %d", r)
	}
	if info := saleInfo(t, s, "cx"); info.Released != 4 || info.Expired != 0 {
		t.Fatalf("meta %+v", info.SaleStock)
	}
}

func TestExpireDueReleasesOnlyWhatIsDue(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "ex", 100, 10)
	var due []Attempt
	for i := range 5 {
		due = append(due, stored(t, s, "ex", "d"+strconv.Itoa(i), 1, time.Millisecond))
	}
	later := stored(t, s, "ex", "later", 1, time.Hour)
	none := stored(t, s, "ex", "none", 1, 0) // no deadline: never due
	paid := stored(t, s, "ex", "paid", 1, time.Minute)
	if _, err := s.Pay(ctx, "ex", paid.ID, "", 0); err != nil {
		t.Fatal(err)
	}
	ds, total, err := s.NextDeadlines(ctx, "ex", 3)
	if err != nil || total != 6 || len(ds) != 3 || ds[0].PayByMs > ds[1].PayByMs || ds[0].OrderID != due[0].ID || ds[0].UserID != "d0" {
		t.Fatalf("NextDeadlines = %+v %d %v", ds, total, err)
	}
	time.Sleep(5 * time.Millisecond)
	got, err := s.ExpireDue(ctx, "ex", 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("ExpireDue(3) = %+v, %v", got, err)
	}
	rest, err := s.ExpireDue(ctx, "ex", 100)
	if err != nil || len(rest) != 2 {
		t.Fatalf("ExpireDue(100) = %+v, %v", rest, err)
	}
	seen := map[int64]bool{}
	for _, st := range append(got, rest...) {
		if !st.Changed || st.Info.State != StateExpired || st.OutboxID == "" || st.Info.PayByMs > st.AtMs {
			t.Fatalf("expired %+v", st)
		}
		outboxEvent(t, s, "ex", st)
		seen[st.Info.ID] = true
	}
	for _, a := range due {
		if !seen[a.ID] {
			t.Fatalf("order %d not expired", a.ID)
		}
	}
	for _, a := range []Attempt{later, none} {
		if o, _, _ := s.OrderState(ctx, "ex", a.ID); o.State != StateSuccess {
			t.Fatalf("order %s: %s", a.UserID, o.State)
		}
	}
	if _, total, _ := s.NextDeadlines(ctx, "ex", 0); total != 1 {
		t.Fatalf("due %d, want 1 (later)", total)
	}
	if info := saleInfo(t, s, "ex"); info.Remaining != 100-8+5 || info.Expired != 5 || info.Released != 5 || info.Paid != 1 {
		t.Fatalf("meta %+v", info)
	}
}

func TestSettleRefusesAFencedOrColdSale(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "fz", 10, 10)
	a := stored(t, s, "fz", "u", 1, time.Millisecond)
	b := stored(t, s, "fz", "v", 1, time.Hour)
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Fence(ctx, "fz", FenceID(time.Now().UnixMilli(), 1, "test")); err != nil {
		t.Fatal(err)
	}
	before := scanState(t, s, "fz")
	if _, err := s.ExpireDue(ctx, "fz", 10); !errors.Is(err, ErrRecovering) {
		t.Errorf("ExpireDue while fenced = %v", err)
	}
	if _, err := s.Pay(ctx, "fz", b.ID, "evt", time.Minute); !errors.Is(err, ErrRecovering) {
		t.Errorf("Pay while fenced = %v", err)
	}
	if _, err := s.Cancel(ctx, "fz", a.ID); !errors.Is(err, ErrRecovering) {
		t.Errorf("Cancel while fenced = %v", err)
	}
	if after := scanState(t, s, "fz"); after != before {
		t.Errorf("a fenced sale changed:\n%s\n%s", before, after)
	}
	// Not warmed (the stock key gone): the same, ErrNotWarmed.
	c := s.c
	c.Do(ctx, c.B().Hdel().Key(MetaKey("fz")).Field(fieldFence).Build())
	c.Do(ctx, c.B().Del().Key(StockKey("fz")).Build())
	before = scanState(t, s, "fz")
	if _, err := s.ExpireDue(ctx, "fz", 10); !errors.Is(err, ErrNotWarmed) {
		t.Errorf("ExpireDue of a cold sale = %v", err)
	}
	if _, err := s.Pay(ctx, "fz", b.ID, "evt", time.Minute); !errors.Is(err, ErrNotWarmed) {
		t.Errorf("Pay of a cold sale = %v", err)
	}
	if after := scanState(t, s, "fz"); after != before {
		t.Errorf("a cold sale changed:\n%s\n%s", before, after)
	}
}

// A server the sale was not verified on (a restart from an old snapshot, a
// promoted replica) holds old order states and an old due set: the first
// settle call fences the sale, as the deduction would, and changes nothing.
func TestSettleFencesAServerThatWentBackInTime(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "bt", 10, 10)
	a := stored(t, s, "bt", "u", 1, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	c := s.c
	c.Do(ctx, c.B().Hset().Key(MetaKey("bt")).FieldValue().FieldValue("runid", "0123abcd").Build())
	if _, err := s.ExpireDue(ctx, "bt", 10); !errors.Is(err, ErrRecovering) {
		t.Fatalf("ExpireDue on another server = %v", err)
	}
	info := saleInfo(t, s, "bt")
	if !strings.HasSuffix(info.Fence, ":runid") {
		t.Fatalf("fence %q", info.Fence)
	}
	if o, _, _ := s.OrderState(ctx, "bt", a.ID); o.State != StateSuccess || info.Remaining != 9 {
		t.Fatalf("order %s, remaining %d", o.State, info.Remaining)
	}
	if out := mustDeduct(t, s, attempt("bt", "w", 1, 10)); out.Code != Recovering {
		t.Fatalf("deduction after the fence: %v", out.Code)
	}
}

// scanState renders every key of the product with its value, to compare.
func scanState(t testing.TB, s *Store, product string) string {
	t.Helper()
	c := s.c
	ctx := context.Background()
	var out string
	for _, k := range slices.Sorted(slices.Values(scanKeys(t, s, "sk:{"+product+"}:*"))) {
		typ, _ := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
		var v string
		switch typ {
		case "string":
			v, _ = c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
		case "hash":
			m, _ := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
			v = fmt.Sprint(m) // fmt prints a map's keys sorted
		case "zset":
			zs, _ := c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
			for _, z := range zs {
				v += z.Member + "=" + strconv.FormatFloat(z.Score, 'f', 0, 64) + " "
			}
		case "stream":
			n, _ := c.Do(ctx, c.B().Xlen().Key(k).Build()).AsInt64()
			v = strconv.FormatInt(n, 10)
		}
		out += k + " " + typ + " " + v + "\n"
	}
	return out
}

// The embedded server runs the same script: its TIME, its sorted sets.
func TestSettleOnEmbedded(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := context.Background()
	warm(t, s, "em", 10, 10)
	p := stored(t, s, "em", "payer", 1, time.Minute)
	e := stored(t, s, "em", "late", 2, time.Millisecond)
	c := stored(t, s, "em", "gone", 3, time.Minute)
	time.Sleep(5 * time.Millisecond)
	if st, err := s.Pay(ctx, "em", p.ID, "evt", time.Minute); err != nil || st.Info.State != StatePaid {
		t.Fatalf("Pay = %+v, %v", st, err)
	}
	if st, err := s.Pay(ctx, "em", p.ID, "evt", time.Minute); err != nil || !st.Replayed {
		t.Fatalf("replayed Pay = %+v, %v", st, err)
	}
	got, err := s.ExpireDue(ctx, "em", 10)
	if err != nil || len(got) != 1 || got[0].Info.ID != e.ID || got[0].Info.State != StateExpired {
		t.Fatalf("ExpireDue = %+v, %v", got, err)
	}
	outboxEvent(t, s, "em", got[0])
	if st, err := s.Cancel(ctx, "em", c.ID); err != nil || !st.Changed {
		t.Fatalf("Cancel = %+v, %v", st, err)
	}
	if info := saleInfo(t, s, "em"); info.Remaining != 9 || info.Paid != 1 || info.Expired != 2 || info.Released != 5 {
		t.Fatalf("meta %+v", info)
	}
	if _, n, _ := s.NextDeadlines(ctx, "em", 10); n != 0 {
		t.Fatalf("due %d", n)
	}
}

// Every settled kind reaches the subscribers with its kind (and the state
// it stands for); an unknown kind is refused before anything is sent.
func TestPublishChangeKinds(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan StateChange, 8)
	sub := s.SubscribeChanges(ctx, Follow{Products: func() []string { return []string{"pk"} }}, func(m StateChange) {
		m.OrderIDs = slices.Clone(m.OrderIDs)
		m.ProductID = strings.Clone(m.ProductID)
		got <- m
	}, func(msg string) { t.Errorf("malformed %q", msg) })
	defer sub.Stop()
	want := map[ChangeKind]string{KindCancelled: StateReleased, KindExpired: StateExpired, KindPaid: StatePaid}
	for k := range want {
		if err := s.PublishChange(ctx, "pk", k, 42, 41); err != nil {
			t.Fatal(err)
		}
	}
	for range len(want) {
		select {
		case m := <-got:
			if m.ProductID != "pk" || !slices.Equal(m.OrderIDs, []int64{41, 42}) || m.Kind.State() != want[m.Kind] {
				t.Errorf("got %+v", m)
			}
			delete(want, m.Kind)
		case <-ctx.Done():
			t.Fatalf("not delivered: %v", want)
		}
	}
	if len(want) != 0 {
		t.Fatalf("not delivered: %v", want)
	}
	if err := s.PublishChange(ctx, "pk", ChangeKind('X'), 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown kind = %v", err)
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "rel", 10, 5)
	a := attempt("rel", "erin", 2, 5)
	b := attempt("rel", "erin", 3, 5)
	mustDeduct(t, s, a)
	mustDeduct(t, s, b)
	if n, _ := s.MarkSuccess(ctx, "rel", b.ID); n != 1 {
		t.Fatalf("MarkSuccess changed %d", n)
	}
	if got := remaining(t, s, "rel"); got != 5 {
		t.Fatalf("remaining %d", got)
	}
	steps := []struct {
		name      string
		order     int64
		released  bool
		remaining int64
		bought    int64
	}{
		{"pending order", a.ID, true, 7, 3},
		{"again", a.ID, false, 7, 3},
		{"success order", b.ID, true, 10, 0},
		{"again", b.ID, false, 10, 0},
		{"unknown order", 1 << 60, false, 10, 0},
	}
	for _, st := range steps {
		got, err := s.Release(ctx, "rel", st.order)
		if err != nil || got != st.released {
			t.Fatalf("%s: Release = %v, %v", st.name, got, err)
		}
		if r := remaining(t, s, "rel"); r != st.remaining {
			t.Errorf("%s: remaining %d, want %d", st.name, r, st.remaining)
		}
		if n, _ := s.Bought(ctx, "rel", "erin"); n != st.bought {
			t.Errorf("%s: bought %d, want %d", st.name, n, st.bought)
		}
	}
	for _, id := range []int64{a.ID, b.ID} {
		info, _, _ := s.OrderState(ctx, "rel", id)
		if info.State != StateReleased {
			t.Errorf("order %d state %s", id, info.State)
		}
	}
	if n, _ := s.MarkSuccess(ctx, "rel", a.ID); n != 0 {
		t.Error("MarkSuccess resurrected a released order")
	}
	meta, _, _ := s.SaleInfo(ctx, "rel")
	if meta.Released != 5 {
		t.Errorf("meta released %d, want 5", meta.Released)
	}
	// The released allowance can be bought again, up to the limit.
	if out := mustDeduct(t, s, attempt("rel", "erin", 5, 5)); out.Code != OK {
		t.Errorf("buy after release: %v", out)
	}
}

func TestReleaseAfterMemoryLossDoesNotCreateStock(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	warm(t, s, "rl", 10, 5)
	a := attempt("rl", "u", 2, 5)
	mustDeduct(t, s, a)
	// Only the stock key is lost (e.g. evicted, or a partial rebuild).
	c := s.c
	c.Do(ctx, c.B().Del().Key(StockKey("rl")).Build())
	if _, err := s.Release(ctx, "rl", a.ID); !errors.Is(err, ErrNotWarmed) {
		t.Fatalf("Release: %v", err)
	}
	if _, ok, _ := s.Remaining(ctx, "rl"); ok {
		t.Fatal("release recreated the stock key")
	}
	if info, _, _ := s.OrderState(ctx, "rl", a.ID); info.State != StatePending {
		t.Errorf("state %s, want still pending", info.State)
	}
}
