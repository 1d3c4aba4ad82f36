package push_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/orders/order"
	"flashgate/orders/stock"
	"flashgate/sale/push"
)

// The whole life of a stream: head and pending at once, the outcome when
// the consumer publishes the batch, then the end; in both hijack modes.
func TestStreamGetsItsOutcome(t *testing.T) {
	r := redistest.New(t)
	for _, mode := range []struct {
		name     string
		blocking bool
	}{{"parked", false}, {"blocking", true}} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t, envOpts{redis: r, blocking: mode.blocking})
			id, other := nextID(), nextID()
			e.order("p1", id, "alice", stock.StatePending)
			e.order("p1", other, "bob", stock.StatePending)
			s := open(t, e.addr, "p1", id, "alice")
			if s.status != 200 || s.headers["content-type"] != "text/event-stream" || s.headers["cache-control"] != "no-store" {
				t.Fatalf("answer %d %v %q", s.status, s.headers, s.body)
			}
			first := s.mustNext()
			mustContain(t, first, `"status":"pending"`, `"orderId":"`+strconv.FormatInt(id, 10)+`"`, `"productId":"p1"`, `"quantity":2`, `"price":"9.90"`)
			b := open(t, e.addr, "p1", other, "bob")
			b.mustNext()

			// A batch that holds alice's order (and ids nobody waits for).
			e.publishStored("p1", id+1000, id, id-1000)
			mustContain(t, s.mustNext(), `"status":"success"`, `"orderId":"`+strconv.FormatInt(id, 10)+`"`)
			s.end()
			// Another product's order with bob's id is not bob's.
			e.publishStored("p2", other)
			e.publishStored("p1", other)
			if got := status(b.mustNext()); got != "success" {
				t.Fatalf("bob got %q", got)
			}
			b.end()
			e.waitStats(time.Second, "both streams closed", func(st push.Stats) bool { return st.Open == 0 && st.Pushes == 2 })
		})
	}
}

// A released order ends its stream with how it was released: cancelled,
// expired by its pay deadline; a paid one with paid.
func TestSettledOrderEndsWithItsKind(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, c := range []struct {
		kind stock.ChangeKind
		want string
	}{
		{stock.KindCancelled, `"status":"cancelled"`},
		{stock.KindExpired, `"status":"expired"`},
		{stock.KindPaid, `"status":"paid"`},
	} {
		id := nextID()
		e.order("p1", id, "alice", stock.StatePending)
		s := open(t, e.addr, "p1", id, "alice")
		s.mustNext()
		if err := e.st.PublishChange(context.Background(), "p1", c.kind, id); err != nil {
			t.Fatal(err)
		}
		mustContain(t, s.mustNext(), c.want)
		s.end()
	}
}

// An order already decided is one event in a plain response: nothing is
// held for it.
func TestDecidedOrderIsAnsweredAtOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := nextID()
	e.order("p1", id, "alice", stock.StateSuccess)
	s := open(t, e.addr, "p1", id, "alice")
	if s.status != 200 || s.headers["content-type"] != "text/event-stream" {
		t.Fatalf("answer %d %v", s.status, s.headers)
	}
	if !strings.HasPrefix(s.body, "data: ") || !strings.HasSuffix(s.body, "\n\n") || status(s.body) != "success" {
		t.Fatalf("body %q", s.body)
	}
	if st := e.hub.Stats(); st.Open != 0 {
		t.Fatalf("a stream is held for a decided order: %+v", st)
	}
}

// Bad input is refused with its code and holds nothing.
func TestRefusals(t *testing.T) {
	e := newEnv(t, envOpts{events: func(c *conf.EventsConfig) { c.MaxPerUser = 1 }})
	id := nextID()
	e.order("p1", id, "alice", stock.StatePending)
	for _, c := range []struct {
		name, target, user string
		status             int
		code               string
	}{
		{"no session", "/api/seckill/events?orderId=" + strconv.FormatInt(id, 10) + "&productId=p1", "", 401, "UNAUTHENTICATED"},
		{"another shopper's order", "/api/seckill/events?orderId=" + strconv.FormatInt(id, 10) + "&productId=p1", "mallory", 404, "NOT_FOUND"},
		{"unknown order", "/api/seckill/events?orderId=" + strconv.FormatInt(id+1, 10) + "&productId=p1", "alice", 404, "NOT_FOUND"},
		{"order under another product", "/api/seckill/events?orderId=" + strconv.FormatInt(id, 10) + "&productId=p2", "alice", 404, "NOT_FOUND"},
		{"malformed id", "/api/seckill/events?orderId=12x&productId=p1", "alice", 400, "BAD_REQUEST"},
		{"negative id", "/api/seckill/events?orderId=-5&productId=p1", "alice", 400, "BAD_REQUEST"},
		{"no product", "/api/seckill/events?orderId=" + strconv.FormatInt(id, 10), "alice", 400, "BAD_REQUEST"},
		{"bad product", "/api/seckill/events?orderId=1&productId=%7Bp%7D", "alice", 400, "BAD_REQUEST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openRaw(t, e.addr, c.target, c.user)
			if s.status != c.status || !strings.Contains(s.body, `"code":"`+c.code+`"`) {
				t.Fatalf("got %d %s, want %d %s", s.status, s.body, c.status, c.code)
			}
		})
	}
	if st := e.hub.Stats(); st.Open != 0 {
		t.Fatalf("refused requests hold streams: %+v", st)
	}

	// The per-user limit (1 here), with Retry-After; other shoppers are not
	// affected, and the slot is free again once the stream ends.
	a := open(t, e.addr, "p1", id, "alice")
	a.mustNext()
	again := open(t, e.addr, "p1", id, "alice")
	if again.status != 429 || !strings.Contains(again.body, "RATE_LIMITED") || again.headers["retry-after"] != "1" {
		t.Fatalf("second stream of alice: %d %v %s", again.status, again.headers, again.body)
	}
	bid := nextID()
	e.order("p1", bid, "bob", stock.StatePending)
	open(t, e.addr, "p1", bid, "bob").mustNext()
	e.publishStored("p1", id)
	a.mustNext()
	a.end()
	e.waitStats(time.Second, "alice's slot freed", func(st push.Stats) bool { return st.Open == 1 })
	open(t, e.addr, "p1", id, "alice") // decided now: a plain answer
	if st := e.hub.Stats(); st.RejectedUser != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// The edge limit refuses the stream beyond it before reading Redis.
func TestEdgeLimit(t *testing.T) {
	e := newEnv(t, envOpts{events: func(c *conf.EventsConfig) { c.MaxStreams = 3 }})
	for i := range 4 {
		id := nextID()
		u := "u" + strconv.Itoa(i)
		e.order("p1", id, u, stock.StatePending)
		s := open(t, e.addr, "p1", id, u)
		if i < 3 {
			s.mustNext()
			continue
		}
		if s.status != 429 || !strings.Contains(s.body, "RATE_LIMITED") {
			t.Fatalf("stream beyond the limit: %d %s", s.status, s.body)
		}
	}
	if st := e.hub.Stats(); st.Open != 3 || st.RejectedEdge != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A shopper at the limit whose older stream belongs to a closed page gets
// the slot back at once, not a heartbeat later.
func TestClosedPageFreesItsSlot(t *testing.T) {
	e := newEnv(t, envOpts{events: func(c *conf.EventsConfig) { c.MaxPerUser = 1 }})
	id := nextID()
	e.order("p1", id, "alice", stock.StatePending)
	old := open(t, e.addr, "p1", id, "alice")
	old.mustNext()
	old.c.Close() // the page was reloaded
	s := open(t, e.addr, "p1", id, "alice")
	if s.status != 200 {
		t.Fatalf("stream after the page closed the old one: %d %s", s.status, s.body)
	}
	s.mustNext()
	if st := e.hub.Stats(); st.DropsGone != 1 || st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Heartbeats keep an idle stream talking; the deadline ends it with the
// state read then — here a success whose message was lost — or pending.
func TestHeartbeatAndDeadline(t *testing.T) {
	e := newEnv(t, envOpts{events: func(c *conf.EventsConfig) {
		c.Heartbeat, c.Deadline = 40*time.Millisecond, 400*time.Millisecond
	}})
	lost, stuck := nextID(), nextID()
	e.order("p1", lost, "alice", stock.StatePending)
	e.order("p1", stuck, "bob", stock.StatePending)
	// Taken before the request is sent: the hub starts the deadline when
	// it registers the stream, which is after this and before open returns.
	opened := time.Now()
	a := open(t, e.addr, "p1", lost, "alice")
	a.mustNext()
	b := open(t, e.addr, "p1", stuck, "bob")
	b.mustNext()
	a.comment()
	a.comment()
	e.setState("p1", lost, stock.StateSuccess) // stored, but nobody published

	if got := status(a.mustNext()); got != "success" {
		t.Fatalf("alice's stream ended with %q, want the success read at the deadline", got)
	}
	if took := time.Since(opened); took < 400*time.Millisecond || took > 2*time.Second {
		t.Fatalf("deadline after %v, want 400ms (+ a tick)", took)
	}
	a.end()
	if got := status(b.mustNext()); got != "pending" {
		t.Fatalf("bob's stream ended with %q, want pending", got)
	}
	b.end()
	e.waitStats(time.Second, "streams ended", func(st push.Stats) bool { return st.Open == 0 })
	if st := e.hub.Stats(); st.Deadlines != 1 || st.Pushes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// An edge whose subscription was cut misses what was published meanwhile;
// on resubscribing it reads the states of its streams and settles them.
func TestResyncAfterReconnect(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := nextID()
	e.order("p1", id, "alice", stock.StatePending)
	s := open(t, e.addr, "p1", id, "alice")
	s.mustNext()

	// Kill the hub's subscription connection and store the order while the
	// hub is not listening (its resubscribe backoff starts at 10ms; the
	// state change is before the kill, so the message is surely lost).
	// From a client of our own: CLIENT KILL skips the caller's connection,
	// which may be the one rueidis multiplexes the subscription on.
	e.setState("p1", id, stock.StateSuccess)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.redis.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Do(context.Background(), c.B().ClientKill().TypePubsub().SkipmeYes().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	mustContain(t, s.mustNext(), `"status":"success"`)
	s.end()
	if st := e.hub.Stats(); st.Resyncs < 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Closing the hub closes every stream.
func TestCloseEndsStreams(t *testing.T) {
	e := newEnv(t, envOpts{})
	var ss []*sse
	for i := range 3 {
		id := nextID()
		u := "u" + strconv.Itoa(i)
		e.order("p1", id, u, stock.StatePending)
		s := open(t, e.addr, "p1", id, u)
		s.mustNext()
		ss = append(ss, s)
	}
	e.hub.Close()
	for _, s := range ss {
		s.end()
	}
	if st := e.hub.Stats(); st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
	after := nextID()
	e.order("p1", after, "late", stock.StatePending)
	if s := open(t, e.addr, "p1", after, "late"); s.status != 503 {
		t.Fatalf("stream after Close: %d %s", s.status, s.body)
	}
}

// A message arriving while the order is being read is not lost: the
// stream is registered before the read, and Serve answers with the outcome.
func TestOutcomeDuringOpenIsKept(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := nextID()
	e.order("p1", id, "alice", stock.StatePending)
	st, rej := e.hub.Open([]byte("p1"), id, []byte("alice"))
	if rej != nil {
		t.Fatal(rej)
	}
	e.publishStored("p1", id)
	// Messages are handled in order: once a later one reached its stream,
	// the first was handled too.
	marker := nextID()
	e.order("p1", marker, "bob", stock.StatePending)
	m := open(t, e.addr, "p1", marker, "bob")
	m.mustNext()
	e.publishStored("p1", marker)
	m.mustNext()

	// The read (done before the message) said pending; Serve knows better.
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		st.Serve(ctx, stock.OrderInfo{State: stock.StatePending, Order: order.Order{
			ID: id, ProductID: "p1", UserID: "alice", Qty: 2, PriceCents: 990,
		}})
	}, KeepHijackedConns: true}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown()
	s := open(t, ln.Addr().String(), "p1", id, "alice")
	if status(s.body) != "success" {
		t.Fatalf("answer %d %q, want the success published while the order was read", s.status, s.body)
	}
	e.waitStats(time.Second, "all streams closed", func(s push.Stats) bool { return s.Open == 0 })
}
