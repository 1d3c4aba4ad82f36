package browser

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"flashgate/internal/edgetest"
	"flashgate/internal/redistest"
	"flashgate/internal/syncbuf"
	"flashgate/proxy"
	"flashgate/sale/session"
)

const (
	sessionSecret = "browser-session-secret-0123456789abcdef"
	tokenSecret   = "browser-token-secret-0123456789abcdefgh"
)

// baseConfig is every test's edge: loopback listeners, the sale chain as
// edge.yaml ships it with limits high enough not to get in the way, demo
// login on, the embedded Kafka and order store. Tests merge YAML over it
// (maps merge, lists replace); redis.addr and data_dir are set per test.
const baseConfig = `
node_id: 7
listen:
  addr: "127.0.0.1:0"
  shutdown_timeout: 2s
admin:
  addr: "127.0.0.1:0"
log:
  level: warn
  format: text
  access_sample: 0
reload:
  watch: false
filters:
  - type: access
    scope: all
    rules: ["allow all"]
  - type: ip_limit
    rate: 100000r/s
    burst: 100000
    nodelay: true
  - type: conn_limit
    max: 10000
  - type: session
  - type: sale_window
  - type: sold_out
  - type: user_limit
    limits:
      - rate: 1000r/s
        burst: 1000
        nodelay: true
  - type: purchase_token
redis:
  timeout: 500ms
auth:
  secrets: ["` + sessionSecret + `"]
  demo_login: true
  demo_login_force: true # a real redis-server: the page's sign-in is under test
sale:
  token_secret: "` + tokenSecret + `"
  refresh_interval: 1s
orders:
  consumer: true
  batch_time: 10ms
activities: []
`

// edge is one proxy.Server on loopback, with a client for its APIs.
type edge struct {
	t     *testing.T
	srv   *proxy.Server
	base  string // http://host:port of the shopper listener
	admin string // http://host:port of the admin listener
	token string // admin token ("" when none)
	jwt   *session.Codec
	hc    *http.Client
	logs  *syncbuf.Buffer
}

// startEdge starts an edge on its own redis-server and data directory, on
// baseConfig merged with overrides, until the test ends.
func startEdge(t *testing.T, overrides ...string) *edge {
	t.Helper()
	redisAddr := redistest.Start(t)
	ov := append([]string{fmt.Sprintf("redis: {addr: %q}\ndata_dir: %q\n", redisAddr, t.TempDir())}, overrides...)
	logs := &syncbuf.Buffer{}
	ed := edgetest.Start(t, edgetest.WriteConfig(t, baseConfig, ov...),
		slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	codec, err := session.NewCodec([][]byte{[]byte(sessionSecret)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e := &edge{
		t: t, srv: ed.Srv, base: "http://" + ed.Addr, admin: "http://" + ed.Admin,
		token: ed.Doc.Config.Admin.Token, jwt: codec, hc: &http.Client{Timeout: 10 * time.Second}, logs: logs,
	}
	t.Cleanup(func() {
		ed.Stop()
		e.hc.CloseIdleConnections()
		if t.Failed() && logs.Len() > 0 {
			t.Logf("edge log (warn and above):\n%s", logs.Tail(4000))
		}
	})
	return e
}

// activities renders an `activities:` override of sale entries.
func activities(items ...string) string { return edgetest.Activities(items...) }

// sale is one activity entry.
func sale(id, name, price string, stock, limit int, start, end string) string {
	return fmt.Sprintf("  - {product_id: %s, name: %q, price: %q, stock: %d, limit: %d, start: %q, end: %q}\n",
		id, name, price, stock, limit, start, end)
}

// page is the sale page's URL for a product.
func (e *edge) page(product string) string { return e.base + "/seckill/" + product }

// apiResp is one answer of the edge.
type apiResp struct {
	Status int
	Body   []byte
	Header http.Header
}

func (r apiResp) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }

// field returns a top-level string or number field of a JSON answer.
func (r apiResp) field(k string) string {
	var m map[string]any
	if json.Unmarshal(r.Body, &m) != nil {
		return ""
	}
	switch v := m[k].(type) {
	case string:
		return v
	case float64:
		return fmt.Sprint(int64(v))
	case bool:
		return fmt.Sprint(v)
	}
	return ""
}

func (e *edge) request(method, rawURL, auth string, body any) apiResp {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, rawURL, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	res, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	return apiResp{Status: res.StatusCode, Body: b, Header: res.Header}
}

// session is a session JWT for user, as /api/login would set it.
func (e *edge) session(user string) string {
	e.t.Helper()
	tok, err := e.jwt.Sign(user, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// buy is a shopper's purchase through the API: token, then do. It returns
// the answer of do (or of token when that refused).
func (e *edge) buy(user, product string, qty int) apiResp {
	e.t.Helper()
	jwt := e.session(user)
	r := e.request("POST", e.base+"/api/seckill/token", jwt, map[string]any{"productId": product})
	if r.Status != 200 {
		return r
	}
	return e.request("POST", e.base+"/api/seckill/do", jwt,
		map[string]any{"productId": product, "token": r.field("token"), "quantity": qty})
}

// mustBuy buys and fails the test unless the edge answered 200 pending.
func (e *edge) mustBuy(user, product string, qty int) (orderID string) {
	e.t.Helper()
	r := e.buy(user, product, qty)
	if r.Status != 200 || r.field("orderId") == "" {
		e.t.Fatalf("buy %s %s: %v", user, product, r)
	}
	return r.field("orderId")
}

// result is GET /api/seckill/result for the order's owner.
func (e *edge) result(user, product, orderID string) apiResp {
	e.t.Helper()
	return e.request("GET", e.base+"/api/seckill/result?orderId="+url.QueryEscape(orderID)+"&productId="+url.QueryEscape(product), e.session(user), nil)
}

// status is GET /api/seckill/status.
func (e *edge) status(product string) map[string]any {
	e.t.Helper()
	r := e.request("GET", e.base+"/api/seckill/status?productId="+url.QueryEscape(product), "", nil)
	var m map[string]any
	if r.Status != 200 || json.Unmarshal(r.Body, &m) != nil {
		e.t.Fatalf("status %s: %v", product, r)
	}
	return m
}

// adminPost calls the admin listener (with the token when one is set).
func (e *edge) adminPost(path string, body any) apiResp {
	e.t.Helper()
	r := e.request("POST", e.admin+path, e.token, body)
	if r.Status != 200 {
		e.t.Fatalf("admin %s: %v", path, r)
	}
	return r
}
