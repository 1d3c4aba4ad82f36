package sale

import (
	"bytes"
	"encoding/binary"
	"strings"

	"flashgate/orders/order"
	"flashgate/orders/orderid"
	"flashgate/sale/api"
)

var (
	pathStatus = []byte("/api/seckill/status")
	pathToken  = []byte("/api/seckill/token")
	pathDo     = []byte("/api/seckill/do")
	pathResult = []byte("/api/seckill/result")
	pathEvents = []byte("/api/seckill/events")
	pathLogin  = []byte("/api/login")
	// The waiting room's calls (room.go).
	pathChallenge = []byte("/api/seckill/challenge")
	pathQueue     = []byte("/api/seckill/queue")
	pathLottery   = []byte("/api/seckill/queue/lottery")
)

// Parse identifies the call and reads its parameters into r, before the
// filter chain runs. It never allocates for a well-formed call: ids and
// tokens stay views of the request (valid until the handler returns).
func Parse(r *api.Call, maxBody int) *api.Rejection {
	ctx := r.Ctx
	path := ctx.Path()
	get := ctx.IsGet() || ctx.IsHead()
	switch {
	case bytes.Equal(path, pathStatus):
		r.Endpoint = api.EndpointStatus
	case bytes.Equal(path, pathToken):
		r.Endpoint = api.EndpointToken
	case bytes.Equal(path, pathDo):
		r.Endpoint = api.EndpointDo
	case bytes.Equal(path, pathResult):
		r.Endpoint = api.EndpointResult
	case bytes.Equal(path, pathEvents):
		r.Endpoint = api.EndpointEvents
	case bytes.Equal(path, pathLogin):
		r.Endpoint = api.EndpointLogin
	case bytes.Equal(path, pathChallenge):
		r.Endpoint = api.EndpointChallenge
	case bytes.Equal(path, pathQueue):
		r.Endpoint = api.EndpointQueue
		if !get {
			r.Endpoint = api.EndpointJoin
		}
	case bytes.Equal(path, pathLottery):
		r.Endpoint = api.EndpointLottery
	default:
		return api.NoSuchCall
	}
	switch r.Endpoint {
	case api.EndpointStatus, api.EndpointResult, api.EndpointEvents, api.EndpointChallenge, api.EndpointQueue, api.EndpointLottery:
		if !get {
			return api.MethodNotAllowed
		}
		args := ctx.QueryArgs()
		r.ProductID = args.Peek("productId")
		byProduct := r.Endpoint != api.EndpointResult && r.Endpoint != api.EndpointEvents
		if !order.ValidProductID(r.ProductID) {
			if byProduct {
				return api.BadProductID
			}
			return api.BadOrderRef
		}
		if !byProduct {
			id, ok := orderid.Parse(args.Peek("orderId"))
			if !ok || id <= 0 {
				return api.BadOrderRef
			}
			r.OrderID = id
		}
		return nil
	}
	if !ctx.IsPost() {
		return api.MethodNotAllowed
	}
	body := ctx.PostBody()
	if len(body) > maxBody {
		return api.TooLarge
	}
	var b callBody
	if !b.parse(body) {
		return api.BadJSON
	}
	if r.Endpoint == api.EndpointLogin {
		if !b.hasUser || !order.ValidUserID(b.userID) {
			return api.BadUserID
		}
		r.UserID = b.userID
		return nil
	}
	if !b.hasProduct || !order.ValidProductID(b.productID) {
		return api.BadProductID
	}
	r.ProductID = b.productID
	if r.Endpoint == api.EndpointJoin {
		r.Challenge, r.Nonce = b.challenge, b.nonce
	}
	if r.Endpoint == api.EndpointDo {
		if !b.hasToken || len(b.token) == 0 {
			return api.NoToken
		}
		r.Token = b.token
		r.Qty = 1
		if b.hasQty {
			if b.qty < order.MinQty || b.qty > order.MaxQty {
				return api.BadQuantity
			}
			r.Qty = int(b.qty)
		}
	}
	return nil
}

// callBody is the union of the sale API's request bodies.
type callBody struct {
	productID, token, userID     []byte
	challenge, nonce             []byte
	qty                          int64
	hasProduct, hasToken, hasQty bool
	hasUser                      bool
}

// parse reads one flat JSON object. Known keys must have the right type
// (strings without escapes — ids and tokens never need them — and an
// integer quantity); unknown keys are skipped if they hold scalars, so
// clients can add fields. Anything else is malformed.
func (b *callBody) parse(in []byte) bool {
	p := jsonScanner{in: in}
	p.ws()
	if !p.eat('{') {
		return false
	}
	p.ws()
	if p.eat('}') {
		p.ws()
		return p.done()
	}
	for {
		p.ws()
		key, ok := p.str()
		if !ok {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
		switch string(key) {
		case "productId":
			b.productID, ok = p.str()
			b.hasProduct = true
		case "token":
			b.token, ok = p.str()
			b.hasToken = true
		case "userId":
			b.userID, ok = p.str()
			b.hasUser = true
		case "challenge":
			b.challenge, ok = p.str()
		case "nonce":
			b.nonce, ok = p.str()
		case "quantity":
			b.qty, ok = p.integer()
			b.hasQty = true
		default:
			ok = p.skipScalar()
		}
		if !ok {
			return false
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if !p.eat('}') {
			return false
		}
		p.ws()
		return p.done()
	}
}

type jsonScanner struct {
	in  []byte
	pos int
}

func (p *jsonScanner) done() bool { return p.pos == len(p.in) }

func (p *jsonScanner) ws() {
	// Most bodies have no whitespace at all: one comparison says so.
	if p.pos < len(p.in) && p.in[p.pos] > ' ' {
		return
	}
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonScanner) eat(c byte) bool {
	if p.pos < len(p.in) && p.in[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// str reads a string with no escapes or control characters. It steps over
// the string a word at a time until a word holds a quote, a backslash or a
// control character, then byte by byte: a purchase token is over a hundred
// characters, and a loop over its bytes was most of Parse's cost.
func (p *jsonScanner) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.pos
	for len(p.in)-p.pos >= 8 && plainWord(binary.LittleEndian.Uint64(p.in[p.pos:])) {
		p.pos += 8
	}
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		switch {
		case c == '"':
			s := p.in[start:p.pos]
			p.pos++
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.pos++
	}
	return nil, false
}

// Repeated bytes for plainWord.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord reports whether none of the 8 bytes of w is a quote, a
// backslash or a control character (below 0x20): (x - ones*n) &^ x & highs
// is non-zero exactly when some byte of x is below n, for n <= 0x80 (a
// borrow may mark the wrong byte, never a word without one), and a byte
// equal to c is a zero byte of x ^ ones*c.
func plainWord(w uint64) bool {
	q, bs := w^(ones*'"'), w^(ones*'\\')
	return ((w-ones*0x20)&^w|(q-ones)&^q|(bs-ones)&^bs)&highs == 0
}

// integer reads an optionally negative whole number (at most 9 digits).
func (p *jsonScanner) integer() (int64, bool) {
	neg := p.eat('-')
	start := p.pos
	var n int64
	for p.pos < len(p.in) && p.in[p.pos] >= '0' && p.in[p.pos] <= '9' {
		n = n*10 + int64(p.in[p.pos]-'0')
		p.pos++
		if p.pos-start > 9 {
			return 0, false
		}
	}
	if p.pos == start || (p.pos < len(p.in) && (p.in[p.pos] == '.' || p.in[p.pos] == 'e' || p.in[p.pos] == 'E')) {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// skipScalar skips a string, number, true, false or null.
func (p *jsonScanner) skipScalar() bool {
	if p.pos >= len(p.in) {
		return false
	}
	switch c := p.in[p.pos]; {
	case c == '"':
		p.pos++
		for p.pos < len(p.in) {
			switch p.in[p.pos] {
			case '\\':
				p.pos += 2
				continue
			case '"':
				p.pos++
				return true
			}
			p.pos++
		}
		return false
	case c == '-' || (c >= '0' && c <= '9'):
		for p.pos < len(p.in) && strings.IndexByte("+-.eE0123456789", p.in[p.pos]) >= 0 {
			p.pos++
		}
		return true
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(p.in)-p.pos >= len(lit) && string(p.in[p.pos:p.pos+len(lit)]) == lit {
			p.pos += len(lit)
			return true
		}
	}
	return false
}
