package consumer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"flashgate/orders/broker"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
)

// Tail is what the group has not committed, and only that: the product's
// events above the committed offsets, in each partition's order, without
// another product's and without what the consumer would dead-letter.
func TestTail(t *testing.T) {
	ctx := context.Background()
	brokers, _ := startKafka(t)
	s, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tail := func() []order.Event {
		t.Helper()
		evs, err := Tail(ctx, brokers, broker.Security{}, testTopic, ordersConf.Group, "a")
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	if evs, err := Tail(ctx, brokers, broker.Security{}, "no-such-topic", ordersConf.Group, "a"); len(evs) != 0 || err != nil {
		t.Fatalf("tail of a missing topic %v %v", evs, err)
	}
	w := newWriter(brokers, testTopic)
	defer w.Close()
	var id int64
	events := func(p string, n int) []order.Event {
		var evs []order.Event
		for range n {
			id++
			evs = append(evs, order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{
				ID: id, ProductID: p, UserID: "u", Qty: 1, CreatedMs: 1,
			}})
		}
		return evs
	}
	// Nothing committed yet (no group): the whole topic.
	first := events("a", 20)
	publish(t, w, append(events("b", 5), first...))
	if got := ids(tail()); !slices.Equal(got, ids(first)) { // (sorted)
		t.Fatalf("tail before any commit %v, want %v", got, ids(first))
	}

	// Stored and committed, then the group's member goes.
	cctx, stop := context.WithCancel(ctx)
	c, err := New(Config{Brokers: brokers, Store: s, Topic: testTopic, Group: ordersConf.Group, BatchTime: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	if err := c.Drained(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if evs := tail(); len(evs) != 0 {
		t.Fatalf("tail after the drain: %d events", len(evs))
	}

	// The tail: many of a (several fetches' worth of batches), a copy of
	// one, b's, a malformed message and an event the store refuses.
	later := events("a", 3000)
	later = append(later, later[7])
	publish(t, w, append(events("b", 50), later...))
	bad := order.Event{V: 1, Type: order.TypeOrder, Order: order.Order{ID: 1, ProductID: "a", UserID: "u", Qty: 0, CreatedMs: 1}}
	badJSON := []byte(`{"v":1,"type":"order","orderId":"5","productId":"a","userId":"u","quantity":0,"createdMs":1,"edge":1}`)
	publishRaw(t, w, []kafka.Message{{Key: []byte("x"), Value: []byte("not json")}, {Key: bad.Key(), Value: badJSON}})
	for _, fetch := range []int64{tailFetchBytes, 4 << 10} {
		defer func(was int64) { tailFetchBytes = was }(tailFetchBytes)
		tailFetchBytes = fetch // small: a span in many fetches
		got, want := ids(tail()), ids(later)
		if !slices.Equal(got, want) {
			t.Fatalf("tail (fetches of %d bytes): %d events, want %d (first %v, want %v)", fetch, len(got), len(want), got[:min(5, len(got))], want[:5])
		}
	}
	if lag, err := GroupLag(ctx, brokers, broker.Security{}, testTopic, ordersConf.Group); err != nil || lag != int64(len(later)+52) {
		t.Fatalf("lag %d %v, want %d", lag, err, len(later)+52)
	}

	// No broker: an error, never an empty tail.
	if _, err := Tail(ctxT(t, 2*time.Second), []string{"127.0.0.1:1"}, broker.Security{}, testTopic, ordersConf.Group, "a"); err == nil {
		t.Fatal("tail without a broker: no error")
	}
}

// ids is the events' order ids, sorted (the tail is in each partition's
// order, partition after partition).
func ids(evs []order.Event) []int64 {
	out := make([]int64, len(evs))
	for i := range evs {
		out[i] = evs[i].ID
	}
	slices.Sort(out)
	return out
}
