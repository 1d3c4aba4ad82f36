package sale

import (
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"flashgate/orders/order"
	"flashgate/sale/api"
)

const testMaxBody = 4096

// parseCtx builds the RequestCtx of one call.
func parseCtx(method, uri, body string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	if body != "" {
		req.SetBodyString(body)
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(198, 51, 100, 1), Port: 40000}, nil)
	return ctx
}

func parse(method, uri, body string) (*api.Call, *api.Rejection) {
	r := &api.Call{Ctx: parseCtx(method, uri, body)}
	return r, Parse(r, testMaxBody)
}

const (
	doBody    = `{"productId":"p1","token":"tok_en-123","quantity":2}`
	tokenBody = `{"productId":"p1"}`
	loginBody = `{"userId":"alice@example.com"}`
)

// Endpoints and methods: each call answers only to its methods (405
// otherwise), and only exact paths are calls (404 NOT_FOUND).
func TestParseEndpointsAndMethods(t *testing.T) {
	calls := []struct {
		uri, body string
		ep        api.Endpoint
		methods   []string // accepted
	}{
		{"/api/seckill/status?productId=p1", "", api.EndpointStatus, []string{"GET", "HEAD"}},
		{"/api/seckill/result?orderId=42&productId=p1", "", api.EndpointResult, []string{"GET", "HEAD"}},
		{"/api/seckill/events?orderId=42&productId=p1", "", api.EndpointEvents, []string{"GET", "HEAD"}},
		{"/api/seckill/token", tokenBody, api.EndpointToken, []string{"POST"}},
		{"/api/seckill/do", doBody, api.EndpointDo, []string{"POST"}},
		{"/api/login", loginBody, api.EndpointLogin, []string{"POST"}},
	}
	for _, c := range calls {
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
			ok := strings.Contains(strings.Join(c.methods, ","), m)
			t.Run(m+" "+c.uri, func(t *testing.T) {
				r, rej := parse(m, c.uri, c.body)
				if ok {
					if rej != nil {
						t.Fatalf("rejected %d %s: %s", rej.Status, rej.Code, rej.Message)
					}
					if r.Endpoint != c.ep {
						t.Fatalf("endpoint %d, want %d", r.Endpoint, c.ep)
					}
					return
				}
				if rej != api.MethodNotAllowed || rej.Status != 405 {
					t.Fatalf("got %+v, want 405", rej)
				}
			})
		}
	}
	for _, uri := range []string{
		"/", "/api/seckill", "/api/seckill/", "/api/seckill/do/", "/api/seckill/DO", "/api/seckill/dox",
		"/api/seckill/doo", "/api/seckill/statuses?productId=p1", "/api/login/", "/api/logins", "/API/login",
		"/seckill/p1", "/api/seckill/order",
	} {
		t.Run("not found "+uri, func(t *testing.T) {
			_, rej := parse("POST", uri, doBody)
			if rej == nil || rej.Status != 404 || rej.Code != "NOT_FOUND" {
				t.Fatalf("got %+v, want 404 NOT_FOUND", rej)
			}
		})
	}
	// fasthttp normalizes the path before Parse sees it (the router does too).
	if r, rej := parse("POST", "/api/seckill//do", doBody); rej != nil || r.Endpoint != api.EndpointDo {
		t.Fatalf("normalized path: %+v %v", rej, r.Endpoint)
	}
}

func TestParseQueryCalls(t *testing.T) {
	for _, tc := range []struct {
		uri     string
		want    *api.Rejection
		product string
		order   int64
	}{
		{"/api/seckill/status?productId=p1", nil, "p1", 0},
		{"/api/seckill/status?productId=p%31", nil, "p1", 0}, // query is decoded
		{"/api/seckill/status?productId=p1&productId=p2", nil, "p1", 0},
		{"/api/seckill/status?productId=Sale_2026-11", nil, "Sale_2026-11", 0},
		{"/api/seckill/status?productId=" + strings.Repeat("a", 64), nil, strings.Repeat("a", 64), 0},
		{"/api/seckill/status?orderId=1", api.BadProductID, "", 0},
		{"/api/seckill/status", api.BadProductID, "", 0},
		{"/api/seckill/status?productId=", api.BadProductID, "", 0},
		{"/api/seckill/status?productId=-p1", api.BadProductID, "", 0},
		{"/api/seckill/status?productId=p%201", api.BadProductID, "", 0},
		{"/api/seckill/status?productId=p.1", api.BadProductID, "", 0},
		{"/api/seckill/status?productId=" + strings.Repeat("a", 65), api.BadProductID, "", 0},
		{"/api/seckill/status?productid=p1", api.BadProductID, "", 0},
		{"/api/seckill/result?orderId=42&productId=p1", nil, "p1", 42},
		{"/api/seckill/result?productId=p1&orderId=9223372036854775807", nil, "p1", 9223372036854775807},
		{"/api/seckill/result?productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=42", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=42&productId=", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=&productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=0&productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=-1&productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=042&productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=4x&productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=9223372036854775808&productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/result?orderId=99999999999999999999&productId=p1", api.BadOrderRef, "", 0},
		{"/api/seckill/events?orderId=7&productId=p2", nil, "p2", 7},
		{"/api/seckill/events?productId=p2", api.BadOrderRef, "", 0},
		{"/api/seckill/events?orderId=7", api.BadOrderRef, "", 0},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			r, rej := parse("GET", tc.uri, "")
			if rej != tc.want {
				t.Fatalf("got %+v, want %+v", rej, tc.want)
			}
			if rej != nil {
				if rej.Status != 400 || rej.Code != "BAD_REQUEST" {
					t.Fatalf("status %d %s, want 400 BAD_REQUEST", rej.Status, rej.Code)
				}
				return
			}
			if string(r.ProductID) != tc.product || r.OrderID != tc.order {
				t.Fatalf("product %q order %d, want %q %d", r.ProductID, r.OrderID, tc.product, tc.order)
			}
		})
	}
}

// Bodies of the POST calls, including the scanner's handling of JSON it
// does not take.
func TestParseBodies(t *testing.T) {
	// Decisions about the scanner, pinned here:
	//   - known keys: strings without escapes or control characters (ids
	//     and tokens never need them), an integer quantity; a JSON-equivalent
	//     spelling with escapes ("p\u0031") or 1.0 / 1e2 is refused (400),
	//     never misread.
	//   - unknown keys may hold scalars only; an object or array value is 400.
	//     Stricter than "ignore unknown fields", but no client of this API
	//     sends one, and it keeps the scanner flat and allocation-free.
	//   - duplicate keys: the last wins, as in encoding/json.
	//   - leniency: the value of an unknown key is skipped, not validated, so
	//     some invalid JSON there (a lone "-", "1-2", "0001", control
	//     characters or "\q" in a string) is accepted, and so are leading
	//     zeros in quantity ("01" is 1). None of it can change a known field
	//     (FuzzParseBody checks that against encoding/json); acceptable.
	long := strings.Repeat(" ", testMaxBody-len(doBody))
	type want struct {
		rej     *api.Rejection
		product string
		token   string
		qty     int
	}
	ok := func(product, token string, qty int) want { return want{product: product, token: token, qty: qty} }
	for _, tc := range []struct {
		name string
		path string
		body string
		want want
	}{
		// do
		{"do", "do", doBody, ok("p1", "tok_en-123", 2)},
		{"do quantity absent", "do", `{"productId":"p1","token":"t"}`, ok("p1", "t", 1)},
		{"do quantity 1000", "do", `{"productId":"p1","token":"t","quantity":1000}`, ok("p1", "t", 1000)},
		{"do quantity 0", "do", `{"productId":"p1","token":"t","quantity":0}`, want{rej: api.BadQuantity}},
		{"do quantity -1", "do", `{"productId":"p1","token":"t","quantity":-1}`, want{rej: api.BadQuantity}},
		{"do quantity -0", "do", `{"productId":"p1","token":"t","quantity":-0}`, want{rej: api.BadQuantity}},
		{"do quantity 1001", "do", `{"productId":"p1","token":"t","quantity":1001}`, want{rej: api.BadQuantity}},
		{"do quantity 9 digits", "do", `{"productId":"p1","token":"t","quantity":999999999}`, want{rej: api.BadQuantity}},
		{"do quantity huge", "do", `{"productId":"p1","token":"t","quantity":99999999999999999999}`, want{rej: api.BadJSON}},
		{"do quantity 1.0", "do", `{"productId":"p1","token":"t","quantity":1.0}`, want{rej: api.BadJSON}},
		{"do quantity 1e2", "do", `{"productId":"p1","token":"t","quantity":1e2}`, want{rej: api.BadJSON}},
		{"do quantity 1E0", "do", `{"productId":"p1","token":"t","quantity":1E0}`, want{rej: api.BadJSON}},
		{"do quantity +1", "do", `{"productId":"p1","token":"t","quantity":+1}`, want{rej: api.BadJSON}},
		{"do quantity 0001 (lenient)", "do", `{"productId":"p1","token":"t","quantity":0001}`, ok("p1", "t", 1)},
		{"do quantity string", "do", `{"productId":"p1","token":"t","quantity":"2"}`, want{rej: api.BadJSON}},
		{"do quantity null", "do", `{"productId":"p1","token":"t","quantity":null}`, want{rej: api.BadJSON}},
		{"do quantity bare minus", "do", `{"productId":"p1","token":"t","quantity":-}`, want{rej: api.BadJSON}},
		{"do no token", "do", `{"productId":"p1"}`, want{rej: api.NoToken}},
		{"do empty token", "do", `{"productId":"p1","token":""}`, want{rej: api.NoToken}},
		{"do token number", "do", `{"productId":"p1","token":5}`, want{rej: api.BadJSON}},
		{"do token raw UTF-8 kept as is", "do", `{"productId":"p1","token":"jeton-é"}`, ok("p1", "jeton-é", 1)},
		{"do no product", "do", `{"token":"t"}`, want{rej: api.BadProductID}},
		{"do bad product", "do", `{"productId":"p 1","token":"t"}`, want{rej: api.BadProductID}},
		{"do product with escape", "do", `{"productId":"p\u0031","token":"t"}`, want{rej: api.BadJSON}},
		{"do product escaped slash", "do", `{"productId":"p\/1","token":"t"}`, want{rej: api.BadJSON}},
		{"do product null", "do", `{"productId":null,"token":"t"}`, want{rej: api.BadJSON}},
		{"do product control char", "do", "{\"productId\":\"p\x011\",\"token\":\"t\"}", want{rej: api.BadJSON}},
		{"do product tab", "do", "{\"productId\":\"p\t1\",\"token\":\"t\"}", want{rej: api.BadJSON}},
		{"do duplicate product: last wins", "do", `{"productId":"p1","token":"t","productId":"p2"}`, ok("p2", "t", 1)},
		{"do duplicate quantity: last wins", "do", `{"productId":"p1","token":"t","quantity":5,"quantity":1}`, ok("p1", "t", 1)},
		{"do duplicate, last malformed", "do", `{"productId":"p1","token":"t","quantity":5,"quantity":"x"}`, want{rej: api.BadJSON}},
		{"do key with escape", "do", `{"product\u0049d":"p1","token":"t"}`, want{rej: api.BadJSON}},
		{"do keys are case-sensitive", "do", `{"ProductId":"p1","token":"t"}`, want{rej: api.BadProductID}},
		{"do unknown scalars skipped", "do", `{"a":1,"b":-2.5e+3,"c":"x\"y\\","d":true,"e":false,"f":null,"productId":"p1","token":"t"}`, ok("p1", "t", 1)},
		{"do unknown object", "do", `{"meta":{"a":1},"productId":"p1","token":"t"}`, want{rej: api.BadJSON}},
		{"do unknown array", "do", `{"tags":[1,2],"productId":"p1","token":"t"}`, want{rej: api.BadJSON}},
		{"do unknown empty object", "do", `{"productId":"p1","token":"t","x":{}}`, want{rej: api.BadJSON}},
		{"do unknown bare minus (lenient)", "do", `{"x":-,"productId":"p1","token":"t"}`, ok("p1", "t", 1)},
		{"do unknown 1-2 (lenient)", "do", `{"x":1-2,"productId":"p1","token":"t"}`, ok("p1", "t", 1)},
		{"do unknown bad escape (lenient)", "do", `{"x":"\q","productId":"p1","token":"t"}`, ok("p1", "t", 1)},
		{"do unknown truncated literal", "do", `{"x":tru,"productId":"p1","token":"t"}`, want{rej: api.BadJSON}},
		{"do unknown literal run-on", "do", `{"x":truefalse,"productId":"p1","token":"t"}`, want{rej: api.BadJSON}},
		{"do unknown escaped quote runs on", "do", `{"x":"\","productId":"p1","token":"t"}`, want{rej: api.BadJSON}},
		{"do whitespace everywhere", "do", " \t\r\n{ \"productId\" :\n\"p1\" , \"token\"\t:\"t\" ,\"quantity\" : 3 } \n", ok("p1", "t", 3)},
		{"do trailing garbage", "do", doBody + "x", want{rej: api.BadJSON}},
		{"do two objects", "do", doBody + "{}", want{rej: api.BadJSON}},
		{"do trailing NUL", "do", doBody + "\x00", want{rej: api.BadJSON}},
		{"do trailing comma", "do", `{"productId":"p1","token":"t",}`, want{rej: api.BadJSON}},
		{"do missing comma", "do", `{"productId":"p1" "token":"t"}`, want{rej: api.BadJSON}},
		{"do missing colon", "do", `{"productId" "p1","token":"t"}`, want{rej: api.BadJSON}},
		{"do unterminated", "do", `{"productId":"p1","token":"t"`, want{rej: api.BadJSON}},
		{"do unterminated string", "do", `{"productId":"p1","token":"t`, want{rej: api.BadJSON}},
		{"do single quotes", "do", `{'productId':'p1','token':'t'}`, want{rej: api.BadJSON}},
		{"do BOM", "do", "\xef\xbb\xbf" + doBody, want{rej: api.BadJSON}},
		{"do array", "do", `[{"productId":"p1","token":"t"}]`, want{rej: api.BadJSON}},
		{"do null", "do", `null`, want{rej: api.BadJSON}},
		{"do empty body", "do", ``, want{rej: api.BadJSON}},
		{"do whitespace body", "do", "  \n", want{rej: api.BadJSON}},
		{"do empty object", "do", `{}`, want{rej: api.BadProductID}},
		{"do body at the limit", "do", doBody + long, ok("p1", "tok_en-123", 2)},
		{"do body too large", "do", doBody + long + " ", want{rej: api.TooLarge}},
		{"do too large beats bad JSON", "do", strings.Repeat("x", testMaxBody+1), want{rej: api.TooLarge}},
		// token
		{"token", "token", tokenBody, ok("p1", "", 0)},
		{"token ignores token and quantity", "token", `{"productId":"p1","token":"","quantity":0}`, ok("p1", "", 0)},
		{"token no product", "token", `{}`, want{rej: api.BadProductID}},
		{"token bad product", "token", `{"productId":"_p1"}`, want{rej: api.BadProductID}},
		{"token malformed", "token", `{"productId":"p1"`, want{rej: api.BadJSON}},
		{"token too large", "token", tokenBody + strings.Repeat(" ", testMaxBody), want{rej: api.TooLarge}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, rej := parse("POST", "/api/seckill/"+tc.path, tc.body)
			if rej != tc.want.rej {
				t.Fatalf("got %+v, want %+v", rej, tc.want.rej)
			}
			if rej != nil {
				if wantStatus := map[*api.Rejection]int{api.TooLarge: 413}[rej]; wantStatus != 0 && rej.Status != wantStatus || wantStatus == 0 && rej.Status != 400 {
					t.Fatalf("status %d", rej.Status)
				}
				return
			}
			if string(r.ProductID) != tc.want.product || string(r.Token) != tc.want.token || r.Qty != tc.want.qty {
				t.Fatalf("product %q token %q qty %d, want %q %q %d", r.ProductID, r.Token, r.Qty, tc.want.product, tc.want.token, tc.want.qty)
			}
			// Views of the request body, not copies.
			body := r.Ctx.PostBody()
			if !within(body, r.ProductID) || (len(r.Token) > 0 && !within(body, r.Token)) {
				t.Fatal("ids are not views of the body")
			}
		})
	}
}

func TestParseLogin(t *testing.T) {
	for _, tc := range []struct {
		body string
		want *api.Rejection
		user string
	}{
		{`{"userId":"alice"}`, nil, "alice"},
		{`{"userId":"a.b-c_d@example.com"}`, nil, "a.b-c_d@example.com"},
		{`{"userId":"` + strings.Repeat("u", 64) + `"}`, nil, strings.Repeat("u", 64)},
		{`{"userId":"alice","productId":"p1"}`, nil, "alice"},
		{`{"userId":"` + strings.Repeat("u", 65) + `"}`, api.BadUserID, ""},
		{`{"userId":""}`, api.BadUserID, ""},
		{`{}`, api.BadUserID, ""},
		{`{"user":"alice"}`, api.BadUserID, ""},
		{`{"userId":"al ice"}`, api.BadUserID, ""},
		{`{"userId":"alice!"}`, api.BadUserID, ""},
		{`{"userId":"alice/../x"}`, api.BadUserID, ""},
		{`{"userId":"élise"}`, api.BadUserID, ""},
		{`{"userId":"al\u0069ce"}`, api.BadJSON, ""},
		{`{"userId":42}`, api.BadJSON, ""},
		{`{"userId":"alice"`, api.BadJSON, ""},
		{`{"userId":"alice"}` + strings.Repeat(" ", testMaxBody), api.TooLarge, ""},
	} {
		t.Run(tc.body, func(t *testing.T) {
			r, rej := parse("POST", "/api/login", tc.body)
			if rej != tc.want {
				t.Fatalf("got %+v, want %+v", rej, tc.want)
			}
			if rej == nil && string(r.UserID) != tc.user {
				t.Fatalf("user %q, want %q", r.UserID, tc.user)
			}
		})
	}
}

func TestParseAllocs(t *testing.T) {
	for _, tc := range []struct{ method, uri, body string }{
		{"POST", "/api/seckill/do", doBody},
		{"GET", "/api/seckill/status?productId=p1", ""},
		{"GET", "/api/seckill/result?orderId=42&productId=p1", ""},
		{"POST", "/api/seckill/token", tokenBody},
		{"POST", "/api/login", loginBody},
	} {
		ctx := parseCtx(tc.method, tc.uri, tc.body)
		var r api.Call
		if n := testing.AllocsPerRun(1000, func() {
			r.Reset()
			r.Ctx = ctx
			if rej := Parse(&r, testMaxBody); rej != nil {
				t.Fatalf("%s: %+v", tc.uri, rej)
			}
		}); n != 0 {
			t.Fatalf("%s %s: %v allocations", tc.method, tc.uri, n)
		}
	}
}

func BenchmarkParseDo(b *testing.B) {
	benchParse(b, Parse, "POST", "/api/seckill/do", `{"productId":"p1","token":"AQIDBAUGBwgJCgsMAAABmf8AAAAA3q2-7wAAAAAAAAAAAAAAAA","quantity":1}`)
}

func BenchmarkParseStatus(b *testing.B) {
	benchParse(b, Parse, "GET", "/api/seckill/status?productId=p1", "")
}

// benchParse runs parse on one request, which it must accept.
func benchParse(b *testing.B, parse func(*api.Call, int) *api.Rejection, method, uri, body string) {
	ctx := parseCtx(method, uri, body)
	var r api.Call
	b.ReportAllocs()
	for b.Loop() {
		r.Reset()
		r.Ctx = ctx
		if parse(&r, testMaxBody) != nil {
			b.Fatal("rejected")
		}
	}
}

// within reports whether s is a subslice of buf (same memory).
func within(buf, s []byte) bool {
	if len(s) == 0 {
		return true
	}
	off := cap(buf) - cap(s)
	return off >= 0 && off+len(s) <= len(buf) && &buf[:off+1][off] == &s[0]
}

var fuzzSeeds = []string{
	doBody, tokenBody, loginBody, `{}`, ` { } `, `{"quantity":-0}`, `{"quantity":1.0}`, `{"quantity":1e2}`,
	`{"quantity":0001}`, `{"quantity":999999999}`, `{"x":{}}`, `{"x":[1]}`, `{"x":"\"","productId":"p1"}`,
	`{"productId":"p1","productId":"p2"}`, `{"product\u0049d":"p1"}`, `{"x":-,"token":"t"}`, `{"x":"\`,
	`{"a":true,"b":false,"c":null,"d":-1.5e+3}`, "{\"token\":\"\xff\xfe\"}", `{"userId":"a"}x`,
}

// FuzzParseBody: the scanner never panics, and what it accepts it reads
// right: known fields are views of the input between quotes, without
// escapes or control characters, and agree with encoding/json whenever the
// input is valid JSON.
func FuzzParseBody(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var b callBody
		if !b.parse(in) {
			return
		}
		fields := []struct {
			key string
			has bool
			v   []byte
		}{{"productId", b.hasProduct, b.productID}, {"token", b.hasToken, b.token}, {"userId", b.hasUser, b.userID}}
		for _, fl := range fields {
			if !fl.has {
				if fl.v != nil {
					t.Fatalf("%s set without has", fl.key)
				}
				continue
			}
			if len(fl.v) > 0 {
				if !within(in, fl.v) {
					t.Fatalf("%s %q is not a view of the input", fl.key, fl.v)
				}
				off := cap(in) - cap(fl.v)
				if off == 0 || in[off-1] != '"' || off+len(fl.v) >= len(in) || in[off+len(fl.v)] != '"' {
					t.Fatalf("%s %q is not between quotes", fl.key, fl.v)
				}
			}
			for _, c := range fl.v {
				if c == '\\' || c == '"' || c < 0x20 {
					t.Fatalf("%s %q holds an escape, quote or control character", fl.key, fl.v)
				}
			}
		}
		if b.hasQty && (b.qty < -999_999_999 || b.qty > 999_999_999) {
			t.Fatalf("quantity %d out of the scanner's range", b.qty)
		}
		if !json.Valid(in) {
			return // lenient about skipped values; see TestParseBodies
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(in, &m); err != nil {
			t.Fatalf("valid JSON accepted by the scanner is not an object: %v", err)
		}
		for _, fl := range fields {
			raw, ok := m[fl.key]
			if ok != fl.has {
				t.Fatalf("%s: encoding/json has it %v, scanner %v", fl.key, ok, fl.has)
			}
			var s string
			if ok && utf8.Valid(fl.v) {
				if err := json.Unmarshal(raw, &s); err != nil || s != string(fl.v) {
					t.Fatalf("%s: encoding/json %q (%v), scanner %q", fl.key, s, err, fl.v)
				}
			}
		}
		if raw, ok := m["quantity"]; ok != b.hasQty {
			t.Fatalf("quantity: encoding/json has it %v, scanner %v", ok, b.hasQty)
		} else if ok {
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n != b.qty {
				t.Fatalf("quantity: encoding/json %s, scanner %d", raw, b.qty)
			}
		}
	})
}

// FuzzParse: any method, path, query and body. Parse never panics; what it
// accepts is a well-formed call; what it refuses gets one of the contract's
// answers.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"/api/seckill/do", "/api/seckill/token", "/api/login"} {
		for _, s := range fuzzSeeds {
			f.Add("POST", p, "", []byte(s))
		}
	}
	f.Add("GET", "/api/seckill/status", "productId=p1", []byte(nil))
	f.Add("HEAD", "/api/seckill/result", "orderId=1&productId=p1", []byte(nil))
	f.Add("GET", "/api/seckill/events", "orderId=007&productId=p%31", []byte(nil))
	f.Add("PUT", "/api/seckill//do", "", []byte(doBody))
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		var req fasthttp.Request
		req.Header.SetMethod(method)
		req.SetRequestURI(path + "?" + query)
		req.SetBody(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(198, 51, 100, 1), Port: 1}, nil)
		r := &api.Call{Ctx: &ctx}
		rej := Parse(r, testMaxBody)
		if rej != nil {
			switch rej.Status {
			case 400, 404, 405, 413:
			default:
				t.Fatalf("status %d", rej.Status)
			}
			return
		}
		get := ctx.IsGet() || ctx.IsHead()
		switch r.Endpoint {
		case api.EndpointStatus:
			if !get || !order.ValidProductID(r.ProductID) {
				t.Fatalf("status accepted: get %v product %q", get, r.ProductID)
			}
		case api.EndpointResult, api.EndpointEvents:
			if !get || !order.ValidProductID(r.ProductID) || r.OrderID <= 0 {
				t.Fatalf("result accepted: get %v product %q order %d", get, r.ProductID, r.OrderID)
			}
		case api.EndpointLogin:
			if !ctx.IsPost() || !order.ValidUserID(r.UserID) || len(ctx.PostBody()) > testMaxBody {
				t.Fatalf("login accepted: user %q", r.UserID)
			}
		case api.EndpointToken, api.EndpointDo:
			if !ctx.IsPost() || !order.ValidProductID(r.ProductID) || len(ctx.PostBody()) > testMaxBody {
				t.Fatalf("purchase call accepted: product %q", r.ProductID)
			}
			if r.Endpoint == api.EndpointDo && (len(r.Token) == 0 || r.Qty < 1 || r.Qty > order.MaxQty) {
				t.Fatalf("do accepted: token %q qty %d", r.Token, r.Qty)
			}
		default:
			t.Fatalf("accepted with endpoint %d", r.Endpoint)
		}
	})
}
