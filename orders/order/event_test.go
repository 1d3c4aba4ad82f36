package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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

// decodeJSON is Decode as it was written with encoding/json: the reference
// the hand-written decoder must agree with.
func decodeJSON(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// decodeSeeds are valid events and the corners of encoding/json's rules
// that an event may hit: folded keys, escapes, repeated keys, null, unknown
// keys with nested values, ",string" contents, numbers, depth.
var decodeSeeds = []string{
	`{"v":1,"type":"order","orderId":"120850008860790784","productId":"p1","userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,"edge":1}`,
	`{"v":1,"type":"release","orderId":"120850008860790784","productId":"p1","userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,"edge":1,"payByMs":1796038488397,"releasedMs":1796038490000,"reason":"expired"}`,
	`{"v":1,"type":"paid","orderId":"120850008860790784","productId":"p1","userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,"edge":1,"payByMs":1796038488397,"paidMs":1796038488000}`,
	` {"V":1,"TYPE":"order","ORDERID":"7","productid":"p","UserId":"u","quantity":1,"createdMs":1} ` + "\n",
	"{\"v\":1,\"type\":\"order\",\"orderId\":\"7\",\"productId\":\"p\",\"userId\":\"u\",\"quantity\":1,\"createdM\u017f\":1,\"edge\":0,\"\u212aey\":2}",
	"{\"v\":1,\"type\":\"order\",\"orderId\":\"7\",\"productId\":\"p\",\"userId\":\"u\",\"quantity\":1,\"createdMs\":1,\"\u0130\":1,\"\u0131\":1}",
	`{"\u0076":1,"type":"\u006frder","orderId":"\u0037","productId":"p\/q","userId":"u\ud83d\ude00","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"\ud800x","quantity":1,"createdMs":1}`,
	`{"v":1,"v":null,"type":"order","type":null,"orderId":null,"orderId":"7","orderId":"null","productId":"p","userId":"u","quantity":2,"quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"07","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"-0","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"+7","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"7e0","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"true","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"9223372036854775808","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1.0,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1e0,"createdMs":1}`,
	`{"v":-0,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":"1","createdMs":1}`,
	`{"v":1,"type":"order","orderId":"7","productId":1,"userId":"u","quantity":1,"createdMs":1}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1,"x":{"a":[1,2.5e-3,true,false,null,"s",{}],"b":[]},"y":[[]]}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1,"edge":{}}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1}x`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1,}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":01}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1,"x":"\x"}`,
	"{\"v\":1,\"type\":\"order\",\"orderId\":\"7\",\"productId\":\"p\",\"userId\":\"u\xff\",\"quantity\":1,\"createdMs\":1}",
	"{\"v\":1,\"type\":\"order\",\"orderId\":\"7\",\"productId\":\"p\",\"userId\":\"u\",\"quantity\":1,\"createdMs\":1,\"x\":\"\t\"}",
	`null`, `[]`, `"x"`, `{}`, ``, `{"v":1`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1,"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"v":1,"type":"order","orderId":"7","productId":"p","userId":"u","quantity":1,"createdMs":1,"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
}

// agree fails t if Decode and encoding/json disagree on b: both must
// refuse it (Decode with ErrMalformed) or both take the same event.
// batchDecoder decodes every input agree sees, as the consumer's Decoder
// decodes a stream: its shared product ids must change nothing.
var batchDecoder Decoder

func agree(t *testing.T, b []byte) {
	t.Helper()
	got, err := Decode(b)
	want, wantErr := decodeJSON(b)
	if got2, err2 := batchDecoder.Decode(b); got2 != got || (err2 == nil) != (err == nil) || err != nil && err2.Error() != err.Error() {
		t.Fatalf("Decoder.Decode(%q) = %+v, %v; Decode: %+v, %v", b, got2, err2, got, err)
	}
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("Decode(%q): err %v, encoding/json: %v", b, err, wantErr)
	case err != nil && !errors.Is(err, ErrMalformed):
		t.Fatalf("Decode(%q): %v does not wrap ErrMalformed", b, err)
	case got != want:
		t.Fatalf("Decode(%q) = %+v, encoding/json: %+v", b, got, want)
	}
}

// TestDecodeMatchesJSON holds Decode to encoding/json on the seeds and on
// random mutations of them (FuzzDecodeMatchesJSON searches further).
func TestDecodeMatchesJSON(t *testing.T) {
	taken := 0
	for _, s := range decodeSeeds {
		agree(t, []byte(s))
		if _, err := Decode([]byte(s)); err == nil {
			taken++
		}
	}
	if taken < 8 {
		t.Fatalf("only %d seeds decode: the seeds no longer cover valid events", taken)
	}
	pieces := []string{`"`, `\`, `\u`, `{`, `}`, `[`, `]`, `,`, `:`, `null`, `-`, `0`, `9`, `e`, `.`, ` `, "\xff", "\u212a", `"v":`, `"orderId":"1"`, `"x":{}`}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 30000 {
		b := []byte(decodeSeeds[rng.IntN(len(decodeSeeds)-2)])
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(b) + 1)
			switch rng.IntN(4) {
			case 0: // insert a token
				b = slices.Insert(b, i, []byte(pieces[rng.IntN(len(pieces))])...)
			case 1: // delete a span
				b = slices.Delete(b, i, min(len(b), i+1+rng.IntN(4)))
			case 2: // flip a byte
				if i < len(b) {
					b[i] = byte(rng.IntN(256))
				}
			case 3: // change a digit
				if i < len(b) && b[i] >= '0' && b[i] <= '9' {
					b[i] = byte('0' + rng.IntN(10))
				}
			}
		}
		agree(t, b)
	}
}

func FuzzDecodeMatchesJSON(f *testing.F) {
	for _, s := range decodeSeeds {
		if len(s) < 1000 { // the depth seeds would slow every mutation; the test has them
			f.Add([]byte(s))
		}
	}
	f.Fuzz(agree)
}

// TestPlainIntMatchesParseInt: parseInt's fast path gives strconv's value
// where it answers, and leaves the rest to strconv.
func TestPlainIntMatchesParseInt(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-7", "007", "9900", "1796038487397", "999999999999999999",
		"-999999999999999999", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
		"", "-", "+1", "1.5", "1e3", "--1", "1-", "2147483647", "2147483648", "-2147483648", "-2147483649"} {
		for _, bits := range []int{32, 64} {
			n, ok := plainInt([]byte(s), bits)
			want, err := strconv.ParseInt(s, 10, bits)
			if ok && (err != nil || n != want) {
				t.Errorf("plainInt(%q, %d) = %d; strconv.ParseInt: %d, %v", s, bits, n, want, err)
			}
			if !ok && err == nil && !strings.HasPrefix(s, "+") && len(strings.TrimPrefix(s, "-")) <= 18 {
				t.Errorf("plainInt(%q, %d) left a plain number to strconv", s, bits)
			}
		}
	}
}

// BenchmarkDecode: Decode against the encoding/json decoding it replaced.
func BenchmarkDecode(b *testing.B) {
	in := []byte(decodeSeeds[0])
	for _, bc := range []struct {
		name   string
		decode func([]byte) (Event, error)
	}{{"hand", Decode}, {"batch", new(Decoder).Decode}, {"encoding-json", decodeJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.decode(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// encodeCase builds an event from fuzzed fields; the encoder is held to
// json.Marshal on every one of them, valid or not.
func encodeCase(typ, reason, product, user string, id, price, created, payBy, released, paid int64, qty, edge int) Event {
	return Event{V: Version, Type: typ, Reason: reason, ReleasedMs: released, PaidMs: paid, Order: Order{
		ID: id, ProductID: product, UserID: user, Qty: qty, PriceCents: price, CreatedMs: created, Edge: edge, PayByMs: payBy,
	}}
}

// encodeAgrees: a valid event encodes to json.Marshal's bytes, appended
// after what dst held; an invalid one is refused and dst comes back as it
// was.
func encodeAgrees(t *testing.T, e Event) {
	t.Helper()
	prefix := []byte("prefix")
	got, err := e.AppendEncode(prefix)
	if verr := e.Validate(); verr != nil {
		if err == nil || string(got) != "prefix" {
			t.Fatalf("AppendEncode(%+v) = %q, %v; want the error %v and dst unchanged", e, got, err, verr)
		}
		return
	}
	want, jerr := json.Marshal(&e)
	if err != nil || jerr != nil || string(got) != "prefix"+string(want) {
		t.Fatalf("AppendEncode(%+v) = %s %v\njson.Marshal = %s %v", e, got, err, want, jerr)
	}
	if back, err := Decode(got[len("prefix"):]); err != nil || back != e {
		t.Fatalf("Decode(AppendEncode) = %+v %v, want %+v", back, err, e)
	}
}

func TestEncodeMatchesJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 17))
	types := []string{TypeOrder, TypeRelease, TypePaid, "refund"}
	reasons := []string{"", ReasonCancelled, ReasonExpired, "other"}
	ids := []string{"p1", "a-b_c", "x", strings.Repeat("p", MaxProductIDLen), "bad id", "<p>"}
	users := []string{"alice", "u.s@e-r_1", strings.Repeat("u", MaxUserIDLen), "", "a&b"}
	nums := []int64{0, 1, -1, 9900, 1796038487397, 1<<63 - 1}
	for range 5000 {
		encodeAgrees(t, encodeCase(types[rng.IntN(len(types))], reasons[rng.IntN(len(reasons))],
			ids[rng.IntN(len(ids))], users[rng.IntN(len(users))],
			nums[rng.IntN(len(nums))], nums[rng.IntN(len(nums))], nums[rng.IntN(len(nums))], nums[rng.IntN(len(nums))],
			nums[rng.IntN(len(nums))], nums[rng.IntN(len(nums))], rng.IntN(MaxQty+2), rng.IntN(1<<16)))
	}
}

func FuzzEncodeMatchesJSON(f *testing.F) {
	f.Add(TypeOrder, "", "p1", "alice", int64(120850008860790784), int64(9900), int64(1796038487397), int64(0), int64(0), int64(0), 1, 1)
	f.Add(TypeRelease, ReasonExpired, "p1", "bob", int64(7), int64(0), int64(1), int64(2), int64(3), int64(0), 2, 0)
	f.Fuzz(func(t *testing.T, typ, reason, product, user string, id, price, created, payBy, released, paid int64, qty, edge int) {
		encodeAgrees(t, encodeCase(typ, reason, product, user, id, price, created, payBy, released, paid, qty, edge))
	})
}

// BenchmarkEncode: AppendEncode into a reused buffer (as the publisher
// does) against the json.Marshal it replaced.
func BenchmarkEncode(b *testing.B) {
	e := encodeCase(TypeOrder, "", "p1", "alice", 120850008860790784, 9900, 1796038487397, 1796038497397, 0, 0, 1, 1)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = e.AppendEncode(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
