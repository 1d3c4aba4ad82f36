package order

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Version is the schema version written in every event ("v"). Consumers
// refuse versions they do not know (dead-letter) rather than guess.
const Version = 1

// Event types.
const (
	TypeOrder   = "order"   // a successful deduction: store the order
	TypeRelease = "release" // the order's units went back to stock: mark it released
	TypePaid    = "paid"    // the payment arrived before the deadline: the order is kept for good
)

// Why a release happened (Event.Reason). An absent reason is a cancel: the
// events written before deadlines existed carry none.
const (
	ReasonCancelled = "cancelled" // released by a cancel call
	ReasonExpired   = "expired"   // released by the pay deadline
)

// Event is one message on the orders topic, keyed by order id, JSON:
//
//	{"v":1,"type":"order","orderId":"120850008860790784","productId":"p1",
//	 "userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,
//	 "edge":1}
//
// The order's fields are Order's, flattened by encoding/json. orderId
// is a decimal string so that no consumer loses precision on a 64-bit id. A
// release carries the same fields as the order it releases, plus
// releasedMs and its reason; a paid event carries the order's fields plus
// paidMs. Redis decides which of paid and expired happens to an order, so
// the store never sees both.
type Event struct {
	V    int    `json:"v"`
	Type string `json:"type"`
	Order
	ReleasedMs int64  `json:"releasedMs,omitempty"`
	Reason     string `json:"reason,omitempty"`
	PaidMs     int64  `json:"paidMs,omitempty"`
}

// Expired reports whether the event is a release by the pay deadline.
func (e *Event) Expired() bool { return e.Type == TypeRelease && e.Reason == ReasonExpired }

// StoreVersion is the row version of the event for a store that keeps the
// highest version of an order (ClickHouse's ReplacingMergeTree): the order
// event is CreatedMs, a settlement (paid or release) is its time but never
// below CreatedMs+1, so the settlement wins over the order whatever the
// edges' clocks say and whichever arrives first.
func (e *Event) StoreVersion() int64 {
	switch e.Type {
	case TypePaid:
		return max(e.PaidMs, e.CreatedMs+1)
	case TypeRelease:
		return max(e.ReleasedMs, e.CreatedMs+1)
	}
	return e.CreatedMs
}

// Key is the Kafka message key: the order id, so all events of one order
// land in one partition, in order.
func (e *Event) Key() []byte { return strconv.AppendInt(nil, e.ID, 10) }

// Encode renders the event.
func (e *Event) Encode() ([]byte, error) { return e.AppendEncode(nil) }

// AppendEncode appends the event's JSON to dst: the bytes encoding/json
// would write for it (TestEncodeMatchesJSON, FuzzEncodeMatchesJSON), without
// its reflection. Every edge encodes each order event once on the purchase
// path, and json.Marshal was ~5 % of the edge's CPU there. Once the event is
// valid every string in it is from an alphabet JSON writes as is (the type
// and reason constants, ValidProductID, ValidUserID), so nothing needs
// escaping.
func (e *Event) AppendEncode(dst []byte) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return dst, err
	}
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(e.V), 10)
	dst = appendStr(dst, `,"type":"`, e.Type)
	dst = append(dst, `,"orderId":"`...)
	dst = strconv.AppendInt(dst, e.ID, 10)
	dst = appendStr(dst, `","productId":"`, e.ProductID)
	dst = appendStr(dst, `,"userId":"`, e.UserID)
	dst = appendNum(dst, `,"quantity":`, int64(e.Qty))
	dst = appendNum(dst, `,"priceCents":`, e.PriceCents)
	dst = appendNum(dst, `,"createdMs":`, e.CreatedMs)
	dst = appendNum(dst, `,"edge":`, int64(e.Edge))
	if e.PayByMs != 0 {
		dst = appendNum(dst, `,"payByMs":`, e.PayByMs)
	}
	if e.ReleasedMs != 0 {
		dst = appendNum(dst, `,"releasedMs":`, e.ReleasedMs)
	}
	if e.Reason != "" {
		dst = appendStr(dst, `,"reason":"`, e.Reason)
	}
	if e.PaidMs != 0 {
		dst = appendNum(dst, `,"paidMs":`, e.PaidMs)
	}
	return append(dst, '}'), nil
}

// appendStr appends key (which opens the string) and v, and closes it.
func appendStr(dst []byte, key, v string) []byte {
	dst = append(dst, key...)
	dst = append(dst, v...)
	return append(dst, '"')
}

func appendNum(dst []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(dst, key...), v, 10)
}

// ErrMalformed wraps every decoding failure; such events go to the
// dead-letter topic.
var ErrMalformed = errors.New("orders: malformed event")

// Decode parses and validates one event. It takes exactly what
// encoding/json would take into an Event — keys matched case-insensitively
// as encoding/json folds them, the last of repeated keys winning, null
// leaving a field as it is, unknown keys ignored (their values still
// well-formed JSON), the whole input one JSON value — and refuses the rest
// with ErrMalformed (FuzzDecodeMatchesJSON holds it to that). It is written
// out by hand for the event's fixed schema: the consumer decodes every event
// once, and encoding/json's reflection was most of its CPU per order.
func Decode(b []byte) (Event, error) {
	return decode(b, nil)
}

// Decoder decodes the events of a batch, as Decode does, sharing one
// string per product id among them: the consumer's batches hold a few
// products' orders, so most product ids come back as a string already
// made (one allocation fewer per event). Not for concurrent use.
type Decoder struct {
	products map[string]string
}

// maxInterned bounds the product ids a Decoder keeps: past it, it starts
// again (a batch has a few; a stream of distinct ids must not grow it).
const maxInterned = 1024

// Decode is Decode's, with the product id shared.
func (dc *Decoder) Decode(b []byte) (Event, error) {
	if dc.products == nil || len(dc.products) >= maxInterned {
		dc.products = make(map[string]string)
	}
	return decode(b, dc.products)
}

func decode(b []byte, products map[string]string) (Event, error) {
	var e Event
	d := decoder{b: b, products: products}
	if err := d.event(&e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Validate checks the fields every consumer relies on: the schema version
// and type, and the order (Order.Validate).
func (e *Event) Validate() error {
	switch {
	case e.V != Version:
		return fmt.Errorf("%w: unknown schema version %d", ErrMalformed, e.V)
	case e.Type != TypeOrder && e.Type != TypeRelease && e.Type != TypePaid:
		return fmt.Errorf("%w: unknown type %q", ErrMalformed, e.Type)
	case e.Reason != "" && (e.Type != TypeRelease || e.Reason != ReasonCancelled && e.Reason != ReasonExpired):
		return fmt.Errorf("%w: reason %q on a %s event", ErrMalformed, e.Reason, e.Type)
	case e.ReleasedMs < 0 || e.PaidMs < 0:
		return fmt.Errorf("%w: negative time", ErrMalformed)
	}
	if err := e.Order.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

// maxDepth is encoding/json's nesting limit (arrays and objects, the event
// itself counted): deeper input is an error there, so it is here.
const maxDepth = 10000

// decoder reads one event from b; i is the next byte.
type decoder struct {
	b   []byte
	i   int
	buf []byte // unescaped strings
	// products, if set, are the product id strings made so far (Decoder).
	products map[string]string
}

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: "+format, append([]any{d.i}, args...)...)
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// event reads the whole input: one object, then only white space.
func (d *decoder) event(e *Event) error {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		// encoding/json takes a null as no change, or refuses another
		// value for a struct: both end in an invalid event.
		if err := d.skipValue(0); err != nil {
			return err
		}
		return d.end(errors.New("not a JSON object"))
	}
	d.i++
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return d.end(nil)
	}
	var failed error // a wrong value type: the input must still be well-formed
	for {
		d.space()
		key, err := d.str()
		if err != nil {
			return err
		}
		f := fieldOf(key)
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return d.errorf("want ':' after a key")
		}
		d.i++
		d.space()
		if err := d.field(e, f); err != nil {
			if _, syntax := err.(syntaxError); syntax {
				return err
			}
			if failed == nil {
				failed = err
			}
		}
		d.space()
		if d.i >= len(d.b) {
			return d.errorf("unexpected end of input")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
			continue
		case '}':
			d.i++
			return d.end(failed)
		}
		return d.errorf("want ',' or '}' after a value")
	}
}

// end checks that only white space follows the event.
func (d *decoder) end(err error) error {
	d.space()
	if d.i != len(d.b) {
		return d.errorf("data after the event")
	}
	return err
}

// syntaxError is input that is not JSON; other errors are values of the
// wrong type, which encoding/json reports only once the whole input is read.
type syntaxError struct{ error }

// field names, in Event's order.
const (
	fUnknown = iota
	fV
	fType
	fOrderID
	fProductID
	fUserID
	fQty
	fPriceCents
	fCreatedMs
	fEdge
	fPayByMs
	fReleasedMs
	fReason
	fPaidMs
)

// foldedNames are the JSON names folded as encoding/json folds keys (ASCII
// upper case), each with its field.
var foldedNames = map[string]int{
	"V": fV, "TYPE": fType, "ORDERID": fOrderID, "PRODUCTID": fProductID, "USERID": fUserID,
	"QUANTITY": fQty, "PRICECENTS": fPriceCents, "CREATEDMS": fCreatedMs, "EDGE": fEdge,
	"PAYBYMS": fPayByMs, "RELEASEDMS": fReleasedMs, "REASON": fReason, "PAIDMS": fPaidMs,
}

// fieldOf matches a key as encoding/json does: exactly, or else
// case-insensitively, every rune folded to upper(lower(r)) — so that the
// Kelvin sign matches k and the long s matches s, as there.
func fieldOf(key []byte) int {
	switch string(key) { // the names as Encode writes them: no folding
	case "v":
		return fV
	case "type":
		return fType
	case "orderId":
		return fOrderID
	case "productId":
		return fProductID
	case "userId":
		return fUserID
	case "quantity":
		return fQty
	case "priceCents":
		return fPriceCents
	case "createdMs":
		return fCreatedMs
	case "edge":
		return fEdge
	case "payByMs":
		return fPayByMs
	case "releasedMs":
		return fReleasedMs
	case "reason":
		return fReason
	case "paidMs":
		return fPaidMs
	}
	var arr [16]byte
	folded := arr[:0]
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			folded = append(folded, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		folded = utf8.AppendRune(folded, unicode.ToUpper(unicode.ToLower(r)))
		i += n
	}
	return foldedNames[string(folded)]
}

// field reads one value into the field f.
func (d *decoder) field(e *Event, f int) error {
	if d.i >= len(d.b) {
		return syntaxError{d.errorf("unexpected end of input")}
	}
	if d.b[d.i] == 'n' { // null changes nothing, whatever the field
		return d.skipValue(1)
	}
	switch f {
	case fV:
		return d.intField(&e.V)
	case fType:
		return d.strField(&e.Type)
	case fOrderID:
		return d.quotedInt(&e.ID)
	case fProductID:
		if d.products != nil {
			return d.productField(&e.ProductID)
		}
		return d.strField(&e.ProductID)
	case fUserID:
		return d.strField(&e.UserID)
	case fQty:
		return d.intField(&e.Qty)
	case fPriceCents:
		return d.int64Field(&e.PriceCents)
	case fCreatedMs:
		return d.int64Field(&e.CreatedMs)
	case fEdge:
		return d.intField(&e.Edge)
	case fPayByMs:
		return d.int64Field(&e.PayByMs)
	case fReleasedMs:
		return d.int64Field(&e.ReleasedMs)
	case fReason:
		return d.strField(&e.Reason)
	case fPaidMs:
		return d.int64Field(&e.PaidMs)
	}
	return d.skipValue(1)
}

// number reads a JSON number literal (its grammar checked) and returns
// its bytes, or nil and a type error (the value skipped) if it is another
// kind of value.
func (d *decoder) number() ([]byte, error) {
	c := d.b[d.i]
	if c != '-' && (c < '0' || c > '9') {
		if err := d.skipValue(1); err != nil {
			return nil, err
		}
		return nil, errors.New("a number field holds another kind of value")
	}
	start := d.i
	if c == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.i < len(d.b) && d.b[d.i] >= '1' && d.b[d.i] <= '9':
		d.digits()
	default:
		return nil, syntaxError{d.errorf("malformed number")}
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if d.digits() == 0 {
			return nil, syntaxError{d.errorf("malformed number")}
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if d.digits() == 0 {
			return nil, syntaxError{d.errorf("malformed number")}
		}
	}
	return d.b[start:d.i], nil
}

func (d *decoder) digits() int {
	n := 0
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
		n++
	}
	return n
}

// parseInt is encoding/json's rule for an integer field: what
// strconv.ParseInt takes in base 10 and fits the field's bits.
func parseInt(lit []byte, bits int) (int64, error) {
	if n, ok := plainInt(lit, bits); ok {
		return n, nil
	}
	n, err := strconv.ParseInt(string(lit), 10, bits)
	if err != nil {
		return 0, fmt.Errorf("number %q does not fit an integer field", lit)
	}
	return n, nil
}

// plainInt is parseInt's common case, without strconv's generality:
// digits with an optional '-', at most 18 of them (no int64 overflow),
// the value inside bits. ok is false for anything else, which parseInt
// leaves to strconv.ParseInt.
func plainInt(lit []byte, bits int) (n int64, ok bool) {
	digits := lit
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		digits = lit[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	if bits < 64 && (n < -(1<<(bits-1)) || n >= 1<<(bits-1)) {
		return 0, false
	}
	return n, true
}

func (d *decoder) int64Field(dst *int64) error {
	lit, err := d.number()
	if err != nil {
		return err
	}
	n, err := parseInt(lit, 64)
	if err != nil {
		return err
	}
	*dst = n
	return nil
}

func (d *decoder) intField(dst *int) error {
	lit, err := d.number()
	if err != nil {
		return err
	}
	n, err := parseInt(lit, strconv.IntSize)
	if err != nil {
		return err
	}
	*dst = int(n)
	return nil
}

// quotedInt reads the order id: encoding/json's ",string" option, a
// string whose (unescaped) content ParseInt takes, or null inside it.
func (d *decoder) quotedInt(dst *int64) error {
	if d.b[d.i] != '"' {
		if err := d.skipValue(1); err != nil {
			return err
		}
		return errors.New("orderId is not a string")
	}
	s, err := d.str()
	if err != nil {
		return err
	}
	switch {
	case string(s) == "null":
		return nil
	case len(s) == 0 || s[0] != '-' && (s[0] < '0' || s[0] > '9'):
		return fmt.Errorf("orderId %q is not a number", s)
	}
	n, err := parseInt(s, 64)
	if err != nil {
		return err
	}
	*dst = n
	return nil
}

// strField reads a string field; the event types and reasons are the
// constants, the rest copies.
func (d *decoder) strField(dst *string) error {
	if d.b[d.i] != '"' {
		if err := d.skipValue(1); err != nil {
			return err
		}
		return errors.New("a string field holds another kind of value")
	}
	s, err := d.str()
	if err != nil {
		return err
	}
	for _, k := range [...]string{TypeOrder, TypeRelease, TypePaid, ReasonCancelled, ReasonExpired} {
		if string(s) == k {
			*dst = k
			return nil
		}
	}
	*dst = string(s)
	return nil
}

// productField is strField for the product id, taking the string made
// for an earlier event of the same product (Decoder).
func (d *decoder) productField(dst *string) error {
	if d.b[d.i] != '"' {
		return d.strField(dst) // its error
	}
	s, err := d.str()
	if err != nil {
		return err
	}
	if p, ok := d.products[string(s)]; ok {
		*dst = p
		return nil
	}
	p := string(s)
	if len(p) > MaxProductIDLen { // never valid: not worth keeping
		*dst = p
		return nil
	}
	d.products[p] = p
	*dst = p
	return nil
}

// plainByte marks the bytes a string may hold as they are: printable
// ASCII but the quote and the backslash (a table: one load a byte where
// the comparisons were four).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a JSON string at d.i and returns its content unescaped, with
// invalid UTF-8 and lone surrogates as U+FFFD (as encoding/json does). The
// slice is valid until the next call.
func (d *decoder) str() ([]byte, error) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, syntaxError{d.errorf("want a string")}
	}
	d.i++
	start := d.i
	// The common case: plain ASCII, nothing to copy.
	for d.i < len(d.b) && plainByte[d.b[d.i]] {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '"' {
		d.i++
		return d.b[start : d.i-1], nil
	}
	out := append(d.buf[:0], d.b[start:d.i]...)
	for {
		if d.i >= len(d.b) {
			return nil, syntaxError{d.errorf("unterminated string")}
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			d.buf = out
			return out, nil
		case c < 0x20:
			return nil, syntaxError{d.errorf("control character in a string")}
		case c == '\\':
			d.i++
			if d.i >= len(d.b) {
				return nil, syntaxError{d.errorf("unterminated string")}
			}
			e := d.b[d.i]
			d.i++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return nil, syntaxError{d.errorf("malformed \\u escape")}
				}
				if utf16IsSurrogate(r) {
					// A pair makes one rune; anything else is U+FFFD and
					// the next escape is read on its own.
					if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
						save := d.i
						d.i += 2
						r2, ok := d.hex4()
						if !ok {
							return nil, syntaxError{d.errorf("malformed \\u escape")}
						}
						if dec := utf16Decode(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							break
						}
						d.i = save
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, syntaxError{d.errorf("malformed escape")}
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			d.i++
		default:
			r, n := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && n == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, d.b[d.i:d.i+n]...)
			}
			d.i += n
		}
	}
}

func (d *decoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.i += 4
	return r, true
}

func utf16IsSurrogate(r rune) bool { return r >= 0xd800 && r < 0xe000 }

// utf16Decode is the rune of a surrogate pair, or U+FFFD if it is not one.
func utf16Decode(r1, r2 rune) rune {
	if r1 >= 0xd800 && r1 < 0xdc00 && r2 >= 0xdc00 && r2 < 0xe000 {
		return (r1-0xd800)<<10 | (r2 - 0xdc00) + 0x10000
	}
	return utf8.RuneError
}

// skipValue checks and skips one JSON value at d.i, depth being the
// nesting it is in (the event object is 1). Every error is a syntaxError.
func (d *decoder) skipValue(depth int) error {
	if d.i >= len(d.b) {
		return syntaxError{d.errorf("unexpected end of input")}
	}
	switch c := d.b[d.i]; {
	case c == '"':
		_, err := d.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		_, err := d.number()
		return err
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '{', c == '[':
		if depth+1 > maxDepth {
			return syntaxError{d.errorf("nested too deep")}
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		d.i++
		d.space()
		if d.i < len(d.b) && d.b[d.i] == closer {
			d.i++
			return nil
		}
		for {
			d.space()
			if c == '{' {
				if _, err := d.str(); err != nil {
					return err
				}
				d.space()
				if d.i >= len(d.b) || d.b[d.i] != ':' {
					return syntaxError{d.errorf("want ':' after a key")}
				}
				d.i++
				d.space()
			}
			if err := d.skipValue(depth + 1); err != nil {
				return err
			}
			d.space()
			if d.i >= len(d.b) {
				return syntaxError{d.errorf("unexpected end of input")}
			}
			if d.b[d.i] == ',' {
				d.i++
				continue
			}
			if d.b[d.i] == closer {
				d.i++
				return nil
			}
			return syntaxError{d.errorf("want ',' or %q", closer)}
		}
	}
	return syntaxError{d.errorf("unexpected character %q", d.b[d.i])}
}

func (d *decoder) literal(word string) error {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return syntaxError{d.errorf("malformed literal")}
	}
	d.i += len(word)
	return nil
}
