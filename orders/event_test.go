package orders

import (
	"errors"
	"testing"
)

func TestEventRoundTrip(t *testing.T) {
	e := Event{V: 1, Type: TypeOrder, OrderID: 120850008860790784, ProductID: "p1", UserID: "alice", Qty: 2, PriceCents: 9900, CreatedMs: 1796038487397, Edge: 3}
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

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{
		``, `{`, `[]`, `{"v":2,"type":"order","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"refund","orderId":"1","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":"0","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":"1","productId":"","userId":"u","quantity":1,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":"1","productId":"p","userId":"u","quantity":0,"createdMs":1}`,
		`{"v":1,"type":"order","orderId":1,"productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%s) = %v, want ErrMalformed", in, err)
		}
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
