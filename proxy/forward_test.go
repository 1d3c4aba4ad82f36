package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What a proxied request carries to the origin and what the origin's answer
// carries back, end to end: raw requests over TCP to a real edge (so no
// client library tidies the header names), a real origin over loopback.

// seen is one request as it arrived at the origin: the bytes on the wire.
type seen struct {
	conn int // which of the origin's connections carried it
	head string
	body string
}

// requestLine is the first line of the head.
func (s seen) requestLine() string { return strings.SplitN(s.head, "\r\n", 2)[0] }

// cgi is the request's headers as a CGI, WSGI or Rack origin reads them:
// HTTP_ + the name upper-cased with '-' turned into '_', every value of
// names that read the same kept, in order.
func (s seen) cgi() map[string][]string {
	env := map[string][]string{}
	for _, line := range strings.Split(s.head, "\r\n")[1:] {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key := "HTTP_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		env[key] = append(env[key], strings.TrimSpace(value))
	}
	return env
}

// rawOrigin is an HTTP/1.1 origin that records each request's head exactly
// as it came off the wire and answers with a response written out byte by
// byte, chosen by path: a server library would normalise the names on the
// way in (the very thing under test) and write its own framing on the way
// out.
type rawOrigin struct {
	addr      string
	got       chan seen
	mu        sync.Mutex
	responses map[string]string // path -> raw response; "" -> 200 "ok"
}

const okResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Origin: yes\r\n\r\nok"

func startRawOrigin(t *testing.T) *rawOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{addr: ln.Addr().String(), got: make(chan seen, 64), responses: map[string]string{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for id := 1; ; id++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				o.serve(c, id)
			}()
		}
	}()
	return o
}

func (o *rawOrigin) respond(path, raw string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.responses[path] = raw
}

func (o *rawOrigin) serve(c net.Conn, id int) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		var head strings.Builder
		length := 0
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
			head.WriteString(line)
			if name, value, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Content-Length") {
				length, _ = strconv.Atoi(strings.TrimSpace(value))
			}
		}
		body := make([]byte, length)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		s := seen{conn: id, head: strings.TrimSuffix(head.String(), "\r\n"), body: string(body)}
		o.got <- s
		path := strings.Fields(s.requestLine())[1]
		o.mu.Lock()
		resp := o.responses[path]
		o.mu.Unlock()
		if resp == "" {
			resp = okResponse
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
		if strings.Contains(resp, "Connection: close\r\n") {
			return
		}
	}
}

// next is the request the origin received for the answer the client just
// read: the origin records a request before it answers, so it is there.
func (o *rawOrigin) next(t *testing.T) seen {
	t.Helper()
	select {
	case s := <-o.got:
		return s
	default:
		t.Fatal("the origin received nothing")
		return seen{}
	}
}

// nothing checks that the origin received no request: the client already
// has the edge's answer, which the edge gives only after the origin's.
func (o *rawOrigin) nothing(t *testing.T) {
	t.Helper()
	select {
	case s := <-o.got:
		t.Errorf("the origin received %q", s.head)
	default:
	}
}

const forwardConfig = `
listen: {addr: "127.0.0.1:0"}
admin: {addr: "127.0.0.1:0"}
log: {access_sample: 0}
real_ip:
  header: X-Forwarded-For
  trusted_proxies: ["127.0.0.1/32"]
filters:
  - {type: access, scope: all, rules: ["allow all"]}
upstreams:
  %s
  pools:
    - {name: origin, servers: ["%s"]}
    - {name: admin, servers: ["%s"]}
  routes:
    - {prefix: /, pool: origin}
    - {prefix: /, host: admin.example, pool: admin}
`

// The trusted proxy of forwardConfig connects from 127.0.0.1; anyone else
// from another loopback address.
const (
	fromProxy  = "127.0.0.1"
	fromClient = "127.0.0.2"
)

// forwardEdge is an edge in front of origin (and of admin, for
// admin.example); extra goes into its upstreams section.
func forwardEdge(t *testing.T, origin, admin *rawOrigin, extra string) *edge {
	t.Helper()
	return startEdge(t, fmt.Sprintf(forwardConfig, extra, origin.addr, admin.addr))
}

// conn is a client connection to the edge from a chosen loopback address.
type conn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialEdge(t *testing.T, e *edge, from string) *conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &conn{t: t, c: c, br: bufio.NewReader(c)}
}

// do writes raw and reads the edge's answer and its whole body.
func (c *conn) do(raw string) (*http.Response, string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("%q: %v", raw, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, string(b)
}

// closed reports whether the edge closed the connection after its answer.
func (c *conn) closed() bool {
	c.t.Helper()
	_, err := c.br.ReadByte()
	return err == io.EOF
}

func send(t *testing.T, e *edge, from, raw string) (*http.Response, string) {
	t.Helper()
	return dialEdge(t, e, from).do(raw)
}

// spoofed carries every header a client could use to pose as someone else
// to an origin behind the edge, under the names nginx drops and under the
// real ones.
const spoofed = "X_Real_IP: 6.6.6.6\r\n" +
	"x_forwarded_for: 6.6.6.6\r\n" +
	"X.Real.IP: 6.6.6.6\r\n" +
	"X-Real-IP: 6.6.6.6\r\n" +
	"X-Forwarded-For: 6.6.6.6\r\n" +
	"X-Forwarded-Proto: https\r\n" +
	"X-Forwarded-Host: evil.example\r\n" +
	"X-Forwarded-Port: 8443\r\n" +
	"Forwarded: for=6.6.6.6;host=evil.example;proto=https\r\n" +
	"Proxy: http://evil.example:3128\r\n" +
	"X_Custom: c\r\n" +
	"X-End-To-End: yes\r\n"

func wantCGI(t *testing.T, env map[string][]string, want map[string][]string) {
	t.Helper()
	for k, v := range want {
		if !slices.Equal(env[k], v) {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

func TestForwardUntrustedClient(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")
	resp, body := send(t, e, fromClient, "GET /page HTTP/1.1\r\nHost: shop.example\r\n"+spoofed+"\r\n")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	s := origin.next(t)
	wantCGI(t, s.cgi(), map[string][]string{
		"HTTP_X_REAL_IP":         {fromClient}, // not 6.6.6.6 beside or in place of it
		"HTTP_X_FORWARDED_FOR":   {fromClient}, // the client's list is not extended
		"HTTP_X_FORWARDED_PROTO": {"http"},
		"HTTP_X_FORWARDED_HOST":  nil,
		"HTTP_X_FORWARDED_PORT":  nil,
		"HTTP_FORWARDED":         nil,
		"HTTP_PROXY":             nil, // httpoxy
		"HTTP_X_CUSTOM":          nil, // underscores_in_headers off
		"HTTP_X_END_TO_END":      {"yes"},
		"HTTP_HOST":              {"shop.example"},
	})
	if t.Failed() {
		t.Logf("the origin received:\n%s", s.head)
	}
}

func TestForwardUnderscoresInHeaders(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "underscores_in_headers: true")
	send(t, e, fromClient, "GET /page HTTP/1.1\r\nHost: shop.example\r\n"+spoofed+"\r\n")
	s := origin.next(t)
	wantCGI(t, s.cgi(), map[string][]string{
		"HTTP_X_CUSTOM": {"c"},
		// Still dropped: they spell headers the edge writes.
		"HTTP_X_REAL_IP":       {fromClient},
		"HTTP_X_FORWARDED_FOR": {fromClient},
		"HTTP_X.REAL.IP":       nil,
	})
	if t.Failed() {
		t.Logf("the origin received:\n%s", s.head)
	}
}

// TestForwardTrustedProxy: from a trusted proxy, the client is the one it
// names, X-Forwarded-For extends its list, and what it says about the
// request (scheme, host, port, Forwarded) passes on; names nginx drops are
// dropped from it as well.
func TestForwardTrustedProxy(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")
	send(t, e, fromProxy, "GET /page HTTP/1.1\r\nHost: shop.example\r\n"+
		strings.Replace(spoofed, "X-Forwarded-For: 6.6.6.6", "X-Forwarded-For: 6.6.6.6, 198.51.100.7", 1)+"\r\n")
	s := origin.next(t)
	wantCGI(t, s.cgi(), map[string][]string{
		"HTTP_X_REAL_IP":         {"198.51.100.7"}, // real_ip: the rightmost untrusted entry
		"HTTP_X_FORWARDED_FOR":   {"6.6.6.6, 198.51.100.7, " + fromProxy},
		"HTTP_X_FORWARDED_PROTO": {"https"},
		"HTTP_X_FORWARDED_HOST":  {"evil.example"},
		"HTTP_X_FORWARDED_PORT":  {"8443"},
		"HTTP_FORWARDED":         {"for=6.6.6.6;host=evil.example;proto=https"},
		"HTTP_PROXY":             nil,
		"HTTP_X_CUSTOM":          nil,
	})
	if t.Failed() {
		t.Logf("the origin received:\n%s", s.head)
	}
}

// TestForwardBadHeaderNames: fasthttp refuses a NUL in a name itself; a
// space it lets through, and the edge answers 400 as nginx does, closing
// the connection. A colon ends the name: the rest is the value.
func TestForwardBadHeaderNames(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")
	for _, name := range []string{"X Real IP", "X-Real-IP\x00", "Transfer Encoding"} {
		c := dialEdge(t, e, fromClient)
		resp, _ := c.do("GET /page HTTP/1.1\r\nHost: shop.example\r\n" + name + ": 6.6.6.6\r\n\r\n")
		if resp.StatusCode != 400 {
			t.Errorf("%q: status %d, want 400", name, resp.StatusCode)
		}
		origin.nothing(t)
		if !c.closed() {
			t.Errorf("%q: the connection stays open", name)
		}
	}
	send(t, e, fromClient, "GET /page HTTP/1.1\r\nHost: shop.example\r\nX:Real-IP: 6.6.6.6\r\n\r\n")
	s := origin.next(t)
	wantCGI(t, s.cgi(), map[string][]string{"HTTP_X_REAL_IP": {fromClient}, "HTTP_X": {"Real-IP: 6.6.6.6"}})
}

func TestForwardHopByHop(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")

	t.Run("request", func(t *testing.T) {
		c := dialEdge(t, e, fromClient)
		resp, _ := c.do("GET /page HTTP/1.1\r\nHost: shop.example\r\n" +
			"Connection: keep-alive, X-Foo, X-Real-IP\r\nX-Foo: named in Connection\r\nKeep-Alive: 300\r\n" +
			"TE: trailers\r\nUpgrade: websocket\r\nProxy-Connection: keep-alive\r\n" +
			"Proxy-Authorization: Basic Zm9vOmJhcg==\r\nX-End-To-End: yes\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		s := origin.next(t)
		wantCGI(t, s.cgi(), map[string][]string{
			"HTTP_CONNECTION": nil, "HTTP_X_FOO": nil, "HTTP_KEEP_ALIVE": nil, "HTTP_TE": nil,
			"HTTP_UPGRADE": nil, "HTTP_PROXY_CONNECTION": nil, "HTTP_PROXY_AUTHORIZATION": nil,
			"HTTP_X_REAL_IP":    {fromClient}, // naming it in Connection does not remove the edge's
			"HTTP_X_END_TO_END": {"yes"},
		})
		if t.Failed() {
			t.Logf("the origin received:\n%s", s.head)
		}
	})

	t.Run("Connection: close", func(t *testing.T) {
		c := dialEdge(t, e, fromClient)
		c.do("GET /first HTTP/1.1\r\nHost: shop.example\r\n\r\n")
		first := origin.next(t)
		resp, _ := c.do("GET /page HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n")
		s := origin.next(t)
		if v := s.cgi()["HTTP_CONNECTION"]; v != nil {
			t.Errorf("the origin got Connection %q", v)
		}
		if s.conn != first.conn {
			t.Errorf("the client's close closed the origin's connection too (%d, then %d)", first.conn, s.conn)
		}
		if !resp.Close || !c.closed() {
			t.Error("the client's connection stays open")
		}
	})

	t.Run("response", func(t *testing.T) {
		origin.respond("/hop", "HTTP/1.1 200 OK\r\n"+
			"Connection: keep-alive, X-Origin-Secret\r\nX-Origin-Secret: s\r\nKeep-Alive: timeout=5\r\n"+
			"Proxy-Authenticate: Basic\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTE: trailers\r\n"+
			"Trailer: X-T\r\nTransfer-Encoding: chunked\r\nX-End-To-End: kept\r\n\r\n"+
			"2\r\nok\r\n0\r\nX-T: t\r\n\r\n")
		origin.respond("/close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
		c := dialEdge(t, e, fromClient)
		resp, body := c.do("GET /hop HTTP/1.1\r\nHost: shop.example\r\n\r\n")
		origin.next(t)
		for _, k := range []string{"Connection", "X-Origin-Secret", "Keep-Alive", "Proxy-Authenticate",
			"Proxy-Connection", "Upgrade", "Te", "Trailer", "Transfer-Encoding"} {
			if v := resp.Header.Values(k); v != nil {
				t.Errorf("%s %q reached the client", k, v)
			}
		}
		if resp.Trailer != nil || resp.TransferEncoding != nil || resp.ContentLength != 2 || body != "ok" ||
			resp.Header.Get("X-End-To-End") != "kept" {
			t.Errorf("framing %v %v, length %d, body %q, X-End-To-End %q", resp.TransferEncoding, resp.Trailer,
				resp.ContentLength, body, resp.Header.Get("X-End-To-End"))
		}
		resp, _ = c.do("GET /close HTTP/1.1\r\nHost: shop.example\r\n\r\n")
		origin.next(t)
		if resp.Close {
			t.Error("the origin's Connection: close reached the client")
		}
		if resp, _ := c.do("GET /again HTTP/1.1\r\nHost: shop.example\r\n\r\n"); resp.StatusCode != 200 {
			t.Errorf("after the origin closed: status %d", resp.StatusCode)
		}
		origin.next(t)
	})

	t.Run("Content-Length and Transfer-Encoding", func(t *testing.T) {
		c := dialEdge(t, e, fromClient)
		resp, _ := c.do("POST /form HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 3\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
		s := origin.next(t)
		env := s.cgi()
		// The chunked body wins (RFC 9112 §6.3) and reaches the origin
		// framed by its length only; the client's connection, whose
		// framing a front proxy may read otherwise, is closed.
		if s.body != "hello" || !slices.Equal(env["HTTP_CONTENT_LENGTH"], []string{"5"}) || env["HTTP_TRANSFER_ENCODING"] != nil {
			t.Errorf("the origin got body %q with\n%s", s.body, s.head)
		}
		if !resp.Close || !c.closed() {
			t.Error("the connection stays open")
		}
	})
}

func TestForwardMethods(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")
	for _, tc := range []struct {
		request string
		status  int
	}{
		{"TRACE /page HTTP/1.1\r\nHost: shop.example\r\nCookie: sid=secret\r\n\r\n", 405},
		{"CONNECT shop.example:443 HTTP/1.1\r\nHost: shop.example:443\r\n\r\n", 405},
		{"get /page HTTP/1.1\r\nHost: shop.example\r\n\r\n", 400},
	} {
		c := dialEdge(t, e, fromClient)
		resp, body := c.do(tc.request)
		if resp.StatusCode != tc.status || !strings.Contains(body, `"code"`) {
			t.Errorf("%q: %d %s, want %d", tc.request, resp.StatusCode, body, tc.status)
		}
		origin.nothing(t)
		if !c.closed() {
			t.Errorf("%q: the connection stays open", tc.request)
		}
	}
	for _, m := range []string{"PROPFIND", "PATCH", "OPTIONS"} {
		resp, _ := send(t, e, fromClient, m+" /dav HTTP/1.1\r\nHost: shop.example\r\n\r\n")
		if s := origin.next(t); resp.StatusCode != 200 || s.requestLine() != m+" /dav HTTP/1.1" {
			t.Errorf("%s: %d, origin got %q", m, resp.StatusCode, s.requestLine())
		}
	}
}

// TestForwardAbsoluteForm: the request-target's host is the request's
// host; the route is chosen by it, and the origin must be given that host,
// not the Host header the route did not look at.
func TestForwardAbsoluteForm(t *testing.T) {
	origin, admin := startRawOrigin(t), startRawOrigin(t)
	e := forwardEdge(t, origin, admin, "")
	send(t, e, fromClient, "GET http://shop.example/account HTTP/1.1\r\nHost: admin.example\r\n\r\n")
	admin.nothing(t)
	s := origin.next(t)
	if got := s.cgi()["HTTP_HOST"]; !slices.Equal(got, []string{"shop.example"}) || s.requestLine() != "GET /account HTTP/1.1" {
		t.Errorf("the shop's origin got Host %q, %q", got, s.requestLine())
	}
	send(t, e, fromClient, "GET http://admin.example/ HTTP/1.1\r\nHost: shop.example\r\n\r\n")
	origin.nothing(t)
	if got := admin.next(t).cgi()["HTTP_HOST"]; !slices.Equal(got, []string{"admin.example"}) {
		t.Errorf("the admin origin got Host %q", got)
	}
}
