package broker

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/order"
	"flashgate/orders/stock"
)

func newRelay(t testing.TB, cfg RelayConfig) *Relay {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = testLog(t)
	}
	r, err := NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestRelay: an order whose direct publish never happened is re-sent by the
// relay and leaves the outbox; orders the direct path acknowledged are left
// alone (no duplicate in Kafka); nothing stays pending. On redis-server and
// on the embedded miniredis (whose XAUTOCLAIM does not report deleted ids).
func TestRelay(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			s := openStore(t, kind)
			brokers, _ := startKafka(t)
			pub := newPublisher(t, PublisherConfig{Brokers: brokers, Outbox: s})
			stocktest.Warm(t, s, "p1", 1000, 1000)
			const minAge = time.Second
			r := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: func() []string { return []string{"p1", "p2"} }, MinAge: minAge, Node: 3})
			r.Start()
			ctx := context.Background()

			want := map[int64]order.Event{}
			// Orphans: deducted, never published (the edge died, or its
			// publish failed and it answered 503).
			var orphans []int64
			for range 5 {
				a, _ := deduct(t, s, "p1")
				want[a.ID] = OrderEvent(&a.Order)
				orphans = append(orphans, a.ID)
			}
			// The direct path: publish, then remove the entry.
			var direct []int64
			for range 20 {
				a, id := deduct(t, s, "p1")
				if err := pub.PublishAndAck(ctx, OrderEvent(&a.Order), id); err != nil {
					t.Fatal(err)
				}
				want[a.ID] = OrderEvent(&a.Order)
				direct = append(direct, a.ID)
			}
			// The relay counts a sweep's entries once the sweep is over,
			// after it removed them: wait for both.
			await.Until(t, 20*time.Second, "the relay to empty the outbox", func() bool {
				return outboxLen(t, s, "p1") == 0 && r.Stats().Relayed >= uint64(len(orphans))
			})
			got, counts := readOrders(t, brokers)
			for id, e := range want {
				if got[id] != e {
					t.Errorf("order %d: Kafka has %+v, want %+v", id, got[id], e)
				}
			}
			for _, id := range direct {
				if counts[id] != 1 {
					t.Errorf("acknowledged order %d is in Kafka %d times, want 1", id, counts[id])
				}
			}
			for _, id := range orphans {
				if counts[id] < 1 {
					t.Errorf("orphan %d not re-sent", id)
				}
			}
			st := r.Stats()
			if st.Relayed < uint64(len(orphans)) || st.Taken < uint64(len(orphans)) || st.Errors != 0 {
				t.Errorf("relay stats %+v", st)
			}
			if st.LastLag > 0 && st.LastLag < minAge {
				t.Errorf("re-sent an entry %v old, younger than MinAge %v", st.LastLag, minAge)
			}
			if n := pendingCount(t, s, "p1"); n != 0 {
				t.Errorf("relay group still has %d pending entries", n)
			}
			if ps := pub.Stats(); ps.Acked != uint64(len(direct)) || ps.AckErrors != 0 {
				t.Errorf("publisher stats %+v", ps)
			}
			t.Logf("relay %+v", st)
		})
	}
}

// TestRelayClaimsFromDeadEdge: a relay took entries into its pending list
// and died without acknowledging them (kill -9: its consumer name never
// comes back). Another edge's relay claims them once they are MinAge idle,
// not before, and publishes them.
func TestRelayClaimsFromDeadEdge(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			s := openStore(t, kind)
			brokers, _ := startKafka(t)
			pub := newPublisher(t, PublisherConfig{Brokers: brokers})
			stocktest.Warm(t, s, "p1", 100, 1000)
			products := func() []string { return []string{"p1"} }
			ctx := context.Background()
			ids := map[int64]bool{}
			for range 6 {
				a, _ := deduct(t, s, "p1")
				ids[a.ID] = true
			}
			dead := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: products, Consumer: "edge9-gone-1", MinAge: time.Hour})
			if n, err := dead.Sweep(ctx); err != nil || n != 0 {
				t.Fatalf("dead relay's sweep: %d, %v", n, err)
			}
			if st := dead.Stats(); st.Taken != 6 {
				t.Fatalf("dead relay took %d entries, want 6", st.Taken)
			}
			tookAt := time.Now()
			dead.Close() // never acknowledges, never comes back

			const minAge = time.Second
			live := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: products, Consumer: "edge1-alive-2", MinAge: minAge})
			// Right away nothing is old enough.
			if n, err := live.Sweep(ctx); err != nil || n != 0 {
				t.Fatalf("live relay re-sent %d entries before MinAge (%v)", n, err)
			}
			live.Start()
			await.Until(t, 20*time.Second, "the live relay to empty the outbox", func() bool { return outboxLen(t, s, "p1") == 0 })
			if el := time.Since(tookAt); el < minAge {
				t.Errorf("claimed after %v, before MinAge %v", el, minAge)
			}
			_, counts := readOrders(t, brokers)
			for id := range ids {
				if counts[id] != 1 {
					t.Errorf("order %d in Kafka %d times, want 1", id, counts[id])
				}
			}
			if n := pendingCount(t, s, "p1"); n != 0 {
				t.Errorf("%d entries still pending", n)
			}
		})
	}
}

// TestRelayDeadLetters: an outbox entry that does not make a valid event
// goes to the dead-letter topic with its reason and is removed.
func TestRelayDeadLetters(t *testing.T) {
	s := openStore(t, "real")
	brokers, _ := startKafka(t)
	pub := newPublisher(t, PublisherConfig{Brokers: brokers})
	c := redistest.Client(t, s.Addr())
	ctx := context.Background()
	// An order id and a product, nothing else of what the script writes.
	if err := c.Do(ctx, c.B().Xadd().Key(stock.OutboxKey("p1")).Id("*").FieldValue().
		FieldValue("order", "77").FieldValue("product", "p1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: func() []string { return []string{"p1"} }, MinAge: 100 * time.Millisecond})
	r.Start()
	await.Until(t, 20*time.Second, "the malformed entry to leave the outbox", func() bool { return outboxLen(t, s, "p1") == 0 })
	dl := readAll(t, brokers, kafkaConf.DLQTopic)
	if len(dl) != 1 || dl[0].key != "77" || dl[0].headers[HeaderReason] == "" || dl[0].headers[HeaderSource] == "" {
		t.Fatalf("dead letters: %+v", dl)
	}
	if n := len(readAll(t, brokers, kafkaConf.Topic)); n != 0 {
		t.Errorf("%d messages on the orders topic", n)
	}
	if st := r.Stats(); st.DeadLettered != 1 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("dead letter %s, reason %q", dl[0].value, dl[0].headers[HeaderReason])
}

// TestRelayRecreatesGroup: Redis lost its memory (restart, empty); the
// relay notices NOGROUP and creates the group again.
func TestRelayRecreatesGroup(t *testing.T) {
	s := openStore(t, "real")
	brokers, _ := startKafka(t)
	pub := newPublisher(t, PublisherConfig{Brokers: brokers})
	stocktest.Warm(t, s, "p1", 100, 1000)
	r := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: func() []string { return []string{"p1"} }, MinAge: 100 * time.Millisecond})
	ctx := context.Background()
	if _, err := r.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	c := redistest.Client(t, s.Addr())
	if err := c.Do(ctx, c.B().Del().Key(stock.OutboxKey("p1")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	a, _ := deduct(t, s, "p1") // XADD recreates the stream, without the group
	if _, err := r.Sweep(ctx); err == nil {
		t.Fatal("sweep without the group did not fail")
	}
	r.Start()
	await.Until(t, 20*time.Second, "the order to be re-sent", func() bool { return outboxLen(t, s, "p1") == 0 })
	if _, counts := readOrders(t, brokers); counts[a.ID] != 1 {
		t.Errorf("order %d in Kafka %d times", a.ID, counts[a.ID])
	}
}

// TestRelayDeletedPendingEntries pins down what XAUTOCLAIM does with
// entries deleted while pending, without an XACK: Redis 7 reports them as
// deleted and drops them from the pending list; miniredis skips them (it
// keeps them internally but no longer reports them: XPENDING filters
// deleted entries). Either way the relay publishes nothing for them.
func TestRelayDeletedPendingEntries(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			s := openStore(t, kind)
			brokers, _ := startKafka(t)
			pub := newPublisher(t, PublisherConfig{Brokers: brokers})
			stocktest.Warm(t, s, "p1", 100, 1000)
			ctx := context.Background()
			var ids []string
			for range 3 {
				_, id := deduct(t, s, "p1")
				ids = append(ids, stock.OutboxEntryID(id))
			}
			const minAge = 100 * time.Millisecond
			r := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: func() []string { return []string{"p1"} }, MinAge: minAge})
			if _, err := r.Sweep(ctx); err != nil { // takes all 3
				t.Fatal(err)
			}
			took := time.Now()
			if n := pendingCount(t, s, "p1"); n != 3 {
				t.Fatalf("%d pending after the first sweep, want 3", n)
			}
			c := redistest.Client(t, s.Addr())
			if err := c.Do(ctx, c.B().Xdel().Key(stock.OutboxKey("p1")).Id(ids...).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			await.Until(t, 20*time.Second, "MinAge to pass", func() bool { return time.Since(took) > 2*minAge })
			if n, err := r.Sweep(ctx); err != nil || n != 0 {
				t.Fatalf("sweep re-sent %d deleted entries (%v)", n, err)
			}
			if n := pendingCount(t, s, "p1"); n != 0 {
				t.Errorf("%d entries pending after XAUTOCLAIM, want 0", n)
			}
			if n := len(readAll(t, brokers, kafkaConf.Topic)); n != 0 {
				t.Errorf("%d messages published for deleted entries", n)
			}
		})
	}
}

// groupConsumers is XINFO CONSUMERS of the product's relay group: name ->
// idle ms (-1 where the server does not tell).
func groupConsumers(t testing.TB, s *stock.Store, product string) map[string]int64 {
	t.Helper()
	c := redistest.Client(t, s.Addr())
	arr, err := c.Do(context.Background(), c.B().XinfoConsumers().Key(stock.OutboxKey(product)).Group(stock.RelayGroup).Build()).ToArray()
	if err != nil {
		t.Fatalf("XINFO CONSUMERS: %v", err)
	}
	out := map[string]int64{}
	for i := range arr {
		m, err := arr[i].AsMap()
		if err != nil {
			t.Fatal(err)
		}
		nm, im := m["name"], m["idle"]
		name, _ := nm.ToString()
		idle, _ := im.AsInt64()
		out[name] = idle
	}
	return out
}

// TestRelayForgetsDeadEdge: an edge's relay took entries and died (its
// consumer name never comes back). The live relay claims and re-sends the
// entries after MinAge, and once the dead consumer has nothing pending and
// has been silent for ForgetAfter, removes it from the group, counted in
// its stats; the live relay stays.
func TestRelayForgetsDeadEdge(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			s := openStore(t, kind)
			brokers, _ := startKafka(t)
			pub := newPublisher(t, PublisherConfig{Brokers: brokers})
			stocktest.Warm(t, s, "p1", 100, 1000)
			products := func() []string { return []string{"p1"} }
			ctx := context.Background()
			ids := map[int64]bool{}
			for range 4 {
				a, _ := deduct(t, s, "p1")
				ids[a.ID] = true
			}
			const dead = "edge9-gone-1"
			d := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: products, Consumer: dead, MinAge: time.Hour})
			if _, err := d.Sweep(ctx); err != nil || d.Stats().Taken != 4 {
				t.Fatalf("dead relay's sweep: %+v, %v", d.Stats(), err)
			}
			silentAt := time.Now()
			d.Close()

			const forgetAfter = 800 * time.Millisecond
			live := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: products, Consumer: "edge1-alive-2",
				MinAge: 200 * time.Millisecond, ForgetAfter: forgetAfter})
			live.Start()
			await.Until(t, 20*time.Second, "the live relay to remove the dead consumer", func() bool {
				_, ok := groupConsumers(t, s, "p1")[dead]
				return !ok
			})
			if el := time.Since(silentAt); el < forgetAfter {
				t.Errorf("removed %v after it fell silent, before ForgetAfter %v", el, forgetAfter)
			}
			// Removed only after its entries were claimed and acknowledged:
			// all of them are in Kafka and gone from the outbox.
			if n := outboxLen(t, s, "p1"); n != 0 {
				t.Errorf("%d entries still in the outbox", n)
			}
			if n := pendingCount(t, s, "p1"); n != 0 {
				t.Errorf("%d entries still pending", n)
			}
			_, counts := readOrders(t, brokers)
			for id := range ids {
				if counts[id] != 1 {
					t.Errorf("order %d in Kafka %d times, want 1", id, counts[id])
				}
			}
			if st := live.Stats(); st.Forgotten != 1 || st.Relayed != 4 {
				t.Errorf("live relay stats %+v, want 1 forgotten, 4 relayed", st)
			}
			if _, ok := groupConsumers(t, s, "p1")[live.Consumer()]; !ok {
				t.Errorf("the live relay is not in the group any more")
			}
		})
	}
}

// TestRelayKeepsLiveRelays: two live relays with a short interval, each
// with entries it took, sweep side by side for several ForgetAfter after
// their outbox went quiet; neither removes the other. On Redis 7.0 their
// XINFO idle times pass ForgetAfter (idle restarts only when a consumer is
// handed entries): the heartbeats are what keeps them.
func TestRelayKeepsLiveRelays(t *testing.T) {
	s := openStore(t, "real")
	brokers, _ := startKafka(t)
	pub := newPublisher(t, PublisherConfig{Brokers: brokers})
	stocktest.Warm(t, s, "p1", 100, 1000)
	products := func() []string { return []string{"p1"} }
	ctx := context.Background()
	const forgetAfter = 300 * time.Millisecond
	cfg := RelayConfig{Store: s, Publisher: pub, Products: products, MinAge: 100 * time.Millisecond, ForgetAfter: forgetAfter}
	var relays []*Relay
	for _, name := range []string{"edge1-a-1", "edge2-b-2"} {
		cfg.Consumer = name
		r := newRelay(t, cfg)
		// Each takes entries of its own, so each is a consumer of the group.
		deduct(t, s, "p1")
		deduct(t, s, "p1")
		if _, err := r.Sweep(ctx); err != nil || r.Stats().Taken != 2 {
			t.Fatalf("%s: %+v %v", name, r.Stats(), err)
		}
		relays = append(relays, r)
	}
	for _, r := range relays {
		r.Start()
	}
	await.Until(t, 20*time.Second, "the relays to empty the outbox", func() bool { return outboxLen(t, s, "p1") == 0 })
	quietAt := time.Now()
	sweeps := relays[0].Stats().Sweeps + relays[1].Stats().Sweeps
	await.Until(t, 20*time.Second, "4 x ForgetAfter of quiet sweeps", func() bool {
		return time.Since(quietAt) >= 4*forgetAfter && relays[0].Stats().Sweeps+relays[1].Stats().Sweeps >= sweeps+20
	})
	c := groupConsumers(t, s, "p1")
	for _, r := range relays {
		if _, ok := c[r.Consumer()]; !ok {
			t.Errorf("live relay %s was removed from the group: %v", r.Consumer(), c)
		}
		if st := r.Stats(); st.Forgotten != 0 || st.Errors != 0 {
			t.Errorf("%s: stats %+v", r.Consumer(), st)
		}
	}
	t.Logf("XINFO idle ms: %v (ForgetAfter %v)", c, forgetAfter)
}

// TestRelayForgetAfterChecked: a ForgetAfter within twice MinAge or
// Interval is refused, naming it; unset, it defaults above both.
func TestRelayForgetAfterChecked(t *testing.T) {
	s := openStore(t, "embedded")
	pub := newPublisher(t, PublisherConfig{Brokers: []string{"127.0.0.1:1"}})
	base := RelayConfig{Store: s, Publisher: pub, Products: func() []string { return nil }, Interval: time.Second, MinAge: 10 * time.Second}
	for _, fa := range []time.Duration{time.Millisecond, 15 * time.Second} {
		cfg := base
		cfg.ForgetAfter = fa
		if _, err := NewRelay(cfg); err == nil || !strings.Contains(err.Error(), "ForgetAfter") {
			t.Errorf("ForgetAfter %v: %v, want an error naming ForgetAfter", fa, err)
		}
	}
	cfg := base
	cfg.MinAge = time.Minute
	r, err := NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.ForgetAfter != 10*time.Minute {
		t.Errorf("default ForgetAfter with MinAge 1m: %v, want 10m", r.cfg.ForgetAfter)
	}
	cfg.MinAge, cfg.ForgetAfter = 10*time.Second, -1
	if _, err := NewRelay(cfg); err != nil {
		t.Errorf("negative ForgetAfter (never remove): %v", err)
	}
}

// TestRelaySettlementEvents: the settle script's outbox entries (a payment,
// a cancel, an expiry) whose events were never published are re-sent by
// the relay as those very events, once each, and leave the outbox.
func TestRelaySettlementEvents(t *testing.T) {
	s := openStore(t, "real")
	brokers, _ := startKafka(t)
	pub := newPublisher(t, PublisherConfig{Brokers: brokers, Outbox: s})
	stocktest.Warm(t, s, "ps", 100, 1000)
	ctx := context.Background()
	var ids []int64
	for _, payIn := range []time.Duration{time.Hour, time.Hour, 300 * time.Millisecond} {
		id := orderSeq.Add(1)
		now := time.Now().UnixMilli()
		a := stock.Attempt{Order: order.Order{ProductID: "ps", UserID: "u" + strconv.FormatInt(id, 10), Qty: 1, ID: id, PriceCents: 990,
			CreatedMs: now, Edge: 3, PayByMs: now + payIn.Milliseconds()}, Limit: 1000, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: now + 60_000}
		out, err := s.Deduct(ctx, a)
		if err != nil || out.Code != stock.OK {
			t.Fatalf("Deduct: %+v %v", out, err)
		}
		if err := pub.PublishAndAck(ctx, OrderEvent(&a.Order), out.OutboxID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkSuccess(ctx, "ps", id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	paid, err := s.Pay(ctx, "ps", ids[0], "", 0)
	if err != nil || !paid.Changed {
		t.Fatalf("pay %+v %v", paid, err)
	}
	cancelled, err := s.Cancel(ctx, "ps", ids[1])
	if err != nil || !cancelled.Changed {
		t.Fatalf("cancel %+v %v", cancelled, err)
	}
	var expired []stock.Settlement
	await.Until(t, 10*time.Second, "the deadline", func() bool {
		got, err := s.ExpireDue(ctx, "ps", 10)
		expired = append(expired, got...)
		return err == nil && len(expired) > 0
	})
	if n := outboxLen(t, s, "ps"); n != 3 {
		t.Fatalf("outbox holds %d entries, want the 3 settlements", n)
	}
	r := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: func() []string { return []string{"ps"} }, MinAge: 10 * time.Millisecond, Node: 3})
	r.Start()
	await.Until(t, 20*time.Second, "the relay to empty the outbox", func() bool {
		return outboxLen(t, s, "ps") == 0 && r.Stats().Relayed >= 3
	})
	got, counts := readOrders(t, brokers)
	for _, st := range []stock.Settlement{paid, cancelled, expired[0]} {
		want := st.Event()
		if got[want.ID] != want || counts[want.ID] != 2 { // the order event, then its settlement once
			t.Errorf("order %d: Kafka has %+v (%d events), want %+v after its order", want.ID, got[want.ID], counts[want.ID], want)
		}
	}
	if e := got[ids[2]]; e.Type != order.TypeRelease || e.Reason != order.ReasonExpired || e.PayByMs == 0 {
		t.Errorf("the expiry went out as %+v", e)
	}
	if e := got[ids[0]]; e.Type != order.TypePaid || e.PaidMs == 0 {
		t.Errorf("the payment went out as %+v", e)
	}
}

// TestRelayBatchEntries, ledger "b": the orders of one deduction script call
// share one outbox entry. The direct path publishes each and acknowledges
// its share; an entry with one order left unpublished stays in the outbox
// and the relay sends it again whole — the orphan reaches Kafka, the
// others again (duplicates the consumer drops), and the entry goes. On
// redis-server and on the embedded miniredis.
func TestRelayBatchEntries(t *testing.T) {
	for _, kind := range []string{"real", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			s := openStore(t, kind)
			brokers, _ := startKafka(t)
			pub := newPublisher(t, PublisherConfig{Brokers: brokers, Outbox: s})
			stocktest.Warm(t, s, "pb", 1000, 1000)
			ctx := context.Background()
			// Concurrent attempts: group commit puts many in one call.
			type placed struct {
				a  stock.Attempt
				id string
			}
			out := make([]placed, 40)
			var wg sync.WaitGroup
			for i := range out {
				wg.Go(func() { a, id := deduct(t, s, "pb"); out[i] = placed{a, id} })
			}
			wg.Wait()
			entries := map[string][]placed{}
			for _, p := range out {
				e := stock.OutboxEntryID(p.id)
				entries[e] = append(entries[e], p)
			}
			var big string
			for e, ps := range entries {
				if len(ps) > len(entries[big]) {
					big = e
				}
			}
			if len(entries[big]) < 2 || outboxLen(t, s, "pb") != int64(len(entries)) {
				t.Fatalf("%d entries for %d orders (largest %d): want one per script call, one with several", outboxLen(t, s, "pb"), len(out), len(entries[big]))
			}
			orphan := entries[big][0].a.ID
			for _, p := range out {
				if p.a.ID == orphan {
					continue
				}
				if err := pub.PublishAndAck(ctx, OrderEvent(&p.a.Order), p.id); err != nil {
					t.Fatal(err)
				}
			}
			await.Until(t, 20*time.Second, "every complete entry to go", func() bool { return outboxLen(t, s, "pb") == 1 })
			if _, got := readOrders(t, brokers); got[orphan] != 0 {
				t.Fatalf("the orphan is in Kafka before the relay ran")
			}
			r := newRelay(t, RelayConfig{Store: s, Publisher: pub, Products: func() []string { return []string{"pb"} }, MinAge: 200 * time.Millisecond})
			r.Start()
			await.Until(t, 20*time.Second, "the relay to send the batch entry", func() bool {
				return outboxLen(t, s, "pb") == 0 && r.Stats().Relayed >= 1
			})
			got, counts := readOrders(t, brokers)
			for _, p := range out {
				if want := OrderEvent(&p.a.Order); got[p.a.ID] != want || counts[p.a.ID] < 1 {
					t.Errorf("order %d: Kafka has %+v (%d times), want %+v", p.a.ID, got[p.a.ID], counts[p.a.ID], want)
				}
			}
			for _, p := range entries[big] {
				if counts[p.a.ID] != 2 && p.a.ID != orphan {
					t.Errorf("order %d of the re-sent entry is in Kafka %d times, want 2", p.a.ID, counts[p.a.ID])
				}
			}
			if n := pendingCount(t, s, "pb"); n != 0 {
				t.Errorf("relay group still has %d pending entries", n)
			}
		})
	}
}
