package sale

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/orderid"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
	saleroom "flashgate/sale/room"
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

// kindsOfSales applies on r's service the sales every kind of refusal
// needs, limit 2 each: open, flagged (sold out on the edge, Redis still has
// stock), busy (degraded), soon (not started), past (ended), and more, and
// returns the purchase token minter and the sales' clock.
func (r *doRig) kindsOfSales(t *testing.T, more ...func(now time.Time) *catalog.Sale) (*ptoken.Minter, time.Time) {
	t.Helper()
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
	for _, m := range more {
		sales = append(sales, m(now))
	}
	if err := r.svc.Apply(context.Background(), &Settings{Catalog: sales, Tokens: minter, TokenTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r.svc.d.Sales.StateOf("flagged").SetSoldOut(true)
	if _, err := r.svc.SetDegraded(context.Background(), "busy", true); err != nil {
		t.Fatal(err)
	}
	return minter, now
}

// TestDoDecidesWhatTheChainDidNot: an edge whose config has no sale filter
// gives every refusal the chain would, from the handler, without a script
// call; and a rule the chain decided is not decided again.
func TestDoDecidesWhatTheChainDidNot(t *testing.T) {
	r := newDoRig(t, stock.Options{}, NewBreakers(3, time.Hour, nil, nil))
	minter, now := r.kindsOfSales(t)

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
		// want is the catalogue's answer a refusal must be, body and all
		// (nil for a purchase: its body names the order).
		want *api.Rejection
	}{
		{"no user", "", "open", tok("", "open", time.Minute), 1, 0, 401, "UNAUTHENTICATED", api.Unauthenticated},
		{"unknown product", "u", "nope", tok("u", "nope", time.Minute), 1, 0, 404, "UNKNOWN_PRODUCT", api.UnknownProduct},
		{"not started", "u", "soon", tok("u", "soon", time.Minute), 1, 0, 403, "NOT_STARTED", api.NotStarted},
		{"ended", "u", "past", tok("u", "past", time.Minute), 1, 0, 403, "ENDED", api.Ended},
		{"sold out", "u", "flagged", tok("u", "flagged", time.Minute), 1, 0, 410, "SOLD_OUT", api.SoldOut},
		{"degraded", "u", "busy", tok("u", "busy", time.Minute), 1, 0, 503, "DEGRADED", api.Busy},
		{"another user's token", "u", "open", tok("v", "open", time.Minute), 1, 0, 403, "BAD_TOKEN", api.BadToken},
		{"expired token", "u", "open", tok("u", "open", 0), 1, 0, 403, "BAD_TOKEN", api.BadToken},
		{"quantity above the limit", "u", "open", tok("u", "open", time.Minute), 3, 0, 409, "LIMIT_REACHED", api.LimitReached},
		// The chain's decisions stand: its sold_out filter passed.
		{"in stock as the chain decided", "u", "flagged", tok("u", "flagged", time.Minute), 1, api.InStock, 200, "", nil},
		{"all decided here", "u", "open", tok("u", "open", time.Minute), 2, 0, 200, "", nil},
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
			if tc.want != nil {
				if tc.want.Code != tc.code || !bytes.Equal(res.Body(), tc.want.Body) {
					t.Errorf("body %s, want the catalogue's %s", res.Body(), tc.want.Body)
				}
				return
			}
			// A purchase: the order to follow, of this product, pending.
			var got struct{ OrderID, ProductID, Status string }
			if err := json.Unmarshal(res.Body(), &got); err != nil {
				t.Fatalf("body %s: %v", res.Body(), err)
			}
			if id, err := strconv.ParseInt(got.OrderID, 10, 64); err != nil || id <= 0 || got.ProductID != tc.product || got.Status != statusPending {
				t.Errorf("body %s, want a positive orderId, productId %q and status %q", res.Body(), tc.product, statusPending)
			}
		})
	}
}

// TestStatusCarriesAToken (issue 26, one request per purchase): a signed-in
// shopper's status answer, once the sale is open, carries the purchase
// token the token call would mint — bound to her and the product, one use —
// so that a purchase is a status and a do. An anonymous status, a sale not
// open, sold out or degraded, and a sale with a waiting room carry none.
func TestStatusCarriesAToken(t *testing.T) {
	r := newDoRig(t, stock.Options{}, NewBreakers(3, time.Hour, nil, nil))
	_, now := r.kindsOfSales(t, func(now time.Time) *catalog.Sale {
		return &catalog.Sale{ProductID: "queued", Name: "queued", PriceCents: 100, Stock: 1000, Limit: 2,
			StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli(),
			Room: &saleroom.Room{OpensMs: now.Add(-2 * time.Hour).UnixMilli(), StartMs: now.Add(-time.Hour).UnixMilli(),
				AdmitPerMinute: 60, MaxActive: 10, SessionMs: 60_000}}
	})
	status := func(user, product string) (token string, expMs int64) {
		t.Helper()
		req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: time.Now().UnixNano(), Endpoint: api.EndpointStatus,
			UserID: []byte(user), ProductID: []byte(product)}
		r.svc.Handle(req)
		var got struct {
			Status         string
			Token          string
			TokenExpiresMs int64
		}
		if err := json.Unmarshal(req.Ctx.Response.Body(), &got); req.Ctx.Response.StatusCode() != 200 || err != nil || got.Status == "" {
			t.Fatalf("status %s for %q: %d %s (%v)", product, user, req.Ctx.Response.StatusCode(), req.Ctx.Response.Body(), err)
		}
		return got.Token, got.TokenExpiresMs
	}
	do := func(user, product, token string) (int, string) {
		req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: time.Now().UnixNano(), Endpoint: api.EndpointDo,
			UserID: []byte(user), ProductID: []byte(product), Token: []byte(token), Qty: 1}
		r.svc.Handle(req)
		return req.Ctx.Response.StatusCode(), string(req.Ctx.Response.Body())
	}
	tok, exp := status("alice", "open")
	if tok == "" || exp < now.Add(50*time.Second).UnixMilli() || exp > time.Now().Add(time.Minute).UnixMilli() {
		t.Fatalf("alice's status on an open sale: token %q expiring %d, want one for the token TTL", tok, exp)
	}
	if code, body := do("bob", "open", tok); code != 403 || !bytes.Contains([]byte(body), []byte("BAD_TOKEN")) {
		t.Errorf("alice's token for bob: %d %s", code, body)
	}
	if code, body := do("alice", "open", tok); code != 200 {
		t.Fatalf("alice's do with her status token: %d %s", code, body)
	}
	if code, body := do("alice", "open", tok); code != 403 || !bytes.Contains([]byte(body), []byte("BAD_TOKEN")) {
		t.Errorf("the token used twice: %d %s", code, body)
	}
	for _, c := range []struct{ user, product string }{
		{"", "open"}, {"alice", "soon"}, {"alice", "past"}, {"alice", "flagged"}, {"alice", "busy"}, {"alice", "queued"},
	} {
		if tok, _ := status(c.user, c.product); tok != "" {
			t.Errorf("status of %s for %q carries a token", c.product, c.user)
		}
	}
}

// TestStatusWithTokenAllocs: the status answer with its token allocates
// nothing once its buffers have grown (the hot path: every signed-in
// shopper polls it).
func TestStatusWithTokenAllocs(t *testing.T) {
	r := newDoRig(t, stock.Options{}, NewBreakers(3, time.Hour, nil, nil), "open")
	minter, err := ptoken.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	st := *r.svc.settings.Load()
	st.Tokens, st.TokenTTL = minter, time.Minute
	r.svc.settings.Store(&st)
	req := &api.Call{Ctx: new(fasthttp.RequestCtx), Endpoint: api.EndpointStatus, UserID: []byte("alice"), ProductID: []byte("open")}
	run := func() {
		req.NowNano = time.Now().UnixNano()
		req.Sale = catalog.Entry{}
		req.Checked = 0
		r.svc.Handle(req)
	}
	run()
	if !bytes.Contains(req.Ctx.Response.Body(), []byte(`"token":"`)) {
		t.Fatalf("no token in %s", req.Ctx.Response.Body())
	}
	if n := testing.AllocsPerRun(200, run); n != 0 {
		t.Errorf("%.1f allocations per status answer with a token", n)
	}
}
