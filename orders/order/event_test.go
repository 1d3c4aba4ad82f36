package order

import (
	"errors"
	"testing"
)

func TestEventRoundTrip(t *testing.T) {
	e := Event{V: 1, Type: TypeOrder, Order: Order{
		ID: 120850008860790784, ProductID: "p1", UserID: "alice", Qty: 2, PriceCents: 9900,
		CreatedMs: 1796038487397, Edge: 3,
	}}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || got != e {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if string(e.Key()) != "120850008860790784" {
		t.Fatalf("key %s", e.Key())
	}
}

// TestEventWireFormat pins the encoded bytes: the order's fields are
// flattened into the event, in this order, with these names.
func TestEventWireFormat(t *testing.T) {
	e := Event{V: 1, Type: TypeOrder, Order: Order{
		ID: 120850008860790784, ProductID: "p1", UserID: "alice", Qty: 1, PriceCents: 9900, CreatedMs: 1796038487397, Edge: 1,
	}}
	for _, tc := range []struct {
		mod  func(*Event)
		want string
	}{
		{func(*Event) {}, `{"v":1,"type":"order","orderId":"120850008860790784","productId":"p1","userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,"edge":1}`},
		{func(e *Event) { e.Type, e.ReleasedMs = TypeRelease, 1796038490000 },
			`{"v":1,"type":"release","orderId":"120850008860790784","productId":"p1","userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,"edge":1,"releasedMs":1796038490000}`},
		{func(e *Event) {
			e.Type, e.ReleasedMs, e.Reason, e.PayByMs = TypeRelease, 1796038490000, ReasonExpired, 1796038488397
		},
			`{"v":1,"type":"release","orderId":"120850008860790784","productId":"p1","userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,"edge":1,"payByMs":1796038488397,"releasedMs":1796038490000,"reason":"expired"}`},
		{func(e *Event) { e.Type, e.PaidMs, e.PayByMs = TypePaid, 1796038488000, 1796038488397 },
			`{"v":1,"type":"paid","orderId":"120850008860790784","productId":"p1","userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,"edge":1,"payByMs":1796038488397,"paidMs":1796038488000}`},
		{func(e *Event) { e.Order = Order{ID: 7, ProductID: "p", UserID: "u", Qty: 1, CreatedMs: 1} },
			`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"priceCents":0,"createdMs":1,"edge":0}`},
	} {
		ev := e
		tc.mod(&ev)
		b, err := ev.Encode()
		if err != nil || string(b) != tc.want {
			t.Errorf("Encode = %s %v\nwant    %s", b, err, tc.want)
		}
		if got, err := Decode([]byte(tc.want)); err != nil || got != ev {
			t.Errorf("Decode(%s) = %+v %v, want %+v", tc.want, got, err, ev)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{
		``, `{`, `[]`, `{"v":2,"type":"order","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"refund","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":"0","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":"1","productId":"","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":"1","productId":"p","userId":"u","quantity":0,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":1,"productId":"p","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":5,"payByMs":5}`,
		`{"v":1,"type":"order","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1,"reason":"expired"}`,
		`{"v":1,"type":"paid","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1,"reason":"cancelled"}`,
		`{"v":1,"type":"release","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1,"reason":"refunded"}`,
		`{"v":1,"type":"paid","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1,"paidMs":-3}`,
	} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%s) = %v, want ErrMalformed", in, err)
		}
	}
}

// TestStoreVersion: a settlement always outranks the order it settles, even
// when the settling edge's clock is behind the one that took the order.
func TestStoreVersion(t *testing.T) {
	o := Order{ID: 1, ProductID: "p", UserID: "u", Qty: 1, CreatedMs: 1000}
	for _, tc := range []struct {
		e    Event
		want int64
	}{
		{Event{Type: TypeOrder, Order: o}, 1000},
		{Event{Type: TypePaid, Order: o, PaidMs: 1500}, 1500},
		{Event{Type: TypePaid, Order: o, PaidMs: 900}, 1001},
		{Event{Type: TypeRelease, Order: o, ReleasedMs: 2000, Reason: ReasonExpired}, 2000},
		{Event{Type: TypeRelease, Order: o}, 1001},
	} {
		if got := tc.e.StoreVersion(); got != tc.want {
			t.Errorf("%s %+v: version %d, want %d", tc.e.Type, tc.e, got, tc.want)
		}
	}
	if !(&Event{Type: TypeRelease, Reason: ReasonExpired}).Expired() || (&Event{Type: TypeRelease}).Expired() {
		t.Error("Expired() wrong")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"order","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err == nil && e.Validate() != nil {
			t.Fatal("decoded an invalid event")
		}
	})
}
