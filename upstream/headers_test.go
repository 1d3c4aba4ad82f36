package upstream

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"flashgate/filters"
	"flashgate/sale/api"
)

func TestHeaderBit(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want uint32
	}{
		{"Connection", hConnection},
		{"connection", hConnection},
		{"CONNECTION", hConnection},
		{"Keep-Alive", hKeepAlive},
		{"keep-alive", hKeepAlive},
		{"Proxy-Connection", hProxyConnection},
		{"Proxy-Authenticate", hProxyAuthenticate},
		{"proxy-authorization", hProxyAuthorization},
		{"TE", hTE},
		{"te", hTE},
		{"Te", hTE},
		{"Trailer", hTrailer},
		{"Transfer-Encoding", hTransferEncoding},
		{"transfer-encoding", hTransferEncoding},
		{"Upgrade", hUpgrade},
		{"uPgRaDe", hUpgrade},
		{"Expect", hExpect},
		{"X-Forwarded-For", hXForwardedFor},
		{"x-forwarded-for", hXForwardedFor},
		{"X-Real-IP", hXRealIP},
		{"x-real-ip", hXRealIP},
		{"X-Forwarded-Proto", hXForwardedProto},
		{"X-Forwarded-Host", hXForwardedHost},
		{"X-Forwarded-Port", hXForwardedPort},
		{"Forwarded", hForwarded},
		{"FORWARDED", hForwarded},
		// Prefixes, extensions and look-alikes name other headers.
		{"T", 0},
		{"TEST-Header", 0},
		{"TEs", 0},
		{"Upgrade-Insecure-Requests", 0},
		{"Upgrades", 0},
		{"Upgrade X", 0},
		{"Keep-Alive-Extra", 0},
		{"Connectio", 0},
		{"Connections", 0},
		{"Proxy-Connectio", 0},
		{"X-Forwarded-Fo", 0},
		{"X_Forwarded_For", 0},
		{"X_Real_IP", 0},
		{"X-Real-IPs", 0},
		{"X-Forwarded-Server", 0},
		{"Forwarde", 0},
		{"Trailers", 0},
		{"Transfer-Encodings", 0},
		{"Expects", 0},
		{"Host", 0},
		{"", 0},
		{"Upgrad\xe5", 0},
		{"Connection\x00", 0},
	} {
		if got := headerBit([]byte(tc.key)); got != tc.want {
			t.Errorf("headerBit(%q) = %#x, want %#x", tc.key, got, tc.want)
		}
	}
	// Every hop-by-hop name has its own bit, at its position in hopByHop.
	for i, name := range hopByHop {
		if got := headerBit([]byte(name)); got != 1<<i {
			t.Errorf("headerBit(%q) = %#x, want %#x", name, got, 1<<i)
		}
	}
}

func TestScanRaw(t *testing.T) {
	for _, tc := range []struct {
		name        string
		raw         string
		underscores bool
		want        uint32
	}{
		{"empty", "", false, 0},
		{"terminator only", "\r\n", false, 0},
		{"none", "Host: a\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n", false, 0},
		{"each", "TE: trailers\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", false, hTE | hUpgrade | hConnection},
		{"all", "Connection: a\r\nKeep-Alive: 1\r\nProxy-Connection: b\r\nProxy-Authenticate: c\r\n" +
			"Proxy-Authorization: d\r\nTE: e\r\nTrailer: f\r\nTransfer-Encoding: chunked\r\nUpgrade: g\r\n" +
			"Expect: 100-continue\r\nX-Forwarded-For: 1.2.3.4\r\nX-Real-IP: 1\r\nX-Forwarded-Proto: https\r\n" +
			"X-Forwarded-Host: h\r\nX-Forwarded-Port: 443\r\nForwarded: for=1\r\nProxy: http://x\r\n" +
			"X-Forwarded-Scheme: https\r\nX-Forwarded-Ssl: on\r\nX-Forwarded-Protocol: ssl\r\n" +
			"Traceparent: t\r\nTracestate: s\r\n\r\n", false, allHeaders},
		{"case-insensitive", "upgrade: x\r\nte: trailers\r\nKEEP-ALIVE: 5\r\n\r\n", false, hUpgrade | hTE | hKeepAlive},
		{"duplicates", "Upgrade: a\r\nUpgrade: b\r\nX-Forwarded-For: 1\r\nx-forwarded-for: 2\r\n\r\n", false, hUpgrade | hXForwardedFor},
		{"prefixes", "TEST-Header: 1\r\nUpgrade-Insecure-Requests: 1\r\nKeep-Alive-Extra: 1\r\nX-Forwarded-Protocols: https\r\nTraceparents: 1\r\n" +
			"Proxyish: 1\r\nProxy2: 1\r\n\r\n", false, 0},
		{"value naming a header", "X-A: Upgrade: websocket\r\nReferer: http://x/TE:1\r\nX-B: X_Real_IP\r\n\r\n", false, 0},
		{"empty value", "Upgrade:\r\nTE: \r\n\r\n", false, hUpgrade | hTE},
		{"no space after colon", "Upgrade:h2c\r\n\r\n", false, hUpgrade},
		{"folded, continuation names nothing", "X-A: 1\r\n Upgrade: websocket\r\n\tTE: trailers\r\n X_Real_IP: 1\r\n\r\n", false, 0},
		{"folded hop-by-hop value", "Connection: X-B,\r\n X-C\r\nX-B: 1\r\n\r\n", false, hConnection},
		{"header after a fold", "X-A: 1,\r\n 2\r\nUpgrade: x\r\n\r\n", false, hUpgrade},
		{"bare LF", "Upgrade: x\nTE: y\n\n", false, hUpgrade | hTE},
		{"no terminator", "Upgrade: x\r\nTE: y", false, hUpgrade | hTE},
		{"nothing after terminator is read", "Host: a\r\n\r\nUpgrade: x\r\n", false, 0},
		{"last line", "Host: a\r\nTrailer: X-T\r\n\r\n", false, hTrailer},

		// Names oddName does not keep.
		{"name with a space", "Upgrade X: 1\r\n\r\n", false, hOddName},
		{"underscore", "Host: a\r\nX_Real_IP: 6.6.6.6\r\n\r\n", false, hOddName},
		{"underscore allowed", "Host: a\r\nX_Custom: 1\r\n\r\n", true, 0},
		{"underscore allowed, spells X-Real-IP", "X_Real_IP: 6.6.6.6\r\n\r\n", true, hOddName},
		{"underscore allowed, spells TE", "t_e: trailers\r\n\r\n", true, 0}, // "t-e" is not TE
		{"underscore allowed, spells Transfer-Encoding", "Transfer_Encoding: chunked\r\n\r\n", true, hOddName},
		{"dot", "X.Real.IP: 1\r\n\r\n", true, hOddName},
		{"other token characters", "X!y: 1\r\n\r\n", true, hOddName},
		{"Proxy (httpoxy)", "proxy: http://evil\r\n\r\n", false, hOddName},
		{"Proxy-*", "Proxy-Foo: 1\r\n\r\n", false, hOddName},
		{"Proxy-* with a bit of its own", "Proxy-Authorization: x\r\n\r\n", false, hProxyAuthorization},
		{"Proxy-* with an underscore allowed", "Proxy-X_Y: 1\r\n\r\n", true, hOddName},
		{"underscore allowed, spells Proxy-Authorization", "Proxy_Authorization: 1\r\n\r\n", true, hOddName},
		{"odd and named", "Upgrade: x\r\nX_A: 1\r\nX-Real-IP: 1\r\n\r\n", false, hUpgrade | hOddName | hXRealIP},
	} {
		if got := scanRaw([]byte(tc.raw), tc.underscores); got != tc.want {
			t.Errorf("%s: scanRaw = %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

// fullStrip is stripHopByHop as it was before the presence scan: every
// hop-by-hop name deleted whether present or not. The one-pass version must
// leave the headers exactly as this does.
func fullStrip[H headers](h H, scratch []byte) []byte {
	scratch = scratch[:0]
	for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
		scratch = append(scratch, v...)
		scratch = append(scratch, ',')
	}
	for rest := scratch; len(rest) > 0; {
		var tok []byte
		tok, rest = nextToken(rest)
		if len(tok) == 0 || equalFold(tok, "host") {
			continue
		}
		h.DelBytes(tok)
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	return scratch
}

// BenchmarkStrip*: a browser-like request and the bench origin's answer,
// each header copied first (copy-only is that cost alone).

// requestCases are requests as clients send them; each test parses them as
// the edge server does.
var requestCases = []string{
	"GET /a HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\n" +
		"Cookie: a=1; b\r\nCookie: c=3\r\nTEST-Header: 1\r\nAccept-Encoding: gzip\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nClose: 2\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nconnection: upgrade, keep-alive\r\nupgrade: h2c\r\nkeep-alive: 300\r\nte: trailers\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic x\r\n" +
		"Proxy-Authenticate: y\r\nUpgrade: a\r\nUpgrade: b\r\nTE: c\r\nTE: d\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nConnection: Host, X-Forwarded-For, Cookie, User-Agent, Content-Type\r\n" +
		"X-Forwarded-For: 1.1.1.1\r\nCookie: a=1\r\nUser-Agent: ua\r\nContent-Type: text/plain\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nConnection: X-A,\r\n X-B\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3,\r\n\tUpgrade: folded\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nUpgrade X: 1\r\nX-Forwarded-For: 2.2.2.2\r\nx-forwarded-for: 3.3.3.3\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nX_Real_IP: 6.6.6.6\r\nX.Real.IP: 7\r\nProxy: http://evil\r\nProxy-Foo: 1\r\n" +
		"Forwarded: for=1.1.1.1\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Port: 1\r\nX-Real-IP: 8\r\nX-Ok: 1\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nTrailer: X_T\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX_T: v\r\nX.U: u\r\n\r\n",
	"GET /a HTTP/1.0\r\nHost: h\r\n\r\n",
	"GET /a HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
	"GET /a HTTP/1.0\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello",
	"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nKeep-Alive: 1\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\nhi",
	"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\nConnection: X-U\r\n\r\n" +
		"5\r\nhello\r\n0\r\nX-T: v\r\nUpgrade: in-trailer\r\nX-U: u\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nUpgrade: unannounced\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nTrailer: User-Agent\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nUser-Agent: late\r\n\r\n",
}

func parseRequest(t testing.TB, raw string) *fasthttp.Request {
	t.Helper()
	req := new(fasthttp.Request)
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return req
}

// requestState is everything of a request header that reaches the origin.
func requestState(h *fasthttp.RequestHeader) string {
	head := string(h.Header()) // Header and TrailerHeader share a buffer
	keys := fmt.Sprintf("%q", h.PeekTrailerKeys())
	return fmt.Sprintf("%q close=%v cl=%d trailers=%s %q",
		head, h.ConnectionClose(), h.ContentLength(), keys, h.TrailerHeader())
}

func TestStripRequestMatchesFullStrip(t *testing.T) {
	for _, raw := range requestCases {
		want, got := parseRequest(t, raw), parseRequest(t, raw)
		fullStrip(&want.Header, nil)
		stripHopByHop(&got.Header, requestPresent(&got.Header, false), nil)
		if w, g := requestState(&want.Header), requestState(&got.Header); w != g {
			t.Errorf("%q:\n got %s\nwant %s", raw, g, w)
		}
	}
}

// TestPrepareMatchesFullScan checks what the origin is sent, with presence
// from the raw scan and with every header assumed present.
func TestPrepareMatchesFullScan(t *testing.T) {
	for _, raw := range requestCases {
		ctx := new(fasthttp.RequestCtx)
		ctx.Init(parseRequest(t, raw), &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 40000}, nil)
		var got, want fasthttp.Request
		prepare(&got, ctx, hop{clientIP: testClientIP}, nil)
		copyRequest(&want, ctx)
		rewriteHeaders(&want, ctx, hop{clientIP: testClientIP}, allHeaders, nil)
		// The parent id is new for each request: compare the rest.
		if tp := got.Header.Peek("Traceparent"); len(tp) > 0 {
			want.Header.Set("Traceparent", string(tp))
		}
		if w, g := requestState(&want.Header), requestState(&got.Header); w != g {
			t.Errorf("%q:\n got %s\nwant %s", raw, g, w)
		}
		if string(got.Header.Peek("X-Forwarded-For")) == "" || string(got.Header.Peek("Expect")) != "" {
			t.Errorf("%q: X-Forwarded-For %q Expect %q", raw, got.Header.Peek("X-Forwarded-For"), got.Header.Peek("Expect"))
		}
	}
}

var responseCases = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\nX-Origin: o\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nClose: c\r\n\r\nok",
	"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nconnection: x-a\r\nx-a: 1\r\nupgrade: h2c\r\nproxy-authenticate: Basic\r\n" +
		"Upgrade-Insecure-Requests: 1\r\nTEST-Header: 1\r\nTE: t\r\nSet-Cookie: a=1\r\nServer: origin\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: Set-Cookie, Server, Content-Type, Content-Length\r\n" +
		"Set-Cookie: a=1\r\nServer: s\r\nContent-Type: text/plain\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1,\r\n Upgrade: folded\r\nProxy-Connection: x\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\nConnection: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: v\r\nUpgrade: u\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTrailer: Server\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nServer: late\r\n\r\n",
	"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
	"HTTP/1.1 204 No Content\r\n\r\n",
}

func parseResponse(t testing.TB, raw string) *fasthttp.Response {
	t.Helper()
	resp := new(fasthttp.Response)
	resp.Header.SetNoDefaultContentType(true)
	if err := resp.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return resp
}

func responseState(h *fasthttp.ResponseHeader) string {
	var fields []string
	for k, v := range h.All() {
		fields = append(fields, string(k)+": "+string(v))
	}
	keys := fmt.Sprintf("%q", h.PeekTrailerKeys())
	return fmt.Sprintf("%q close=%v cl=%d trailers=%s %q",
		fields, h.ConnectionClose(), h.ContentLength(), keys, h.TrailerHeader())
}

func TestStripResponseMatchesFullStrip(t *testing.T) {
	for _, raw := range responseCases {
		want, got := parseResponse(t, raw), parseResponse(t, raw)
		fullStrip(&want.Header, nil)
		stripHopByHop(&got.Header, responsePresent(&got.Header), nil)
		if w, g := responseState(&want.Header), responseState(&got.Header); w != g {
			t.Errorf("%q:\n got %s\nwant %s", raw, g, w)
		}
	}
}

func TestPresence(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want uint32
	}{
		{requestCases[0], 0},
		{requestCases[1], hConnection},
		{"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", hConnection}, // not stored: the flag
		{"GET / HTTP/1.0\r\nHost: h\r\n\r\n", hConnection},                      // HTTP/1.0 closes
		{"GET / HTTP/1.0\r\n\r\n", allHeaders},                                  // no raw block
		{requestCases[len(requestCases)-3], allHeaders},                         // trailers
	} {
		if got := requestPresent(&parseRequest(t, tc.raw).Header, false); got != tc.want {
			t.Errorf("requestPresent(%q) = %#x, want %#x", tc.raw, got, tc.want)
		}
	}
	for _, tc := range []struct {
		raw  string
		want uint32
	}{
		{responseCases[0], 0},
		{responseCases[2], hConnection}, // close flag only
		{responseCases[5], hConnection | hUpgrade | hProxyAuthenticate | hTE},
		{responseCases[9], allHeaders}, // trailers
		{responseCases[11], hConnection},
	} {
		if got := responsePresent(&parseResponse(t, tc.raw).Header); got != tc.want {
			t.Errorf("responsePresent(%q) = %#x, want %#x", tc.raw, got, tc.want)
		}
	}
}

// TestServerKeepsRawHeaders pins what the one-pass request scan relies on:
// fasthttp's server keeps the raw header block of the requests it parses,
// so Serve takes the scan rather than the every-header fallback.
func TestServerKeepsRawHeaders(t *testing.T) {
	got := make(chan uint32, 1)
	addr := startOrigin(t, func(ctx *fasthttp.RequestCtx) { got <- requestPresent(&ctx.Request.Header, false) })
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: h\r\nTE: trailers\r\nUpgrade-Insecure-Requests: 1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != hTE {
		t.Errorf("present = %#x, want %#x (TE only)", p, hTE)
	}
}

func TestPresenceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	req := parseRequest(t, requestCases[1])
	resp := parseResponse(t, responseCases[5])
	if n := testing.AllocsPerRun(100, func() { requestPresent(&req.Header, false) }); n != 0 {
		t.Errorf("requestPresent allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { responsePresent(&resp.Header) }); n != 0 {
		t.Errorf("responsePresent allocates %v times", n)
	}
}

func BenchmarkStripRequest(b *testing.B) {
	raw := "GET /items/p1 HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: Mozilla/5.0\r\nAccept: text/html\r\n" +
		"Accept-Language: en\r\nAccept-Encoding: gzip, br\r\nConnection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\n" +
		"Cookie: sid=1\r\nSec-Fetch-Mode: navigate\r\nX-Forwarded-For: 198.51.100.1\r\n\r\n"
	src := parseRequest(b, raw)
	var h fasthttp.RequestHeader
	var buf []byte
	for _, mode := range []string{"copy-only", "one-pass", "every-name"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				src.Header.CopyTo(&h)
				if mode == "copy-only" {
					continue
				}
				if mode == "one-pass" {
					buf = stripHopByHop(&h, requestPresent(&h, false), buf)
				} else {
					buf = fullStrip(&h, buf)
				}
			}
		})
	}
}

func BenchmarkStripResponse(b *testing.B) {
	src := parseResponse(b, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n"+
		"X-Origin: flashgate-bench\r\nCache-Control: no-store\r\nDate: Mon, 30 Nov 2026 11:54:00 GMT\r\n\r\nok")
	var h fasthttp.ResponseHeader
	var buf []byte
	for _, mode := range []string{"copy-only", "one-pass", "every-name"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				src.Header.CopyTo(&h)
				if mode == "copy-only" {
					continue
				}
				if mode == "one-pass" {
					buf = stripHopByHop(&h, responsePresent(&h), buf)
				} else {
					buf = fullStrip(&h, buf)
				}
			}
		})
	}
}

func BenchmarkScanRaw(b *testing.B) {
	raw := parseRequest(b, "GET /items/p1 HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0\r\n"+
		"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n"+
		"Connection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\nCookie: sid=0123456789abcdef; theme=dark\r\n"+
		"Sec-Fetch-Dest: document\r\nSec-Fetch-Mode: navigate\r\nPriority: u=0, i\r\n\r\n").Header.RawHeaders()
	for b.Loop() {
		scanRaw(raw, false)
	}
}

// A client cannot smuggle a second X-Real-IP or X-Forwarded-Proto past the
// edge: the origin sees exactly the edge's own values.
func TestSpoofedDuplicateForwardingHeadersDropped(t *testing.T) {
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	req.SetRequestURI("/x")
	req.Header.Add("X-Real-IP", "1.1.1.1")
	req.Header.Add("X-Real-IP", "7.7.7.7")
	req.Header.Add("X-Forwarded-Proto", "https")
	req.Header.Add("X-Forwarded-Proto", "gopher")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 1234}, nil)
	var out fasthttp.Request
	prepare(&out, &ctx, hop{clientIP: netip.MustParseAddr("203.0.113.7")}, nil)
	if got := out.Header.PeekAll("X-Real-IP"); len(got) != 1 || string(got[0]) != "203.0.113.7" {
		t.Fatalf("X-Real-IP = %q", got)
	}
	if got := out.Header.PeekAll("X-Forwarded-Proto"); len(got) != 1 || string(got[0]) != "http" {
		t.Fatalf("X-Forwarded-Proto = %q", got)
	}
}

// trustedPeers are the real_ip trusted proxies of the tests that have one:
// the peer of serveCtx and prepareCtx.
func trustedPeers(t testing.TB) *filters.RealIP {
	t.Helper()
	ri, errs := filters.NewRealIP("X-Forwarded-For", []string{"192.0.2.0/24"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return ri
}

// prepareCtx is raw as the edge server hands it to Serve, from peer 192.0.2.10.
func prepareCtx(t testing.TB, raw string) *fasthttp.RequestCtx {
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(parseRequest(t, raw), &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 40000}, nil)
	return ctx
}

// fields lists h's header fields as "Name: value", the way they go out,
// sorted (fasthttp does not keep their order when some are deleted).
func fields(h *fasthttp.RequestHeader) []string {
	var all []string
	for _, line := range strings.Split(string(h.Header()), "\r\n")[1:] {
		if line != "" {
			all = append(all, line)
		}
	}
	slices.Sort(all)
	return all
}

// withoutTrace is fields of h but the edge's traceparent, which it checks
// is one (and valid: its parts are random).
func withoutTrace(t *testing.T, h *fasthttp.RequestHeader) []string {
	t.Helper()
	if all := h.PeekAll("Traceparent"); len(all) != 1 || !validTraceparent(all[0]) {
		t.Errorf("traceparent %q, want one the edge wrote", all)
	}
	return slices.DeleteFunc(fields(h), func(f string) bool { return strings.HasPrefix(f, "Traceparent: ") })
}

// TestPrepareForwarding: which of the client's headers reach the origin and
// what the edge writes, for an untrusted client and a trusted proxy, with
// and without underscores_in_headers.
func TestPrepareForwarding(t *testing.T) {
	spoofed := "GET /a HTTP/1.1\r\nHost: shop.example\r\n" +
		"X_Real_IP: 6.6.6.6\r\nx_forwarded_for: 6.6.6.6\r\nX.Real.IP: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n" +
		"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 7.7.7.7\r\nX-Forwarded-Proto: https\r\n" +
		"X-Forwarded-Host: evil.example\r\nX-Forwarded-Port: 8443\r\nForwarded: for=6.6.6.6;proto=https\r\n" +
		"Proxy: http://evil.example:3128\r\nProxy-Foo: 1\r\nX_Custom: c\r\nX-Ok: ok\r\n\r\n"
	for _, tc := range []struct {
		name                 string
		raw                  string
		trusted, underscores bool
		want                 []string // every field the origin gets
	}{
		{"untrusted client", spoofed, false, false, []string{
			"Host: shop.example", "X-Ok: ok",
			"X-Forwarded-For: 192.0.2.10", "X-Real-Ip: 203.0.113.7", "X-Forwarded-Proto: http"}},
		{"untrusted client, underscores allowed", spoofed, false, true, []string{
			"Host: shop.example", "X_custom: c", "X-Ok: ok",
			"X-Forwarded-For: 192.0.2.10", "X-Real-Ip: 203.0.113.7", "X-Forwarded-Proto: http"}},
		{"trusted proxy", spoofed, true, false, []string{
			"Host: shop.example", "X-Forwarded-Proto: https", "X-Forwarded-Host: evil.example",
			"X-Forwarded-Port: 8443", "Forwarded: for=6.6.6.6;proto=https", "X-Ok: ok",
			"X-Forwarded-For: 6.6.6.6, 7.7.7.7, 192.0.2.10", "X-Real-Ip: 203.0.113.7"}},
		{"trusted proxy without X-Forwarded-Proto", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n", true, false, []string{
			"Host: h", "X-Forwarded-For: 192.0.2.10", "X-Real-Ip: 203.0.113.7", "X-Forwarded-Proto: http"}},
		{"absolute form: the target's host", "GET http://Other.Example:81/p?q=1 HTTP/1.1\r\nHost: shop.example\r\n\r\n", false, false, []string{
			"Host: other.example:81", "X-Forwarded-For: 192.0.2.10", "X-Real-Ip: 203.0.113.7", "X-Forwarded-Proto: http"}},
		{"trailer with odd names", "POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"5\r\nhello\r\n0\r\nX_T: v\r\nX.U: u\r\nX-V: v\r\n\r\n", false, false, []string{
			"Host: h", "X-V: v", "X-Forwarded-For: 192.0.2.10", "X-Real-Ip: 203.0.113.7", "X-Forwarded-Proto: http"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := prepareCtx(t, tc.raw)
			var out fasthttp.Request
			_, ok := prepare(&out, ctx, hop{clientIP: testClientIP, trusted: tc.trusted, underscores: tc.underscores}, nil)
			if !ok {
				t.Fatal("refused")
			}
			slices.Sort(tc.want)
			if got := withoutTrace(t, &out.Header); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("origin gets\n %q\nwant\n %q", got, tc.want)
			}
		})
	}
}

func TestPrepareRefusesSpaceInName(t *testing.T) {
	for _, raw := range []string{
		"GET /a HTTP/1.1\r\nHost: h\r\nX Real IP: 6.6.6.6\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: h\r\nTransfer Encoding: chunked\r\n\r\n",
	} {
		var out fasthttp.Request
		if _, ok := prepare(&out, prepareCtx(t, raw), hop{clientIP: testClientIP}, nil); ok {
			t.Errorf("%q: prepared for the origin", raw)
		}
	}
	// Built in code (no raw block), a name with a space is judged too.
	var req, out fasthttp.Request
	req.Header.SetMethod("GET")
	req.SetRequestURI("/x")
	req.Header.Set("X Real IP", "6.6.6.6")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 1234}, nil)
	if _, ok := prepare(&out, &ctx, hop{clientIP: testClientIP}, nil); ok {
		t.Error("request built in code: prepared for the origin")
	}
}

func TestMethodRejection(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   *api.Rejection
	}{
		{"GET", nil}, {"POST", nil}, {"HEAD", nil}, {"PUT", nil}, {"DELETE", nil}, {"PATCH", nil},
		{"OPTIONS", nil}, {"PROPFIND", nil}, {"VERSION-CONTROL", nil}, {"X_PURGE", nil},
		{"TRACE", api.MethodNotAllowed}, {"CONNECT", api.MethodNotAllowed},
		{"get", api.BadRequest}, {"Get", api.BadRequest}, {"trace", api.BadRequest},
		{"M1", api.BadRequest}, {"M.X", api.BadRequest}, {"", api.BadRequest},
	} {
		if got := methodRejection([]byte(tc.method)); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.method, got, tc.want)
		}
	}
}
