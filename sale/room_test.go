package sale

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
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
	"flashgate/sale/room"
)

// roomRig is one or more edges' sale Services over one real Redis, with a
// clock the test moves, driven through Handle as the chain leaves calls
// (the user signed in).
type roomRig struct {
	t     testing.TB
	st    *stock.Store
	edges []*Service
	nowMs atomic.Int64
	set   *Settings
	start int64 // the sale's start (the opening)
}

const roomProduct = "wr1"

func newRoomRig(t testing.TB, addr string, edges int, wr conf.RoomConfig) *roomRig {
	t.Helper()
	r := &roomRig{t: t}
	base := time.Now().Truncate(time.Second)
	r.start = base.Add(time.Minute).UnixMilli()
	r.nowMs.Store(r.start - 30_000) // the pre-queue is open
	secret := []byte(strings.Repeat("s", 32))
	tok, _ := ptoken.New(secret)
	tickets, err := room.NewTickets(room.DeriveSecret(secret, "ticket"))
	if err != nil {
		t.Fatal(err)
	}
	wr.Enabled = true
	ac := conf.ActivityConfig{ProductID: roomProduct, Name: "room", Price: "1.00", Stock: 100, Limit: 1,
		Start: time.UnixMilli(r.start).UTC().Format(time.RFC3339), End: time.UnixMilli(r.start + 3600_000).UTC().Format(time.RFC3339),
		Room: wr}
	a, errs := catalog.Build(ac, base)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	ac.ProductID = "wr2"
	other, _ := catalog.Build(ac, base)
	r.set = &Settings{Tokens: tok, Tickets: tickets, Challenges: room.NewChallenger(secret), TokenTTL: time.Minute,
		Catalog: []*catalog.Sale{a, other}}
	// Not the default call budget: these tests are about the room's
	// decisions, and on a loaded 2-core machine a script call to the
	// embedded server can exceed it (the answer is then DEGRADED).
	callBudget := 5 * time.Second
	st := stocktest.Open(t, addr, stocktest.Timeout(callBudget))
	r.st = st
	for i := 0; i < edges; i++ {
		ids, _ := orderid.NewGenerator(i+1, func() int64 { return time.Now().UnixMilli() })
		svc := New(Deps{Store: st, Sales: catalog.NewRegistry(), IDs: ids, Node: i + 1, Breakers: NewBreakers(5, time.Second, nil, nil),
			Log: slog.New(slog.DiscardHandler), Now: func() int64 { return r.nowMs.Load() * 1e6 }})
		if err := svc.Apply(context.Background(), r.set); err != nil {
			t.Fatal(err)
		}
		r.edges = append(r.edges, svc)
	}
	return r
}

// answer is one call's outcome.
type answer struct {
	code   int
	body   map[string]any
	raw    string
	cookie string
}

func (a answer) num(k string) int64 {
	f, _ := a.body[k].(float64)
	return int64(f)
}

func (a answer) str(k string) string { s, _ := a.body[k].(string); return s }

// call sends one call to edge e; ticket, if not "", rides in the cookie.
func (r *roomRig) call(e int, ep api.Endpoint, user, product, ticket string, body map[string]string) answer {
	r.t.Helper()
	ctx := new(fasthttp.RequestCtx)
	if ticket != "" {
		ctx.Request.Header.SetCookie(room.CookiePref+product, ticket)
	}
	c := &api.Call{Ctx: ctx, NowNano: r.nowMs.Load() * 1e6, Endpoint: ep, ProductID: []byte(product)}
	if user != "" {
		c.UserID = []byte(user)
	}
	if body != nil {
		c.Challenge, c.Nonce = []byte(body["challenge"]), []byte(body["nonce"])
	}
	r.edges[e].Handle(c)
	a := answer{code: ctx.Response.StatusCode(), raw: string(ctx.Response.Body())}
	if err := json.Unmarshal(ctx.Response.Body(), &a.body); err != nil {
		r.t.Fatalf("answer %q: %v", a.raw, err)
	}
	ck := fasthttp.AcquireCookie()
	ck.SetKey(room.CookiePref + product)
	if ctx.Response.Header.Cookie(ck) {
		a.cookie = string(ck.Value())
	}
	fasthttp.ReleaseCookie(ck)
	return a
}

func (r *roomRig) join(e int, user string) answer {
	r.t.Helper()
	a := r.call(e, api.EndpointJoin, user, roomProduct, "", nil)
	if a.code != 200 {
		r.t.Fatalf("join %s: %d %s", user, a.code, a.raw)
	}
	if a.cookie == "" || a.cookie != a.str("ticket") {
		r.t.Fatalf("join %s: cookie %q, ticket %q", user, a.cookie, a.str("ticket"))
	}
	return a
}

func (r *roomRig) tend() {
	for _, e := range r.edges {
		e.TendRooms(context.Background())
	}
}

// snapshot is every room key's content, to prove a refused call changed
// nothing.
func (r *roomRig) snapshot(addr string) string {
	if addr == "embedded" {
		return "" // no client reaches the in-process server
	}
	c := r.client(addr)
	var b strings.Builder
	for _, k := range []string{"wr", "wr:pre", "wr:rank", "wr:active"} {
		key := "sk:{" + roomProduct + "}:" + k
		typ, _ := c.Do(context.Background(), c.B().Type().Key(key).Build()).ToString()
		var v any
		switch typ {
		case "hash":
			v, _ = c.Do(context.Background(), c.B().Hgetall().Key(key).Build()).AsStrMap()
		case "set":
			m, _ := c.Do(context.Background(), c.B().Smembers().Key(key).Build()).AsStrSlice()
			slices.Sort(m)
			v = m
		case "zset":
			v, _ = c.Do(context.Background(), c.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).ToAny()
		}
		fmt.Fprintf(&b, "%s %s %v\n", key, typ, v)
	}
	return b.String()
}

func (r *roomRig) client(addr string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(addr, ","), DisableCache: true})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(c.Close)
	return c
}

// servers runs f on a standalone Redis and on a Cluster.
func servers(t *testing.T, f func(t *testing.T, addr string)) {
	t.Run("embedded", func(t *testing.T) { f(t, "embedded") })
	t.Run("standalone", func(t *testing.T) { f(t, redistest.Start(t)) })
	t.Run("cluster", func(t *testing.T) {
		c := redistest.NewCluster(t)
		f(t, strings.Join(c.Addrs(), ","))
	})
}

// TestRoomLotteryAndFIFO: pre-queue joins hold place 0 until the opening;
// joining again gives the same ticket and changes nothing; the lottery's
// commit is public from the pre-queue on and its key from the opening, and
// the published key reproduces every place (recomputed here with HMAC);
// later arrivals come after the pre-queue in arrival order. Two edges: the
// places and the lottery are the same whichever edge answers, and both
// edges drawing at once draw the same.
func TestRoomLotteryAndFIFO(t *testing.T) {
	servers(t, func(t *testing.T, addr string) {
		r := newRoomRig(t, addr, 2, conf.RoomConfig{AdmitPerMinute: 60})
		r.tend()
		lot := r.call(0, api.EndpointLottery, "", roomProduct, "", nil)
		commit := lot.str("commit")
		if lot.code != 200 || len(commit) != 64 || lot.body["key"] != nil {
			t.Fatalf("lottery before the opening: %s", lot.raw)
		}
		const pre = 40
		tickets := map[string]string{}
		for i := 0; i < pre; i++ {
			u := "u" + strconv.Itoa(i)
			a := r.join(i%2, u)
			if a.str("status") != "prequeue" || a.num("position") != 0 || a.num("etaMs") != 30_000 {
				t.Fatalf("pre-queue join: %s", a.raw)
			}
			tickets[u] = a.cookie
		}
		before := r.snapshot(addr)
		again := r.join(1, "u3")
		id1, _, _ := r.set.Tickets.Check([]byte(again.cookie), []byte("u3"), []byte(roomProduct), r.nowMs.Load())
		id0, _, _ := r.set.Tickets.Check([]byte(tickets["u3"]), []byte("u3"), []byte(roomProduct), r.nowMs.Load())
		if id0 != id1 || again.str("status") != "prequeue" {
			t.Fatalf("joining again gave another ticket: %s", again.raw)
		}
		if after := r.snapshot(addr); after != before {
			t.Fatalf("joining again changed the room:\n%s\n%s", before, after)
		}

		r.nowMs.Store(r.start + 1)
		// Both edges draw; one holds the lock, the other sees its result.
		done := make(chan struct{})
		go func() { r.edges[0].TendRooms(context.Background()); close(done) }()
		r.edges[1].TendRooms(context.Background())
		<-done
		r.tend()
		lot = r.call(1, api.EndpointLottery, "", roomProduct, "", nil)
		key := lot.str("key")
		if lot.str("commit") != commit || lot.num("members") != pre || lot.body["ranked"] != true {
			t.Fatalf("lottery after the opening: %s", lot.raw)
		}
		kb, _ := hex.DecodeString(key)
		if sum := sha256.Sum256(kb); hex.EncodeToString(sum[:]) != commit {
			t.Fatalf("the revealed key %s does not match the commit %s", key, commit)
		}
		full, err := r.edges[0].RoomLottery(context.Background(), roomProduct)
		if err != nil || len(full.Ranking) != pre {
			t.Fatalf("ranking: %v %+v", err, full)
		}
		var ids []string
		byID := map[string]string{}
		for u, tk := range tickets {
			id, _, err := r.set.Tickets.Check([]byte(tk), []byte(u), []byte(roomProduct), r.nowMs.Load())
			if err != nil {
				t.Fatal(err)
			}
			h := string(id.AppendHex(nil))
			ids = append(ids, h)
			byID[h] = u
		}
		want, _ := room.Rank(key, ids)
		if !slices.Equal(want, full.Ranking) {
			t.Fatalf("the published key does not reproduce the ranking")
		}
		seen := map[int64]bool{}
		for place, id := range want {
			u := byID[id]
			for e := range r.edges {
				a := r.call(e, api.EndpointQueue, u, roomProduct, tickets[u], nil)
				if a.code != 200 || a.num("position") != int64(place+1) || a.str("status") != "waiting" {
					t.Fatalf("edge %d, %s at place %d: %s", e, u, place+1, a.raw)
				}
				if a.cookie == "" && e == 0 {
					t.Fatalf("the ticket is not reissued with its place: %s", a.raw)
				}
			}
			seen[int64(place+1)] = true
		}
		// Rank correlation of the join order and the place is not a
		// test for 40 shoppers; what must hold is that the places are a
		// permutation, which they are by construction of want.
		for i := 0; i < 3; i++ {
			u := "late" + strconv.Itoa(i)
			a := r.join(i%2, u)
			if a.num("position") != int64(pre+i+1) || a.str("status") != "waiting" {
				t.Fatalf("FIFO join %d: %s", i, a.raw)
			}
		}
	})
}

// TestRoomAdmission: the line advances at the rate from the opening, the
// token call refuses 403 NOT_ADMITTED with the place and the estimate until
// then and answers the token with the admission at the first call that sees
// it; the session ends; max_active holds the next shopper back until a
// session ends; the operator's pause, rate and close act on every edge.
func TestRoomAdmission(t *testing.T) {
	servers(t, func(t *testing.T, addr string) {
		r := newRoomRig(t, addr, 2, conf.RoomConfig{AdmitPerMinute: 60, Order: "fifo", MaxActive: 2, Session: 10 * time.Second})
		r.nowMs.Store(r.start + 1)
		r.tend()
		var tickets []string
		for i := 1; i <= 4; i++ {
			a := r.join(0, "a"+strconv.Itoa(i))
			if a.num("position") != int64(i) {
				t.Fatalf("join %d: %s", i, a.raw)
			}
			tickets = append(tickets, a.cookie)
		}
		tok := r.call(1, api.EndpointToken, "a1", roomProduct, tickets[0], nil)
		if tok.code != 403 || tok.str("code") != "NOT_ADMITTED" || tok.num("position") != 1 || tok.num("etaMs") != 999 {
			t.Fatalf("token before the turn: %d %s", tok.code, tok.raw)
		}
		r.nowMs.Store(r.start + 2000) // N = 2
		tok = r.call(1, api.EndpointToken, "a1", roomProduct, tickets[0], nil)
		until := r.nowMs.Load() + 10_000
		if tok.code != 200 || tok.str("token") == "" || tok.num("admittedUntilMs") != until || tok.num("expiresMs") > until {
			t.Fatalf("token at the turn: %d %s", tok.code, tok.raw)
		}
		if a := r.call(0, api.EndpointQueue, "a1", roomProduct, tickets[0], nil); a.str("status") != "admitted" || a.body["admitted"] != true {
			t.Fatalf("status after admission: %s", a.raw)
		}
		if a := r.call(0, api.EndpointQueue, "a2", roomProduct, tickets[1], nil); a.str("status") != "admitted" {
			t.Fatalf("a2: %s", a.raw)
		}
		r.nowMs.Store(r.start + 3500) // N = 3, but two are active (max_active 2)
		if a := r.call(1, api.EndpointToken, "a3", roomProduct, tickets[2], nil); a.code != 403 || a.num("position") != 3 {
			t.Fatalf("a3 past the cap: %s", a.raw)
		}
		// a1's session is over: a3 goes in.
		r.nowMs.Store(r.start + 12_500)
		if a := r.call(0, api.EndpointToken, "a1", roomProduct, tickets[0], nil); a.code != 403 || a.str("message") != api.TurnOver.Message {
			t.Fatalf("a1 after its session: %s", a.raw)
		}
		if a := r.call(0, api.EndpointQueue, "a1", roomProduct, tickets[0], nil); a.str("status") != "expired" {
			t.Fatalf("a1 status after its session: %s", a.raw)
		}
		if a := r.call(1, api.EndpointToken, "a3", roomProduct, tickets[2], nil); a.code != 200 {
			t.Fatalf("a3 once a session ended: %s", a.raw)
		}
		// Places 5..14 (a5 goes in at its join: the line is past it and a3
		// leaves room under the cap); the line is at 12 when the operator pauses it on
		// edge 0, and edge 1 follows from Redis.
		for i := 5; i <= 14; i++ {
			tickets = append(tickets, r.join(1, "a"+strconv.Itoa(i)).cookie)
		}
		if _, err := r.edges[0].RoomAction(context.Background(), roomProduct, "pause", 0); err != nil {
			t.Fatal(err)
		}
		r.nowMs.Add(600_000)
		r.tend()
		if a := r.call(1, api.EndpointToken, "a13", roomProduct, tickets[12], nil); a.code != 403 || a.num("etaMs") != -1 || a.num("position") != 13 {
			t.Fatalf("a13 while paused: %s", a.raw)
		}
		row, err := r.edges[1].RoomAction(context.Background(), roomProduct, "rate", 6000)
		if err != nil || !row.Paused || row.AdmitPerMinute != 6000 {
			t.Fatalf("rate: %v %+v", err, row)
		}
		if row, err = r.edges[1].RoomAction(context.Background(), roomProduct, "resume", 0); err != nil || row.Paused || row.Frontier != 12 {
			t.Fatalf("resume: %v %+v", err, row)
		}
		r.tend() // edge 0 reads the resumed line at its next tick
		if a := r.call(0, api.EndpointToken, "a13", roomProduct, tickets[12], nil); a.code != 403 || a.num("etaMs") != 10 {
			t.Fatalf("a13 right after resume: %s", a.raw)
		}
		r.nowMs.Add(100) // 6000/min: 10 places per 100 ms
		if a := r.call(0, api.EndpointToken, "a13", roomProduct, tickets[12], nil); a.code != 200 {
			t.Fatalf("a13 after resume: %s", a.raw)
		}
		if _, err := r.edges[0].RoomAction(context.Background(), roomProduct, "close", 0); err != nil {
			t.Fatal(err)
		}
		if a := r.call(1, api.EndpointJoin, "late", roomProduct, "", nil); a.code != 200 || a.str("status") != "closed" || a.cookie != "" {
			t.Fatalf("join a closed queue: %s", a.raw)
		}
		rows, err := r.edges[1].Rooms(context.Background())
		if err != nil || len(rows) != 2 || rows[0].Admitted != 5 || rows[0].Joined+rows[1].Joined != 14 {
			t.Fatalf("rooms: %v %+v", err, rows)
		}
	})
}

// TestRoomRefusals: forged, another shopper's and another sale's tickets,
// no ticket, a wrong proof of work, buying without admission: each refused
// with its code, and the room's keys are exactly as before.
func TestRoomRefusals(t *testing.T) {
	addr := redistest.Start(t)
	r := newRoomRig(t, addr, 1, conf.RoomConfig{AdmitPerMinute: 60, Challenge: conf.RoomChallenge{Difficulty: 8}})
	ch := r.call(0, api.EndpointChallenge, "b1", roomProduct, "", nil)
	if ch.code != 200 || ch.num("difficulty") != 8 {
		t.Fatalf("challenge: %s", ch.raw)
	}
	nonce := solve(t, ch.str("challenge"), 8)
	j := r.call(0, api.EndpointJoin, "b1", roomProduct, "", map[string]string{"challenge": ch.str("challenge"), "nonce": nonce})
	if j.code != 200 || j.cookie == "" {
		t.Fatalf("join with the proof: %s", j.raw)
	}
	ch2 := r.call(0, api.EndpointChallenge, "b2", roomProduct, "", nil)
	n2 := solve(t, ch2.str("challenge"), 8)
	j2 := r.call(0, api.EndpointJoin, "b2", roomProduct, "", map[string]string{"challenge": ch2.str("challenge"), "nonce": n2})
	r.nowMs.Store(r.start + 1)
	r.tend()
	before := r.snapshot(addr)
	forged := []byte(j.cookie)
	forged[5] ^= 1
	for _, c := range []struct {
		name          string
		ep            api.Endpoint
		user, product string
		ticket, code  string
		body          map[string]string
	}{
		{"forged ticket", api.EndpointQueue, "b1", roomProduct, string(forged), "BAD_TICKET", nil},
		{"another shopper's ticket", api.EndpointQueue, "b2", roomProduct, j.cookie, "BAD_TICKET", nil},
		{"another sale's ticket", api.EndpointQueue, "b1", "wr2", j.cookie, "BAD_TICKET", nil},
		{"forged ticket, token", api.EndpointToken, "b1", roomProduct, string(forged), "BAD_TICKET", nil},
		{"another shopper's ticket, token", api.EndpointToken, "b2", roomProduct, j.cookie, "BAD_TICKET", nil},
		{"no ticket, token", api.EndpointToken, "b1", roomProduct, "", "NOT_ADMITTED", nil},
		{"not admitted yet", api.EndpointToken, "b1", roomProduct, j.cookie, "NOT_ADMITTED", nil},
		{"not joined", api.EndpointQueue, "b3", roomProduct, "", "NOT_JOINED", nil},
		{"no proof", api.EndpointJoin, "b3", roomProduct, "", "BAD_CHALLENGE", nil},
		{"wrong nonce", api.EndpointJoin, "b3", roomProduct, "", "BAD_CHALLENGE", map[string]string{"challenge": ch.str("challenge"), "nonce": "x"}},
		{"another shopper's proof", api.EndpointJoin, "b3", roomProduct, "", "BAD_CHALLENGE", map[string]string{"challenge": ch.str("challenge"), "nonce": nonce}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := r.call(0, c.ep, c.user, c.product, c.ticket, c.body)
			if a.str("code") != c.code || a.code < 400 {
				t.Fatalf("%d %s, want %s", a.code, a.raw, c.code)
			}
			if after := r.snapshot(addr); after != before {
				t.Fatalf("the refusal changed the room:\n%s\n%s", before, after)
			}
		})
	}
	// A second join of b2 with its spent proof: the same place, nothing changed.
	again := r.call(0, api.EndpointJoin, "b2", roomProduct, "", map[string]string{"challenge": ch2.str("challenge"), "nonce": n2})
	if again.code != 200 || again.num("position") != j2.num("position") && again.num("position") == 0 {
		t.Fatalf("joining again with the spent proof: %s", again.raw)
	}
	if after := r.snapshot(addr); after != before {
		t.Fatalf("joining again changed the room:\n%s\n%s", before, after)
	}
}

func solve(t *testing.T, challenge string, bits int) string {
	for n := 0; n < 1<<24; n++ {
		s := strconv.Itoa(n)
		sum := sha256.Sum256([]byte(challenge + ":" + s))
		z := 0
		for _, b := range sum {
			if b == 0 {
				z += 8
				continue
			}
			for b&0x80 == 0 {
				z++
				b <<= 1
			}
			break
		}
		if z >= bits {
			return s
		}
	}
	t.Fatal("no nonce")
	return ""
}

// TestRoomRefusalFromMemoryAllocs: a shopper whose ticket carries a place the
// line has not reached is refused by the token call from the edge's memory:
// no Redis command, no allocation.
func TestRoomRefusalFromMemoryAllocs(t *testing.T) {
	addr := redistest.Start(t)
	r := newRoomRig(t, addr, 1, conf.RoomConfig{AdmitPerMinute: 1, Order: "fifo"})
	r.nowMs.Store(r.start + 1)
	r.tend()
	for i := 0; i < 5; i++ {
		r.join(0, "c"+strconv.Itoa(i))
	}
	last := r.join(0, "c9")
	if last.num("position") != 6 {
		t.Fatalf("join: %s", last.raw)
	}
	c := redistest.Client(t, addr)
	processed := func() int64 {
		info, _ := c.Do(context.Background(), c.B().Info().Section("stats").Build()).ToString()
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "total_commands_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetCookie(room.CookiePref+roomProduct, last.cookie)
	call := &api.Call{Ctx: ctx, Endpoint: api.EndpointToken, UserID: []byte("c9"), ProductID: []byte(roomProduct), Scratch: make([]byte, 0, 512)}
	svc := r.edges[0]
	run := func() {
		call.NowNano, call.Checked, call.Sale = r.nowMs.Load()*1e6, 0, catalog.Entry{}
		svc.Handle(call)
	}
	run()
	if ctx.Response.StatusCode() != 403 || !strings.Contains(string(ctx.Response.Body()), `"position":6`) {
		t.Fatalf("refusal: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	from := processed()
	allocs := testing.AllocsPerRun(200, run)
	if n := processed() - from; n != 1 { // the INFO itself
		t.Fatalf("the refusal sent %d Redis commands", n-1)
	}
	if allocs != 0 {
		t.Fatalf("the refusal allocates %.1f times", allocs)
	}
	// The poll of the same shopper: answered from memory too.
	from = processed()
	a := r.call(0, api.EndpointQueue, "c9", roomProduct, last.cookie, nil)
	if a.code != 200 || a.num("position") != 6 || a.str("status") != "waiting" || a.num("etaMs") <= 0 || a.str("ticket") != last.cookie {
		t.Fatalf("poll: %s", a.raw)
	}
	if n := processed() - from; n != 1 {
		t.Fatalf("the poll sent %d Redis commands", n-1)
	}
	call.Endpoint = api.EndpointQueue
	if allocs := testing.AllocsPerRun(200, run); allocs != 0 || ctx.Response.StatusCode() != 200 {
		t.Fatalf("the poll from memory allocates %.1f times (%d)", allocs, ctx.Response.StatusCode())
	}
}

// TestRoomSoldOutAndWindow: the queue opens prequeue_opens before the
// start (403 NOT_STARTED before); sold out closes it for everyone in line
// and for new joins (status closed, soldOut), and the token call says sold
// out.
func TestRoomSoldOutAndWindow(t *testing.T) {
	addr := redistest.Start(t)
	r := newRoomRig(t, addr, 2, conf.RoomConfig{PrequeueOpens: 20 * time.Second})
	if a := r.call(0, api.EndpointJoin, "d1", roomProduct, "", nil); a.code != 403 || a.str("code") != "NOT_STARTED" {
		t.Fatalf("join before the queue opens: %s", a.raw)
	}
	r.nowMs.Store(r.start - 10_000)
	held := r.join(0, "d1").cookie
	r.nowMs.Store(r.start + 5_000)
	r.tend()
	for _, e := range r.edges {
		e.d.Sales.StateOf(roomProduct).SetSoldOut(true) // as the broadcast sets it
	}
	if a := r.call(1, api.EndpointQueue, "d1", roomProduct, held, nil); a.code != 200 || a.str("status") != "closed" || a.body["soldOut"] != true {
		t.Fatalf("poll after sold out: %s", a.raw)
	}
	if a := r.call(0, api.EndpointJoin, "d2", roomProduct, "", nil); a.code != 200 || a.str("status") != "closed" || a.body["soldOut"] != true || a.cookie != "" {
		t.Fatalf("join after sold out: %s", a.raw)
	}
	if a := r.call(0, api.EndpointToken, "d1", roomProduct, held, nil); a.code != 410 {
		t.Fatalf("token after sold out: %s", a.raw)
	}
}

// TestRoomConfigJSON: the admin API's activity carries waiting_room with
// durations as strings, and a bad one names its field.
func TestRoomConfigJSON(t *testing.T) {
	var c conf.ActivityConfig
	js := `{"productId":"p9","waiting_room":{"enabled":true,"prequeue_opens":"10m","admit_per_minute":600,"session":"5m","order":"fifo","challenge":{"difficulty":12}}}`
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		t.Fatal(err)
	}
	w := c.Room
	if !w.Enabled || w.PrequeueOpens != 10*time.Minute || w.Session != 5*time.Minute || w.Order != "fifo" || w.Challenge.Difficulty != 12 {
		t.Fatalf("%+v", w)
	}
	out, _ := json.Marshal(c)
	var back conf.ActivityConfig
	if err := json.Unmarshal(out, &back); err != nil || back.Room != w {
		t.Fatalf("round trip: %s %v", out, err)
	}
	err := json.Unmarshal([]byte(`{"waiting_room":{"enabled":true,"session":"five"}}`), &c)
	if err == nil || !strings.Contains(err.Error(), "waiting_room.session") {
		t.Fatalf("bad duration: %v", err)
	}
}

// BenchmarkRoomToken: the token call of a shopper not admitted, refused
// from the edge's memory (the line has not reached the ticket's place) and
// by the script (the line has, max_active has no room).
//
//	go test -run '^$' -bench BenchmarkRoomToken -benchmem ./sale/
func BenchmarkRoomToken(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  conf.RoomConfig
	}{
		{"memory", conf.RoomConfig{AdmitPerMinute: 1, Order: "fifo"}},
		{"redis", conf.RoomConfig{AdmitPerMinute: 10_000_000, Order: "fifo", MaxActive: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := newRoomRig(b, redistest.Start(b), 1, c.cfg)
			r.nowMs.Store(r.start + 1000)
			r.tend()
			// "first" takes the one seat max_active has (redis case).
			if a := r.call(0, api.EndpointToken, "first", roomProduct, r.join(0, "first").cookie, nil); c.cfg.MaxActive == 1 && a.code != 200 {
				b.Fatalf("first: %s", a.raw)
			}
			last := r.join(0, "z")
			ctx := new(fasthttp.RequestCtx)
			ctx.Request.Header.SetCookie(room.CookiePref+roomProduct, last.cookie)
			call := &api.Call{Ctx: ctx, Endpoint: api.EndpointToken, UserID: []byte("z"), ProductID: []byte(roomProduct), Scratch: make([]byte, 0, 512)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				call.NowNano, call.Checked, call.Sale = r.nowMs.Load()*1e6, 0, catalog.Entry{}
				r.edges[0].Handle(call)
			}
			b.StopTimer()
			if ctx.Response.StatusCode() != 403 {
				b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		})
	}
}

// TestRoomBuyFreesSeat: an admitted shopper buys with the token the
// admission came with (do as for any sale), and with max_active the buyer's
// seat goes to the next in line.
func TestRoomBuyFreesSeat(t *testing.T) {
	addr := redistest.Start(t)
	r := newRoomRig(t, addr, 1, conf.RoomConfig{AdmitPerMinute: 6000, Order: "fifo", MaxActive: 1})
	r.nowMs.Store(r.start + 1)
	r.tend()
	t1, t2 := r.join(0, "e1").cookie, r.join(0, "e2").cookie
	r.nowMs.Add(60_000)
	tok := r.call(0, api.EndpointToken, "e1", roomProduct, t1, nil)
	if tok.code != 200 {
		t.Fatalf("e1's token: %s", tok.raw)
	}
	if a := r.call(0, api.EndpointToken, "e2", roomProduct, t2, nil); a.code != 403 {
		t.Fatalf("e2 while e1 holds the one seat: %s", a.raw)
	}
	ctx := new(fasthttp.RequestCtx)
	do := &api.Call{Ctx: ctx, NowNano: r.nowMs.Load() * 1e6, Endpoint: api.EndpointDo, UserID: []byte("e1"),
		ProductID: []byte(roomProduct), Token: []byte(tok.str("token")), Qty: 1}
	r.edges[0].Handle(do)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("e1 buys: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	await.Until(t, 5*time.Second, "e2 gets the seat e1's purchase freed", func() bool {
		return r.call(0, api.EndpointToken, "e2", roomProduct, t2, nil).code == 200
	})
}

// TestRoomPollCarriesToken (issue 26, one request per purchase): the queue
// poll that admits a shopper, and every poll while her turn lasts, carries
// the purchase token the token call would mint then — bound to her and the
// sale, one use, valid no longer than the turn — so a turn's purchase is a
// poll and a do; a join that admits carries one too. A waiting shopper's
// poll, an expired turn's, and an admitted shopper's while the sale is
// degraded carry none; the token call keeps working beside it.
func TestRoomPollCarriesToken(t *testing.T) {
	r := newRoomRig(t, redistest.Start(t), 1, conf.RoomConfig{AdmitPerMinute: 60, Order: "fifo", Session: 10 * time.Second})
	r.nowMs.Store(r.start + 1)
	r.tend()
	t1, t2 := r.join(0, "f1").cookie, r.join(0, "f2").cookie
	poll := func(user, ticket string) answer {
		t.Helper()
		a := r.call(0, api.EndpointQueue, user, roomProduct, ticket, nil)
		if a.code != 200 {
			t.Fatalf("poll of %s: %d %s", user, a.code, a.raw)
		}
		return a
	}
	do := func(user, token string) (int, string) {
		ctx := new(fasthttp.RequestCtx)
		r.edges[0].Handle(&api.Call{Ctx: ctx, NowNano: r.nowMs.Load() * 1e6, Endpoint: api.EndpointDo,
			UserID: []byte(user), ProductID: []byte(roomProduct), Token: []byte(token), Qty: 1})
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	if a := poll("f1", t1); a.str("status") != "waiting" || a.body["token"] != nil || a.body["expiresMs"] != nil {
		t.Fatalf("a waiting shopper's poll: %s", a.raw)
	}

	r.nowMs.Store(r.start + 2000) // the line reaches place 2
	now := r.nowMs.Load()
	until := now + 10_000
	a := poll("f1", t1)
	tok := a.str("token")
	if a.str("status") != "admitted" || a.num("admittedUntilMs") != until || tok == "" || a.num("expiresMs") != until {
		t.Fatalf("the admitting poll: %s, want admitted until %d with a token expiring then", a.raw, until)
	}
	if _, exp, err := r.set.Tokens.Check([]byte(tok), []byte("f1"), []byte(roomProduct), now); err != nil || exp != until {
		t.Fatalf("the poll's token: expiry %d, %v", exp, err)
	}
	if _, _, err := r.set.Tokens.Check([]byte(tok), []byte("f2"), []byte(roomProduct), now); err == nil {
		t.Fatal("f1's token passes for f2")
	}
	if _, _, err := r.set.Tokens.Check([]byte(tok), []byte("f1"), []byte("wr2"), now); err == nil {
		t.Fatal("f1's token passes for another sale")
	}
	// Every poll of the turn carries a fresh one; the token call still
	// answers, with the same expiry.
	again := poll("f1", t1)
	if again.str("token") == "" || again.str("token") == tok || again.num("expiresMs") != until {
		t.Fatalf("a second poll of the turn: %s (first token %s)", again.raw, tok)
	}
	if tc := r.call(0, api.EndpointToken, "f1", roomProduct, t1, nil); tc.code != 200 || tc.str("token") == "" || tc.num("expiresMs") != until {
		t.Fatalf("the token call beside the poll: %d %s", tc.code, tc.raw)
	}
	if code, body := do("f2", tok); code != 403 || !strings.Contains(body, "BAD_TOKEN") {
		t.Fatalf("f1's token used by f2: %d %s", code, body)
	}
	if code, body := do("f1", tok); code != 200 {
		t.Fatalf("f1 buys with the poll's token: %d %s", code, body)
	}
	if code, body := do("f1", tok); code != 403 || !strings.Contains(body, "BAD_TOKEN") {
		t.Fatalf("the poll's token used twice: %d %s", code, body)
	}

	// Degraded: the admission stands, but no token (the token call says busy).
	if _, err := r.edges[0].SetDegraded(context.Background(), roomProduct, true); err != nil {
		t.Fatal(err)
	}
	if a := poll("f2", t2); a.str("status") != "admitted" || a.body["token"] != nil {
		t.Fatalf("an admitted shopper's poll on a degraded sale: %s", a.raw)
	}
	if _, err := r.edges[0].SetDegraded(context.Background(), roomProduct, false); err != nil {
		t.Fatal(err)
	}

	// The turn is over: no token, from the poll or the token call.
	r.nowMs.Store(until)
	if a := poll("f1", t1); a.str("status") != "expired" || a.body["token"] != nil {
		t.Fatalf("the poll after the turn: %s", a.raw)
	}
	if tc := r.call(0, api.EndpointToken, "f1", roomProduct, t1, nil); tc.code != 403 {
		t.Fatalf("the token call after the turn: %d %s", tc.code, tc.raw)
	}

	// A join the line has already passed admits at once, with a token.
	j := r.join(0, "f3")
	if j.str("status") != "admitted" || j.str("token") == "" || j.num("expiresMs") != r.nowMs.Load()+10_000 {
		t.Fatalf("a join admitted at once: %s", j.raw)
	}
	if code, body := do("f3", j.str("token")); code != 200 {
		t.Fatalf("f3 buys with the join's token: %d %s", code, body)
	}
}

// TestRoomAdmittedPollTokenAllocs: the token an admitted shopper's poll
// carries costs no allocation. The poll itself reads the place with a
// script call, which allocates; the same poll on a degraded sale (no
// token) is the measure.
func TestRoomAdmittedPollTokenAllocs(t *testing.T) {
	r := newRoomRig(t, redistest.Start(t), 1, conf.RoomConfig{AdmitPerMinute: 6000, Order: "fifo"})
	r.nowMs.Store(r.start + 1)
	r.tend()
	ticket := r.join(0, "g1").cookie
	r.nowMs.Add(60_000)
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetCookie(room.CookiePref+roomProduct, ticket)
	call := &api.Call{Ctx: ctx, Endpoint: api.EndpointQueue, UserID: []byte("g1"), ProductID: []byte(roomProduct), Scratch: make([]byte, 0, 1024)}
	svc := r.edges[0]
	run := func() {
		call.NowNano, call.Checked, call.Sale = r.nowMs.Load()*1e6, 0, catalog.Entry{}
		svc.Handle(call)
	}
	measure := func(degraded bool) float64 {
		if _, err := svc.SetDegraded(context.Background(), roomProduct, degraded); err != nil {
			t.Fatal(err)
		}
		run()
		if body := string(ctx.Response.Body()); !strings.Contains(body, `"status":"admitted"`) || strings.Contains(body, `"token"`) != !degraded {
			t.Fatalf("degraded %v: %s", degraded, body)
		}
		return testing.AllocsPerRun(200, run)
	}
	without := measure(true)
	if with := measure(false); with > without {
		t.Errorf("the admitted poll allocates %.1f times with its token, %.1f without", with, without)
	}
}
