package sale

import (
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

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/order"
	"flashgate/orders/orderid"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
)

// TestResultNeverGoesBackAfterFailover: nemesis seed 204's status_backwards.
// A shopper's order is marked success on the master after its replica
// stopped following it (the lag), she reads "success"; the master dies and
// the replica, promoted, takes its place — it still holds the order
// pending, and the sale's meta names the old master's run id (nobody has
// bought since, so nothing fenced the sale). Her next polls must not read
// "pending": the edge answers RECOVERING (the order store has it stored
// unpaid, which a payment Redis accepted might have gone past) and fences
// the sale, and once the store holds a final state, that. Before the fix,
// result answered "pending" from the promoted replica.
func TestResultNeverGoesBackAfterFailover(t *testing.T) {
	const p = "rb"
	master, replica := redistest.New(t), redistest.New(t)
	ctx := context.Background()
	rc, mc := redisClient(t, replica.Addr()), redisClient(t, master.Addr())
	// A diskless sync starts at once (its default waits 5 s for more replicas).
	if err := mc.Do(ctx, mc.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", "0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(master.Addr())
	if err := rc.Do(ctx, rc.B().Replicaof().Host(host).Port(mustAtoi(t, port)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the replica in sync with the master", func() bool {
		info, err := rc.Do(ctx, rc.B().Info().Section("replication").Build()).ToString()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})

	// The edge knows one address; a failover (Sentinel, a cluster's slot
	// map) moves what it reaches there to the promoted replica.
	sw := newSwitchProxy(t, master.Addr())
	st := stocktest.Open(t, sw.addr(), stocktest.Timeout(2*time.Second))
	store, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ids, _ := orderid.NewGenerator(1, func() int64 { return time.Now().UnixMilli() })
	svc := New(Deps{Store: st, Sales: catalog.NewRegistry(), IDs: ids, Results: store, Node: 1,
		Breakers: NewBreakers(1000, time.Hour, nil, nil), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	now := time.Now()
	if err := svc.Apply(ctx, &Settings{TokenTTL: time.Minute, Catalog: []*catalog.Sale{{ProductID: p, Name: p, PriceCents: 100,
		Stock: 10, Limit: 1, StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}}}); err != nil {
		t.Fatal(err)
	}
	r := &doRig{srv: master, st: st, svc: svc}

	code, body := r.doBody(p, "shopper")
	ans := parseOrderAnswer(t, body)
	if code != 200 || ans.Status != "pending" {
		t.Fatalf("purchase: %d %s", code, body)
	}
	id, _ := strconv.ParseInt(ans.OrderID, 10, 64)
	if code, body := r.result(p, "shopper", ans.OrderID); code != 200 || !strings.Contains(body, `"status":"pending"`) {
		t.Fatalf("result before the success mark: %d %s", code, body)
	}
	if n, err := mc.Do(ctx, mc.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	// The replica stops following (and becomes a master): from here on it
	// lags by everything the master is written.
	if err := rc.Do(ctx, rc.B().Replicaof().No().One().Build()).Error(); err != nil {
		t.Fatal(err)
	}

	// The consumer stores the order and marks it success, on the master.
	if err := store.Insert(ctx, []orderstore.Row{{Order: orderOf(t, st, p, id), UpdatedMs: time.Now().UnixMilli()}}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.MarkSuccess(ctx, p, id); err != nil || n != 1 {
		t.Fatalf("mark success: %d, %v", n, err)
	}
	if code, body := r.result(p, "shopper", ans.OrderID); code != 200 || !strings.Contains(body, `"status":"success"`) {
		t.Fatalf("result after the success mark: %d %s", code, body)
	}

	// The master dies; the replica is promoted in its place. A failover
	// waits out a node timeout (Sentinel's down-after, a cluster's
	// node-timeout: a second or more) after the last write the replica got,
	// so the last verification of the sale it holds is older than the
	// trust a verification is given (stock.VerifyTrust); awaited here, where the
	// promotion is instant.
	master.Stop()
	last, err := rc.Do(ctx, rc.B().Hget().Key(stock.MetaKey(p)).Field("verified").Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("the sale's last verification on the replica: %v", err)
	}
	await.Until(t, 5*time.Second, "the replica's clock past the trust of the last verification it holds", func() bool {
		tm, err := rc.Do(ctx, rc.B().Time().Build()).AsIntSlice()
		return err == nil && len(tm) == 2 && tm[0]*1000+tm[1]/1000 >= last+stock.VerifyTrust.Milliseconds()
	})
	sw.moveTo(replica.Addr())
	if v, err := rc.Do(ctx, rc.B().Hget().Key(stock.OrderBucketKey(p, id)).Field(ans.OrderID).Build()).ToString(); err != nil || v[0] != 'p' {
		if v2, err2 := rc.Do(ctx, rc.B().Get().Key(stock.OrderKey(p, id)).Build()).ToString(); err2 != nil || v2[0] != 'p' {
			t.Fatalf("the promoted replica does not lag: the order reads %q / %q (%v, %v)", v, v2, err, err2)
		}
	}

	// The shopper polls on: never "pending" again.
	var first string
	await.NoError(t, 10*time.Second, "a result answer from the promoted replica", func() error {
		code, body := r.result(p, "shopper", ans.OrderID)
		if code == 200 && strings.Contains(body, `"status":"pending"`) {
			t.Fatalf("result after the failover: %d %s, after success", code, body)
		}
		first = strconv.Itoa(code) + " " + body
		if code == 503 && strings.Contains(body, "RECOVERING") {
			return nil
		}
		return errorString(first)
	})
	for range 20 {
		if code, body := r.result(p, "shopper", ans.OrderID); code != 503 || !strings.Contains(body, "RECOVERING") {
			t.Fatalf("result while the sale waits for its rebuild: %d %s, want 503 RECOVERING", code, body)
		}
	}
	info, _, err := st.SaleInfo(ctx, p)
	if err != nil || !strings.HasSuffix(info.Fence, ":runid") {
		t.Fatalf("the sale on the promoted replica: fence %q, %v; want fenced by the result call (run id)", info.Fence, err)
	}
	// A final state the order store holds is no step back: it is answered.
	row := orderstore.Row{Order: orderOf(t, st, p, id), Status: orderstore.StatusPaid, PaidMs: time.Now().UnixMilli(), UpdatedMs: time.Now().UnixMilli() + 1}
	if err := store.Insert(ctx, []orderstore.Row{row}); err != nil {
		t.Fatal(err)
	}
	if code, body := r.result(p, "shopper", ans.OrderID); code != 200 || !strings.Contains(body, `"status":"paid"`) {
		t.Fatalf("result once the store holds the payment: %d %s, want paid", code, body)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func redisClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// orderOf is the order as Redis holds it (the row the consumer stores).
func orderOf(t *testing.T, st *stock.Store, p string, id int64) order.Order {
	t.Helper()
	info, ok, err := st.OrderState(context.Background(), p, id)
	if err != nil || !ok {
		t.Fatalf("order %d: %v, %v", id, ok, err)
	}
	return info.Order
}

// switchProxy forwards TCP connections to one address, which moveTo
// changes: the connections open then are cut, and the client's next dial
// reaches the new address (what a failover does to a client that follows
// it).
type switchProxy struct {
	ln     net.Listener
	target atomic.Pointer[string]
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, conns: map[net.Conn]bool{}}
	p.target.Store(&target)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *switchProxy) addr() string { return p.ln.Addr().String() }

func (p *switchProxy) moveTo(target string) {
	p.target.Store(&target)
	p.cut()
}

func (p *switchProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *switchProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *switchProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", *p.target.Load())
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { io.Copy(up, c); up.Close(); c.Close() }()
	io.Copy(c, up)
	c.Close()
	up.Close()
}
