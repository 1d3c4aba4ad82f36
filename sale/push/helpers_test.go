package push_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/edgetest"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/push"
)

// testUserHeader stands in for the session filter: the tests here are about
// the stream, package filters tests the session. (e2e tests use real JWTs.)
const testUserHeader = "X-Test-User"

// env is a Redis, a stock store, a hub and the sale's events handler on a
// loopback fasthttp server: the edge's event path without the filter chain.
type env struct {
	t     testing.TB
	redis *redistest.Server // nil on a cluster
	raw   rueidis.Client    // the test's own, to write what others would
	st    *stock.Store
	hub   *push.Hub
	svc   *sale.Service
	addr  string
	srv   *fasthttp.Server
}

type envOpts struct {
	// events edits the `events:` section, which is conf's defaults.
	events func(c *conf.EventsConfig)
	// blocking leaves fasthttp's KeepHijackedConns off: the hijack handler
	// then waits for the stream to end.
	blocking bool
	redis    *redistest.Server // shared server; nil starts one
	// cluster, the seeds of a Redis Cluster, is used instead of a server.
	cluster []string
	// maxIdleWorker is fasthttp's MaxIdleWorkerDuration (0: its default).
	maxIdleWorker time.Duration
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{t: t, redis: o.redis}
	addr := strings.Join(o.cluster, ",")
	if o.cluster == nil {
		if e.redis == nil {
			e.redis = redistest.New(t)
		}
		addr = e.redis.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	e.st = stocktest.Open(t, addr, stocktest.Timeout(2*time.Second))
	if o.cluster == nil {
		e.raw = redistest.Client(t, addr)
	} else {
		// redistest.Client is a single-node client; this one follows
		// the cluster's slots.
		if e.raw, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: o.cluster, DisableCache: true}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.raw.Close)
	}
	cfg := push.Config{EventsConfig: conf.Defaults().Events}
	if o.events != nil {
		o.events(&cfg.EventsConfig)
	}
	cfg.Render = sale.AppendResult
	cfg.KeepHijackedConns = !o.blocking
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if e.hub, err = push.New(e.st, cfg); err != nil {
		t.Fatal(err)
	}
	e.hub.Start(ctx)
	if !e.hub.Stats().Subscribed {
		t.Fatal("hub not subscribed after Start")
	}
	e.svc = sale.New(sale.Deps{Store: e.st, Sales: catalog.NewRegistry(), Events: e.hub, Log: cfg.Log})
	if err := e.svc.Apply(ctx, &sale.Settings{MaxBody: 4096}); err != nil {
		t.Fatal(err)
	}
	e.srv = &fasthttp.Server{Handler: e.handle, KeepHijackedConns: !o.blocking, ReadBufferSize: 8192, MaxIdleWorkerDuration: o.maxIdleWorker}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	go e.srv.Serve(ln)
	t.Cleanup(func() {
		e.srv.Shutdown()
		e.hub.Close()
	})
	return e
}

var reqPool = sync.Pool{New: func() any { return new(api.Call) }}

func (e *env) handle(ctx *fasthttp.RequestCtx) {
	r := reqPool.Get().(*api.Call)
	defer func() { r.Reset(); reqPool.Put(r) }()
	r.Ctx, r.NowNano = ctx, time.Now().UnixNano()
	if rej := sale.Parse(r, 4096); rej != nil {
		rej.Write(ctx)
		return
	}
	if u := ctx.Request.Header.Peek(testUserHeader); len(u) > 0 {
		r.UserID = u
	}
	e.svc.Handle(r)
}

// order writes an order hash as the deduction script does.
func (e *env) order(product string, id int64, user, state string) {
	e.t.Helper()
	c := e.raw
	err := c.Do(context.Background(), c.B().Hset().Key(stock.OrderKey(product, id)).FieldValue().
		FieldValue("state", state).FieldValue("user", user).FieldValue("qty", "2").
		FieldValue("price", "990").FieldValue("created", "1767225600000").FieldValue("node", "1").Build()).Error()
	if err != nil {
		e.t.Fatal(err)
	}
}

// setState changes an order's state without telling anyone (a lost message).
func (e *env) setState(product string, id int64, state string) {
	e.t.Helper()
	c := e.raw
	if err := c.Do(context.Background(), c.B().Hset().Key(stock.OrderKey(product, id)).FieldValue().FieldValue("state", state).Build()).Error(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) publishStored(product string, ids ...int64) {
	e.t.Helper()
	if err := e.st.PublishStored(context.Background(), map[string][]int64{product: ids}); err != nil {
		e.t.Fatal(err)
	}
}

// waitStats polls the hub's counters (they change on the hub's goroutines;
// there is nothing to block on) until cond holds, at most d.
func (e *env) waitStats(d time.Duration, what string, cond func(push.Stats) bool) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond(e.hub.Stats()) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v; stats %+v", what, d, e.hub.Stats())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sse is a shopper's connection to the events endpoint, read by hand so the
// tests see exactly what goes over the wire.
type sse struct {
	t       testing.TB
	c       net.Conn
	r       *bufio.Reader
	status  int
	headers map[string]string
	body    string // non-stream answers
}

// open requests the stream; user "" sends no identity.
func open(t testing.TB, addr, product string, id int64, user string) *sse {
	t.Helper()
	return openRaw(t, addr, "/api/seckill/events?orderId="+strconv.FormatInt(id, 10)+"&productId="+product, user)
}

func openRaw(t testing.TB, addr, target, user string) *sse {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "GET " + target + " HTTP/1.1\r\nHost: edge\r\nAccept: text/event-stream\r\n"
	if user != "" {
		req += testUserHeader + ": " + user + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	s := &sse{t: t, c: c, r: bufio.NewReader(c)}
	s.deadline()
	if s.status, s.headers, s.body, err = edgetest.ReadHead(s.r); err != nil {
		t.Fatal(err)
	}
	return s
}

// deadline bounds every read: a hung stream fails the test instead of
// hanging it. It is not how the tests wait for anything.
func (s *sse) deadline() { s.c.SetReadDeadline(time.Now().Add(10 * time.Second)) }

// next returns the next event's data, skipping heartbeat comments, or ""
// and the error at the end of the stream.
func (s *sse) next() (string, error) {
	s.deadline()
	return edgetest.NextEvent(s.r)
}

// comment reads until a comment line (a heartbeat) and fails on an event.
func (s *sse) comment() {
	s.t.Helper()
	s.deadline()
	line, err := s.r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, ":") {
		s.t.Fatalf("want a heartbeat comment, got %q %v", line, err)
	}
}

func (s *sse) mustNext() string {
	s.t.Helper()
	d, err := s.next()
	if err != nil {
		s.t.Fatalf("next event: %v", err)
	}
	return d
}

// end asserts the server closed the stream.
func (s *sse) end() {
	s.t.Helper()
	if d, err := s.next(); err != io.EOF {
		s.t.Fatalf("want the stream closed, got %q %v", d, err)
	}
}

func status(data string) string {
	const k = `"status":"`
	i := strings.Index(data, k)
	if i < 0 {
		return ""
	}
	rest := data[i+len(k):]
	return rest[:strings.IndexByte(rest, '"')]
}

func mustContain(t testing.TB, data string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(data, p) {
			t.Fatalf("event %s lacks %s", data, p)
		}
	}
}

var idSeq atomic.Int64

func init() { idSeq.Store(time.Now().UnixNano() >> 8) }

func nextID() int64 { return idSeq.Add(1) }
