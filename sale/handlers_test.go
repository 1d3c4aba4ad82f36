package sale

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/orderid"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
)

// nonceSeq makes purchase-token nonces unique across the test run.
var nonceSeq atomic.Uint64

// doRig is a sale Service on a real redis-server, driven through Handle
// with requests as the filter chain leaves them (token already verified).
type doRig struct {
	srv  *redistest.Server
	st   *stock.Store
	svc  *Service
	logs *logBuffer // the Service's log, text lines
}

// logBuffer is a log sink safe for the Service's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stats is the store's script calls and the attempts they carried.
func (r *doRig) stats() (calls, attempts uint64) { return r.st.Stats() }

func newDoRig(t *testing.T, opts stock.Options, brk *Breakers, products ...string) *doRig {
	t.Helper()
	srv := redistest.New(t)
	opts.Timeout = cmp.Or(opts.Timeout, conf.Defaults().Redis.Timeout)
	opts.QueueTimeout = cmp.Or(opts.QueueTimeout, opts.Timeout)
	opts.OrderTTL = cmp.Or(opts.OrderTTL, conf.Defaults().Sale.OrderTTL)
	st := stocktest.Open(t, srv.Addr(), stocktest.WithOptions(opts))
	ids, err := orderid.NewGenerator(1, func() int64 { return time.Now().UnixMilli() })
	if err != nil {
		t.Fatal(err)
	}
	logs := new(logBuffer)
	svc := New(Deps{Store: st, Sales: catalog.NewRegistry(), IDs: ids, Breakers: brk,
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	now := time.Now()
	var sales []*catalog.Sale
	for _, p := range products {
		sales = append(sales, &catalog.Sale{ProductID: p, Name: p, PriceCents: 100, Stock: 1000, Limit: 1,
			StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()})
	}
	if err := svc.Apply(context.Background(), &Settings{Catalog: sales}); err != nil {
		t.Fatal(err)
	}
	return &doRig{srv: srv, st: st, svc: svc, logs: logs}
}

// do sends one purchase attempt and returns the HTTP status.
func (r *doRig) do(product, user string) int {
	code, _ := r.doBody(product, user)
	return code
}

// doBody is do with the answer's body.
func (r *doRig) doBody(product, user string) (int, string) {
	now := time.Now()
	req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: now.UnixNano(), Endpoint: api.EndpointDo,
		UserID: []byte(user), ProductID: []byte(product), Qty: 1, TokenExpiresMs: now.Add(time.Minute).UnixMilli(),
		Checked: api.TokenValid}
	binary.BigEndian.PutUint64(req.TokenNonce[:], nonceSeq.Add(1))
	r.svc.Handle(req)
	return req.Ctx.Response.StatusCode(), string(req.Ctx.Response.Body())
}

// TestBreakerCountsFailedCalls: a hung Redis (SIGSTOP) fails script calls,
// not attempts, and the breaker counts one failure per failed call. Twelve
// concurrent purchases, MaxBatch 4: the first call (1 attempt) times out
// after budget, the next (4 attempts, queued half a budget in) after
// another budget, and the 7 queued with them have spent their own budget
// by then and are never sent (stock.ErrNotSent, no failure). All 12 answer
// 503; the breaker has seen one failure per call (2), not 12, and stays
// closed with breaker_failures 12.
func TestBreakerCountsFailedCalls(t *testing.T) {
	const budget, n = 400 * time.Millisecond, 12
	brks := NewBreakers(n, time.Hour, nil, nil)
	r := newDoRig(t, stock.Options{Timeout: budget, MaxBatch: 4}, brks, "bf")
	brk := brks.For("bf")
	if code := r.do("bf", "warmup"); code != 200 { // loads the script
		t.Fatalf("warm-up purchase: %d", code)
	}
	calls0, sent0 := r.stats()

	r.srv.Pause()
	defer r.srv.Resume()
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := func(i int) { wg.Go(func() { codes[i] = r.do("bf", "u"+strconv.Itoa(i)) }) }
	start(0)
	await.Until(t, 10*time.Second, "the condition", func() bool { c, _ := r.stats(); return c == calls0+1 }) // the first call is held
	// Not synchronisation: the scenario needs the queued attempts' budgets
	// to start well after the first call's. Queued at once, the first call's
	// timer firing a moment late would leave them nothing, and they would
	// all be dropped unsent with that call.
	time.Sleep(budget / 2)
	for i := 1; i < n; i++ {
		start(i)
	}
	wg.Wait()

	for i, c := range codes {
		if c != 503 {
			t.Errorf("attempt %d: status %d, want 503", i, c)
		}
	}
	calls, sent := r.stats()
	calls, sent = calls-calls0, sent-sent0
	t.Logf("%d attempts: %d sent in %d script calls, %d never sent", n, sent, calls, n-sent)
	if sent <= calls || sent >= n {
		t.Fatalf("%d attempts sent in %d calls: the scenario needs a call of several attempts and attempts never sent", sent, calls)
	}
	if got := brk.consec.Load(); got != int64(calls) {
		t.Errorf("breaker counted %d failures for %d failed script calls (%d attempts sent, %d not); want one per call", got, calls, sent, n-sent)
	}
	if brk.State() != Closed {
		t.Errorf("breaker %v after %d failed calls, want closed (breaker_failures %d)", brk.State(), calls, n)
	}
	if got := r.svc.outcomes[outError].Value(); got != n {
		t.Errorf("%d error outcomes, want %d", got, n)
	}

	// Redis back: the next purchase goes through and resets the count.
	r.srv.Resume()
	if code := r.do("bf", "after"); code != 200 {
		t.Fatalf("after resume: status %d", code)
	}
	if got := brk.consec.Load(); got != 0 {
		t.Errorf("%d consecutive failures after a success, want 0", got)
	}
}

// TestBreakerOpensOnFailedCalls: consecutive failed calls still open it.
// Each sequential attempt against a hung Redis is its own call.
func TestBreakerOpensOnFailedCalls(t *testing.T) {
	const budget = 100 * time.Millisecond
	brks := NewBreakers(3, time.Hour, nil, nil)
	r := newDoRig(t, stock.Options{Timeout: budget}, brks, "bo")
	brk := brks.For("bo")
	if code := r.do("bo", "warmup"); code != 200 {
		t.Fatalf("warm-up purchase: %d", code)
	}
	r.srv.Pause()
	defer r.srv.Resume()
	for i := range 3 {
		if code := r.do("bo", "u"+strconv.Itoa(i)); code != 503 {
			t.Fatalf("attempt %d: status %d, want 503", i, code)
		}
	}
	if brk.State() != Open {
		t.Fatalf("breaker %v after 3 failed calls, want open", brk.State())
	}
	calls, _ := r.stats()
	if code := r.do("bo", "refused"); code != 503 {
		t.Fatalf("open breaker: status %d, want 503", code)
	}
	if c, _ := r.stats(); c != calls {
		t.Fatalf("open breaker: %d script calls made, want none", c-calls)
	}
}

// TestDoDecidesWhatTheChainDidNot: an edge whose config has no sale filter
// gives every refusal the chain would, from the handler, without a script
// call; and a rule the chain decided is not decided again.
func TestDoDecidesWhatTheChainDidNot(t *testing.T) {
	r := newDoRig(t, stock.Options{}, NewBreakers(3, time.Hour, nil, nil))
	minter, err := ptoken.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sale := func(p string, start, end time.Duration) *catalog.Sale {
		return &catalog.Sale{ProductID: p, Name: p, PriceCents: 100, Stock: 1000, Limit: 2,
			StartMs: now.Add(start).UnixMilli(), EndMs: now.Add(end).UnixMilli()}
	}
	sales := []*catalog.Sale{
		sale("open", -time.Hour, time.Hour), sale("flagged", -time.Hour, time.Hour), sale("busy", -time.Hour, time.Hour),
		sale("soon", time.Hour, 2*time.Hour), sale("past", -2*time.Hour, -time.Hour),
	}
	if err := r.svc.Apply(context.Background(), &Settings{Catalog: sales, Tokens: minter}); err != nil {
		t.Fatal(err)
	}
	r.svc.d.Sales.StateOf("flagged").SetSoldOut(true) // Redis still has stock
	if _, err := r.svc.SetDegraded(context.Background(), "busy", true); err != nil {
		t.Fatal(err)
	}

	tok := func(user, product string, ttl time.Duration) []byte {
		return minter.Mint(nil, []byte(user), []byte(product), now.Add(ttl).UnixMilli())
	}
	for _, tc := range []struct {
		name, user, product string
		token               []byte
		qty                 int
		checked             api.Rules
		status              int
		code                string
	}{
		{"no user", "", "open", tok("", "open", time.Minute), 1, 0, 401, "UNAUTHENTICATED"},
		{"unknown product", "u", "nope", tok("u", "nope", time.Minute), 1, 0, 404, "UNKNOWN_PRODUCT"},
		{"not started", "u", "soon", tok("u", "soon", time.Minute), 1, 0, 403, "NOT_STARTED"},
		{"ended", "u", "past", tok("u", "past", time.Minute), 1, 0, 403, "ENDED"},
		{"sold out", "u", "flagged", tok("u", "flagged", time.Minute), 1, 0, 410, "SOLD_OUT"},
		{"degraded", "u", "busy", tok("u", "busy", time.Minute), 1, 0, 503, "DEGRADED"},
		{"another user's token", "u", "open", tok("v", "open", time.Minute), 1, 0, 403, "BAD_TOKEN"},
		{"expired token", "u", "open", tok("u", "open", 0), 1, 0, 403, "BAD_TOKEN"},
		{"quantity above the limit", "u", "open", tok("u", "open", time.Minute), 3, 0, 409, "LIMIT_REACHED"},
		// The chain's decisions stand: its sold_out filter passed.
		{"in stock as the chain decided", "u", "flagged", tok("u", "flagged", time.Minute), 1, api.InStock, 200, ""},
		{"all decided here", "u", "open", tok("u", "open", time.Minute), 2, 0, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, _ := r.stats()
			req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: now.UnixNano(), Endpoint: api.EndpointDo,
				UserID: []byte(tc.user), ProductID: []byte(tc.product), Token: tc.token, Qty: tc.qty, Checked: tc.checked}
			r.svc.Handle(req)
			res := &req.Ctx.Response
			if res.StatusCode() != tc.status || (tc.code != "" && !bytes.Contains(res.Body(), []byte(`"code":"`+tc.code+`"`))) {
				t.Fatalf("%d %s, want %d %s", res.StatusCode(), res.Body(), tc.status, tc.code)
			}
			if c, _ := r.stats(); tc.status != 200 && c != calls {
				t.Errorf("%d script calls for a refusal the edge can decide", c-calls)
			}
		})
	}
}
