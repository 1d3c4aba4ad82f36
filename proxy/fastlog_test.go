package proxy_test

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/edgetest"
	"flashgate/internal/syncbuf"
	"flashgate/sale/session"
)

const leakSessionSecret = "leak-test-session-secret-0123456789abcdef"

// leakConfig is an edge on the embedded stand-ins with a known session
// secret, so the requests below carry a JWT the edge would accept.
const leakConfig = `
listen: {addr: "127.0.0.1:0"}
admin: {addr: "127.0.0.1:0", token: "leak-test-admin-token-0123456789"}
log: {level: debug, access_sample: 1}
reload: {watch: false}
data_dir: ""
auth:
  secrets: ["` + leakSessionSecret + `"]
filters:
  - type: session
activities: []
`

// TestMalformedRequestsNeverLogCredentials sends what fasthttp cannot
// parse, with a signed session in the cookie and the Authorization header,
// over real TCP to a real edge's shopper and admin listeners, and reads
// every log line at debug level. Left alone, fasthttp printed the whole
// header block of each (a complete JWT per request), and the edge's own
// bad-request line quoted the buffer again.
func TestMalformedRequestsNeverLogCredentials(t *testing.T) {
	codec, err := session.NewCodec([][]byte{[]byte(leakSessionSecret)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	jwt, err := codec.Sign("victim-user", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	e := edgetest.Start(t, edgetest.WriteConfig(t, leakConfig),
		slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))

	creds := "Cookie: session=" + jwt + "\r\nAuthorization: Bearer " + jwt + "\r\nX-Api-Key: key-" + jwt[:12] + "\r\n"
	first := "GET /api/seckill/status?productId=p1&t=" + jwt[:20] + " HTTP/1.1\r\n"
	cases := []struct{ name, raw string }{
		{"header without a colon", first + "Host: edge\r\n" + creds + "ThisHeaderHasNoColon " + jwt + "\r\n\r\n"},
		{"Content-Length abc", "POST /api/seckill/do HTTP/1.1\r\nHost: edge\r\n" + creds + "Content-Length: abc\r\n\r\n{}"},
		{"duplicate Host", first + "Host: edge\r\n" + creds + "Host: other\r\n\r\n"},
		{"NUL byte", first + "Host: edge\r\n" + creds + "X-Nul: a\x00b\r\n\r\n"},
	}
	for _, srv := range []struct{ name, addr string }{{"shopper", e.Addr}, {"admin", e.Admin}} {
		for _, tc := range cases {
			status := sendRaw(t, srv.addr, tc.raw)
			if !strings.HasPrefix(status, "HTTP/1.1 4") {
				t.Errorf("%s, %s: answered %q, want a 4xx", srv.name, tc.name, status)
			}
		}
		// fasthttp's own line about each connection comes through the
		// edge's logger (so not to stderr), by kind.
		await.Until(t, 5*time.Second, srv.name+"'s fasthttp lines in the edge's log", func() bool {
			return strings.Count(logs.String(), `"fasthttp: error when serving connection`) >= len(cases) &&
				strings.Contains(logs.String(), "server="+srv.name)
		})
	}
	out := logs.String()
	for _, leak := range []string{jwt, jwt[:20], jwt[len(jwt)-20:], "ThisHeaderHasNoColon", "key-"} {
		if strings.Contains(out, leak) {
			t.Fatalf("the log holds %q from a request:\n%s", leak, out)
		}
	}
	// What the log may say: the method, the path and the kind of error.
	for _, want := range []string{
		`msg="bad request"`, "method=POST path=/api/seckill/do ", "method=GET path=/api/seckill/status ",
		`err="header without a colon"`, `err="bad Content-Length"`, `err="duplicate Host"`, `err="invalid header value"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// sendRaw writes raw on a new connection and returns the answer's status
// line, reading until the edge closes the connection.
func sendRaw(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	line, _, _ := strings.Cut(string(b), "\r\n")
	return line
}
