package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The nemesis scenario's shoppers: each sticks to one edge and, until the
// load ends, signs in as one of her few user ids, picks a sale, asks for a
// token (joining and waiting in the line first for the sale behind the
// waiting room, now and then asking early), buys (once more after a 503
// or no answer), follows the order (result polls, for some an event
// stream), then pays it through the admin call or the signed webhook,
// cancels it, or lets it expire and buys again. Every call goes into the
// history with what came back.

// nemesisWebhookSecret is the payments.webhook_secret of the nemesis edges.
const nemesisWebhookSecret = "nemesis-webhook-secret-0123456789abcdef"

type nemLoad struct {
	start    time.Time
	addrs    []string // the edges' listeners
	admins   []string // their admin listeners
	users    *Users
	products []ProductSpec
	client   *http.Client
	stream   *http.Client // event streams: no overall timeout
	nextID   atomic.Int64
	webhooks atomic.Int64

	mu  sync.Mutex
	ops []Op
}

func newNemLoad(start time.Time, addrs, admins []string, users *Users, products []ProductSpec) *nemLoad {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}
	return &nemLoad{start: start, addrs: addrs, admins: admins, users: users, products: products,
		client: &http.Client{Transport: tr, Timeout: 2 * time.Second},
		stream: &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}}}
}

func (l *nemLoad) ms(t time.Time) int64 { return t.Sub(l.start).Milliseconds() }

func (l *nemLoad) record(op Op) Op {
	op.ID = int(l.nextID.Add(1))
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
	return op
}

// History is the ops so far, in the order they ended.
func (l *nemLoad) History() []Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Op(nil), l.ops...)
}

// answer is a JSON answer's fields the shoppers read.
type answer struct {
	Code     string `json:"code"`
	Status   string `json:"status"`
	OrderID  string `json:"orderId"`
	Token    string `json:"token"`
	PaidMs   int64  `json:"paidMs"`
	Position int64  `json:"position"`
	Admitted bool   `json:"admitted"`
	Ticket   string `json:"ticket"`
	SoldOut  bool   `json:"soldOut"`
	PayByMs  int64  `json:"payByMs"`
	Order    *struct {
		OrderID string `json:"orderId"`
	} `json:"order"`
}

// do makes one call and books it as an op of kind; the answer is parsed
// into a.
func (l *nemLoad) do(ctx context.Context, op Op, method, u string, body []byte, hdr map[string]string) (Op, answer) {
	var a answer
	t0 := time.Now()
	op.StartMs = l.ms(t0)
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err == nil {
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		var resp *http.Response
		resp, err = l.client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			op.Status = resp.StatusCode
			_ = json.Unmarshal(b, &a)
		}
	}
	op.EndMs = l.ms(time.Now())
	if err != nil {
		op.Err = shortErr(err)
		op.Refused = errors.Is(err, syscall.ECONNREFUSED)
	}
	op.Code, op.State, op.Position, op.Admitted, op.PaidMs = a.Code, a.Status, a.Position, a.Admitted, a.PaidMs
	if op.OrderID == "" {
		op.OrderID = a.OrderID
		if op.OrderID == "" && a.Order != nil {
			op.OrderID = a.Order.OrderID
		}
	}
	// Every call is booked, also one the end of the load cut short: a
	// purchase in flight may have happened.
	return l.record(op), a
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i < 80 {
		s = s[i+2:]
	}
	return s
}

// shopper is one simulated shopper.
type shopper struct {
	l     *nemLoad
	id    int
	edge  int
	rnd   *rand.Rand
	users []int // indexes into l.users
	// tickets are the room tickets of her user ids, by user index.
	tickets map[int]roomPass
}

type roomPass struct {
	ticket   string
	admitted bool
}

func (s *shopper) base() string  { return "http://" + s.l.addrs[s.edge] }
func (s *shopper) admin() string { return "http://" + s.l.admins[s.edge] }

func (s *shopper) auth(u int) map[string]string {
	return map[string]string{"Authorization": "Bearer " + s.l.users.Session(u)}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// pause waits d or until ctx ends (false).
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// run loops until ctx ends.
func (s *shopper) run(ctx context.Context) {
	for ctx.Err() == nil {
		u := s.users[s.rnd.IntN(len(s.users))]
		p := s.l.products[s.pickProduct()]
		s.journey(ctx, u, p)
		if !pause(ctx, time.Duration(100+s.rnd.IntN(300))*time.Millisecond) {
			return
		}
	}
}

// pickProduct: the room's sale and the 3 s sale a little more often than
// their share, so that both see enough traffic in a short schedule.
func (s *shopper) pickProduct() int {
	w := []int{20, 20, 15, 20, 25}
	n := s.rnd.IntN(100)
	for i, x := range w {
		if i >= len(s.l.products) {
			break
		}
		if n < x {
			return i
		}
		n -= x
	}
	return 0
}

// journey is one purchase and what follows it.
func (s *shopper) journey(ctx context.Context, u int, p ProductSpec) {
	user := s.l.users.ID(u)
	op := Op{Shopper: s.id, User: user, Edge: s.edge + 1, Product: p.ID}
	var ticket string
	if p.Room {
		var ok bool
		if ticket, ok = s.queue(ctx, u, p, op); !ok {
			return
		}
	}
	var orderID string
	for try := 0; try < 2 && orderID == ""; try++ {
		hdr := s.auth(u)
		if ticket != "" {
			hdr["X-Queue-Ticket"] = ticket
		}
		top := op
		top.Kind = opToken
		_, ta := s.l.do(ctx, top, "POST", s.base()+"/api/seckill/token", mustJSON(map[string]string{"productId": p.ID}), hdr)
		if ta.Token == "" {
			return
		}
		dop := op
		dop.Kind = opDo
		d, _ := s.l.do(ctx, dop, "POST", s.base()+"/api/seckill/do", mustJSON(map[string]any{"productId": p.ID, "token": ta.Token, "quantity": 1}), s.auth(u))
		switch {
		case d.Status == 200:
			orderID = d.OrderID
		case d.OrderID != "":
			orderID = d.OrderID // pending or unknown: follow it
		case d.Outcome() == outFail && d.Status != 0 && d.Status != 503:
			return // a verdict: sold out, at the limit, …
		default:
			if !pause(ctx, 300*time.Millisecond) {
				return
			}
		}
	}
	if orderID == "" {
		return
	}
	op.OrderID = orderID
	if s.rnd.IntN(5) == 0 {
		go s.listen(ctx, u, op)
	}
	state := s.follow(ctx, u, op, 8*time.Second)
	if state != "success" {
		return
	}
	switch n := s.rnd.IntN(100); {
	case n < 35:
		s.pay(ctx, u, op, opPay)
	case n < 60:
		s.pay(ctx, u, op, opWebhook)
	case n < 75:
		cop := op
		cop.Kind = opCancel
		s.l.do(ctx, cop, "POST", s.admin()+"/admin/orders/cancel", mustJSON(map[string]string{"productId": p.ID, "orderId": orderID}), nil)
	default:
		// Let it expire (the 3 s sale: wait past the deadline, look,
		// maybe pay too late, and buy again).
		if p.PayTimeoutMs == 0 || p.PayTimeoutMs > 5000 {
			return
		}
		if !pause(ctx, time.Duration(p.PayTimeoutMs+300+int64(s.rnd.IntN(400)))*time.Millisecond) {
			return
		}
		if s.follow(ctx, u, op, 2*time.Second) == "success" && s.rnd.IntN(2) == 0 {
			s.pay(ctx, u, op, opPay) // late: must be refused
		}
		s.journey(ctx, u, p)
		return
	}
	s.follow(ctx, u, op, time.Second)
}

// queue joins the room's line for user u (once per user id) and polls
// her place until she is admitted (at most 15 s); now and then she asks
// for a token before her turn, which must be refused.
func (s *shopper) queue(ctx context.Context, u int, p ProductSpec, op Op) (string, bool) {
	pass := s.tickets[u]
	if pass.admitted {
		return pass.ticket, true
	}
	hdr := s.auth(u)
	if pass.ticket == "" {
		jop := op
		jop.Kind = opJoin
		_, a := s.l.do(ctx, jop, "POST", s.base()+"/api/seckill/queue", mustJSON(map[string]string{"productId": p.ID}), hdr)
		if a.Ticket == "" {
			return "", false
		}
		pass = roomPass{ticket: a.Ticket, admitted: a.Admitted}
		s.tickets[u] = pass
	}
	until := time.Now().Add(15 * time.Second)
	for !pass.admitted && time.Now().Before(until) {
		hdr["X-Queue-Ticket"] = pass.ticket
		if s.rnd.IntN(10) == 0 {
			eop := op
			eop.Kind, eop.Early = opToken, true
			s.l.do(ctx, eop, "POST", s.base()+"/api/seckill/token", mustJSON(map[string]string{"productId": p.ID}), hdr)
		}
		if !pause(ctx, time.Duration(300+s.rnd.IntN(300))*time.Millisecond) {
			return "", false
		}
		qop := op
		qop.Kind = opQueue
		_, a := s.l.do(ctx, qop, "GET", s.base()+"/api/seckill/queue?productId="+p.ID, nil, hdr)
		if a.Ticket != "" {
			pass.ticket = a.Ticket
		}
		if a.SoldOut || a.Status == "closed" {
			return "", false
		}
		pass.admitted = a.Admitted
		s.tickets[u] = pass
	}
	return pass.ticket, pass.admitted
}

// follow polls the order's result until it is no longer pending (or
// within passes) and returns the last state seen.
func (s *shopper) follow(ctx context.Context, u int, op Op, within time.Duration) string {
	until := time.Now().Add(within)
	state := ""
	for {
		rop := op
		rop.Kind = opResult
		r, _ := s.l.do(ctx, rop, "GET", s.base()+"/api/seckill/result?orderId="+op.OrderID+"&productId="+op.Product, nil, s.auth(u))
		if r.Status == 200 {
			state = r.State
		}
		if (state != "" && state != "pending") || time.Now().After(until) {
			return state
		}
		if !pause(ctx, 250*time.Millisecond) {
			return state
		}
	}
}

// pay pays the order through the admin call or the signed webhook.
func (s *shopper) pay(ctx context.Context, u int, op Op, kind string) {
	op.Kind = kind
	body := map[string]string{"productId": op.Product, "orderId": op.OrderID}
	if kind == opPay {
		s.l.do(ctx, op, "POST", s.admin()+"/admin/orders/paid", mustJSON(body), nil)
		return
	}
	body["id"] = fmt.Sprintf("evt_%d_%d", s.l.start.UnixNano()%1e9, s.l.webhooks.Add(1))
	body["type"] = "payment.succeeded"
	raw := mustJSON(body)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte(nemesisWebhookSecret))
	m.Write([]byte(ts + "." + string(raw)))
	s.l.do(ctx, op, "POST", s.base()+"/api/payments/webhook", raw, map[string]string{
		"Flashgate-Timestamp": ts, "Flashgate-Signature": "v1=" + hex.EncodeToString(m.Sum(nil))})
}

// listen follows the order's event stream (at most 15 s), booking each
// event as an op.
func (s *shopper) listen(ctx context.Context, u int, op Op) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	op.Kind = opEvent
	u0 := s.base() + "/api/seckill/events?orderId=" + url.QueryEscape(op.OrderID) + "&productId=" + op.Product
	req, err := http.NewRequestWithContext(cctx, "GET", u0, nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+s.l.users.Session(u))
	t0 := time.Now()
	resp, err := s.l.stream.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return
	}
	br := bufio.NewReader(resp.Body)
	var data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		case line == "" && data != "":
			var a answer
			_ = json.Unmarshal([]byte(data), &a)
			data = ""
			e := op
			e.StartMs, e.EndMs, e.Status, e.State = s.l.ms(t0), s.l.ms(time.Now()), 200, a.Status
			s.l.record(e)
		}
	}
}

// resolve asks, after the run drained, for the result of every purchase
// answered 503 with an order of unknown outcome: it must say how it ended.
func (l *nemLoad) resolve(ctx context.Context, alive func(edge int) bool) {
	for _, op := range l.History() {
		if op.Kind != opDo || op.State != "unknown" || op.OrderID == "" {
			continue
		}
		u := userIndex(op.User)
		edge := op.Edge - 1
		if !alive(edge) {
			for e := range l.addrs {
				if alive(e) {
					edge = e
					break
				}
			}
		}
		r := Op{Shopper: op.Shopper, User: op.User, Edge: edge + 1, Product: op.Product, OrderID: op.OrderID, Kind: opResolve}
		hdr := map[string]string{"Authorization": "Bearer " + l.users.Session(u)}
		l.do(ctx, r, "GET", "http://"+l.addrs[edge]+"/api/seckill/result?orderId="+op.OrderID+"&productId="+op.Product, nil, hdr)
	}
}

// userIndex is the index of user id u0000001… (Users.ID's inverse).
func userIndex(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "u"))
	return n - 1
}
