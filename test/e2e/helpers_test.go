package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"

	"flashgate/internal/edgetest"
	"flashgate/orders/stock"
	"flashgate/proxy"
	"flashgate/sale/session"
)

// Fixed secrets shared by every edge of a test, so that a session or a
// purchase token minted by one edge is valid on another.
const (
	sessionSecret = "e2e-session-secret-0123456789abcdef"
	tokenSecret   = "e2e-token-secret-0123456789abcdefgh"
	otherSecret   = "e2e-someone-elses-secret-0123456789"
)

// baseConfig is the edge every test starts from: loopback listeners, the
// whole sale chain in the order edge.yaml ships it, and limits high enough
// that a load test whose every request comes from 127.0.0.1 is not rate
// limited. Tests merge YAML overrides over it (maps merge, lists replace).
const baseConfig = `
node_id: 1
listen:
  addr: "127.0.0.1:0"
  shutdown_timeout: 5s
admin:
  addr: "127.0.0.1:0"
log:
  level: error
  access_sample: 0
reload:
  watch: false
filters:
  - type: access
    scope: all
    rules: ["allow all"]
  - type: ip_limit
    rate: 1000000r/s
    burst: 1000000
    nodelay: true
  - type: conn_limit
    max: 100000
  - type: sale_window
  - type: sold_out
  - type: session
  - type: user_limit
    limits:
      - rate: 100000r/s
        burst: 100000
        nodelay: true
  - type: purchase_token
redis:
  addr: ""
  timeout: 200ms
auth:
  secrets: ["` + sessionSecret + `"]
  demo_login: true
  demo_login_force: true # real servers: the page's sign-in is under test (push_browser_test)
sale:
  token_secret: "` + tokenSecret + `"
  refresh_interval: 1s
activities: []
`

var nodeSeq atomic.Int32

// edge is one proxy.Server serving on loopback.
type edge struct {
	t     *testing.T
	srv   *proxy.Server
	addr  string // host:port of the shopper listener
	admin string // host:port of the admin listener
	cfg   string // path of the config file
	api   *fasthttp.Client
	ed    *edgetest.Edge
}

// startEdge writes the base config merged with overrides (YAML documents)
// and redis.addr = redisAddr into a temp file, loads it like the binary
// does, and serves it on fresh loopback ports until the test ends.
func startEdge(t *testing.T, redisAddr string, overrides ...string) *edge {
	t.Helper()
	ov := append([]string{fmt.Sprintf("node_id: %d\nredis: {addr: %q}\n", nodeSeq.Add(1)%1000+1, redisAddr)}, overrides...)
	return startEdgeFile(t, writeConfig(t, ov...))
}

// writeConfig renders the merged config into a file in t.TempDir().
func writeConfig(t *testing.T, overrides ...string) string {
	t.Helper()
	return edgetest.WriteConfig(t, baseConfig, overrides...)
}

// startEdgeFile starts an edge on an existing config file (a restart with
// the same config).
func startEdgeFile(t *testing.T, path string) *edge {
	t.Helper()
	ed := edgetest.Start(t, path, nil)
	e := &edge{t: t, srv: ed.Srv, addr: ed.Addr, admin: ed.Admin, cfg: path, api: newAPIClient(), ed: ed}
	t.Cleanup(func() {
		e.stop()
		e.api.CloseIdleConnections()
	})
	return e
}

func newAPIClient() *fasthttp.Client {
	return &fasthttp.Client{MaxConnsPerHost: 4096, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
}

// stop shuts the edge down (once).
func (e *edge) stop() { e.ed.Stop() }

// resp is an answer of the shopper API.
type resp struct {
	status int
	body   []byte
}

// code is the "code" of an error answer ("" when none).
func (r resp) code() string { return jsonStr(r.body, "code") }

func (r resp) String() string { return strconv.Itoa(r.status) + " " + string(r.body) }

// do sends one request to the edge. auth is a session JWT ("" for none).
func (e *edge) do(method, path, auth string, body []byte) (resp, error) {
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://" + e.addr + path)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	if err := e.api.Do(req, res); err != nil {
		return resp{}, err
	}
	return resp{status: res.StatusCode(), body: append([]byte(nil), res.Body()...)}, nil
}

// must is do for tests that cannot go on after a transport error.
func (e *edge) must(method, path, auth string, body []byte) resp {
	e.t.Helper()
	r, err := e.do(method, path, auth, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// token asks for a purchase token.
func (e *edge) token(jwt, product string) (resp, string, error) {
	r, err := e.do("POST", "/api/seckill/token", jwt, []byte(`{"productId":"`+product+`"}`))
	if err != nil || r.status != 200 {
		return r, "", err
	}
	return r, jsonStr(r.body, "token"), nil
}

// buy sends /api/seckill/do.
func (e *edge) buy(jwt, product, token string, qty int) (resp, error) {
	return e.do("POST", "/api/seckill/do", jwt,
		[]byte(`{"productId":"`+product+`","token":"`+token+`","quantity":`+strconv.Itoa(qty)+`}`))
}

// attempt is token then do; a refused token is the attempt's answer.
func (e *edge) attempt(jwt, product string, qty int) (resp, error) {
	r, tok, err := e.token(jwt, product)
	if err != nil || r.status != 200 {
		return r, err
	}
	return e.buy(jwt, product, tok, qty)
}

// status reads GET /api/seckill/status.
func (e *edge) status(product string) (phase string, remaining int64) {
	e.t.Helper()
	r := e.must("GET", "/api/seckill/status?productId="+product, "", nil)
	if r.status != 200 {
		e.t.Fatalf("status %s: %v", product, r)
	}
	rem, err := strconv.ParseInt(jsonNum(r.body, "remaining"), 10, 64)
	if err != nil {
		rem = -1
	}
	return jsonStr(r.body, "status"), rem
}

// metric reads one sample of the admin /metrics, e.g.
// `flashgate_redis_breaker_state` or `x{what="calls"}`. -1 when absent.
func (e *edge) metric(name string) float64 {
	e.t.Helper()
	var req fasthttp.Request
	var res fasthttp.Response
	req.SetRequestURI("http://" + e.admin + "/metrics")
	if err := fasthttp.DoTimeout(&req, &res, 5*time.Second); err != nil {
		e.t.Fatalf("metrics: %v", err)
	}
	for line := range strings.SplitSeq(string(res.Body()), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				e.t.Fatalf("metric %s: %q", name, line)
			}
			return v
		}
	}
	return -1
}

// jsonStr extracts "key":"value" from a flat JSON answer without decoding
// all of it (the load tests parse hundreds of thousands of answers).
func jsonStr(b []byte, key string) string {
	k := `"` + key + `":"`
	i := bytes.Index(b, []byte(k))
	if i < 0 {
		return ""
	}
	rest := b[i+len(k):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

func jsonNum(b []byte, key string) string {
	k := `"` + key + `":`
	i := bytes.Index(b, []byte(k))
	if i < 0 {
		return ""
	}
	rest := b[i+len(k):]
	j := 0
	for j < len(rest) && (rest[j] == '-' || rest[j] >= '0' && rest[j] <= '9') {
		j++
	}
	return string(rest[:j])
}

// jwts signs and caches session JWTs (HS256, the edges' auth.secrets).
type jwts struct {
	codec *session.Codec
	m     sync.Map
}

func newJWTs(t testing.TB, secret string) *jwts {
	c, err := session.NewCodec([][]byte{[]byte(secret)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &jwts{codec: c}
}

func (j *jwts) get(user string) string {
	if v, ok := j.m.Load(user); ok {
		return v.(string)
	}
	tok, err := j.codec.Sign(user, time.Now())
	if err != nil {
		panic(err)
	}
	j.m.Store(user, tok)
	return tok
}

// rdb is the test's own view of Redis.
type rdb struct {
	t testing.TB
	c rueidis.Client
}

func openRedis(t testing.TB, addr string) *rdb {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatalf("redis %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return &rdb{t: t, c: c}
}

func (r *rdb) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// stock is GET sk:{p}:stock (-1 when missing).
func (r *rdb) stock(p string) int64 {
	r.t.Helper()
	ctx, cancel := r.ctx()
	defer cancel()
	n, err := r.c.Do(ctx, r.c.B().Get().Key("sk:{"+p+"}:stock").Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return -1
	}
	if err != nil {
		r.t.Fatalf("GET stock %s: %v", p, err)
	}
	return n
}

// xlen is XLEN sk:{p}:outbox: entries not yet acknowledged by Kafka.
func (r *rdb) xlen(p string) int64 {
	r.t.Helper()
	ctx, cancel := r.ctx()
	defer cancel()
	n, err := r.c.Do(ctx, r.c.B().Xlen().Key("sk:{"+p+"}:outbox").Build()).AsInt64()
	if err != nil {
		r.t.Fatalf("XLEN %s: %v", p, err)
	}
	return n
}

// orderCount counts p's order records (sk:{p}:o:*): each is written by the
// same script call as the deduction and its outbox entry. (The outbox is
// emptied as Kafka acknowledges events, so it does not count orders.)
func (r *rdb) orderCount(p string) int64 {
	ids, _ := r.orders(p)
	return int64(len(ids))
}

// orders returns the order ids and units of every order record of p: one
// per successful deduction, whatever became of its outbox entry.
func (r *rdb) orders(p string) (orders []string, units int64) {
	r.t.Helper()
	ctx, cancel := r.ctx()
	defer cancel()
	ids, err := stock.ScanOrderIDs(ctx, r.c, p)
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := stock.ReadOrders(ctx, r.c, p, ids)
	if err != nil {
		r.t.Fatalf("read orders of %s: %v", p, err)
	}
	for _, id := range ids {
		o, ok := m[id]
		if !ok {
			r.t.Fatalf("order %s/%d: unreadable", p, id)
		}
		orders = append(orders, strconv.FormatInt(id, 10))
		units += int64(o.Qty)
	}
	return orders, units
}

// buyers scans sk:{p}:u:* and returns each buyer's count.
func (r *rdb) buyers(p string) map[string]int64 {
	r.t.Helper()
	ctx, cancel := r.ctx()
	defer cancel()
	prefix := "sk:{" + p + "}:u:"
	out := map[string]int64{}
	var cursor uint64
	for {
		e, err := r.c.Do(ctx, r.c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			r.t.Fatalf("SCAN %s: %v", prefix, err)
		}
		if len(e.Elements) > 0 {
			cmds := make(rueidis.Commands, len(e.Elements))
			for i, k := range e.Elements {
				cmds[i] = r.c.B().Get().Key(k).Build()
			}
			for i, res := range r.c.DoMulti(ctx, cmds...) {
				n, err := res.AsInt64()
				if err != nil {
					r.t.Fatalf("GET %s: %v", e.Elements[i], err)
				}
				out[strings.TrimPrefix(e.Elements[i], prefix)] = n
			}
		}
		cursor = e.Cursor
		if cursor == 0 {
			break
		}
	}
	// A sale of the hash layout (keys.go) keeps them in its buyer shards;
	// only one of the two layouts exists for a sale.
	for i := range stock.BuyerShards {
		k := stock.BuyerShardKey(p, i)
		m, err := r.c.Do(ctx, r.c.B().Hgetall().Key(k).Build()).AsIntMap()
		if err != nil {
			r.t.Fatalf("HGETALL %s: %v", k, err)
		}
		for u, n := range m {
			out[u] += n
		}
	}
	return out
}

// info returns the fields of INFO section as a map.
func (r *rdb) info(section string) map[string]string {
	r.t.Helper()
	ctx, cancel := r.ctx()
	defer cancel()
	s, err := r.c.Do(ctx, r.c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		r.t.Fatalf("INFO %s: %v", section, err)
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// scriptCalls is the number of EVALSHA + EVAL calls Redis has run.
func (r *rdb) scriptCalls() int64 {
	r.t.Helper()
	st := r.info("commandstats")
	return statCalls(st["cmdstat_evalsha"]) + statCalls(st["cmdstat_eval"])
}

// totalCommands is INFO stats total_commands_processed.
func (r *rdb) totalCommands() int64 {
	r.t.Helper()
	n, _ := strconv.ParseInt(r.info("stats")["total_commands_processed"], 10, 64)
	return n
}

// statCalls reads calls=N from a cmdstat_* value.
func statCalls(v string) int64 {
	for f := range strings.SplitSeq(v, ",") {
		if n, ok := strings.CutPrefix(f, "calls="); ok {
			c, _ := strconv.ParseInt(n, 10, 64)
			return c
		}
	}
	return 0
}

// waitFor polls cond until it holds or d passes; it reports whether it held.
// Conditions here are on other processes' state (Redis, an edge's refresh
// loop), so there is nothing to block on but polling.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// activities renders an `activities:` override.
func activities(items ...string) string { return edgetest.Activities(items...) }

// sale is one activity entry, open now for an hour.
func sale(product string, stock, limit int) string {
	return saleAt(product, stock, limit, "+0s", "+1h")
}

func saleAt(product string, stock, limit int, start, end string) string {
	return fmt.Sprintf("  - {product_id: %s, name: %q, price: \"9.90\", stock: %d, limit: %d, start: %q, end: %q}\n",
		product, "Product "+product, stock, limit, start, end)
}
