package proxy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/proxy/routeroom"
)

// roomOrigin is a loopback origin that records every request it sees (by
// the visitor's room cookie) and ends the session on /shop/done.
type roomOrigin struct {
	addr string
	mu   sync.Mutex
	seen []string // "path cookie"
}

func startRoomOrigin(t testing.TB) *roomOrigin {
	t.Helper()
	o := &roomOrigin{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		o.mu.Lock()
		seen := string(ctx.Path()) + " " + string(ctx.Request.Header.Cookie(routeroom.CookiePrefix+"shop"))
		if len(ctx.Request.Header.Peek(routeroom.ChallengeHeader))+len(ctx.Request.Header.Peek(routeroom.NonceHeader)) > 0 {
			seen += " +proof of work" // the edge's business, never the origin's
		}
		o.seen = append(o.seen, seen)
		o.mu.Unlock()
		ctx.Response.Header.Set("X-Origin", "yes")
		if string(ctx.Path()) == "/shop/done" {
			ctx.Response.Header.Set("Flashgate-Room", "end")
		}
		fmt.Fprintf(ctx, "origin page %s", ctx.Path())
	}}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	o.addr = ln.Addr().String()
	return o
}

func (o *roomOrigin) requests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

const roomConfig = `
node_id: 1
listen: {addr: "127.0.0.1:0"}
admin: {addr: "127.0.0.1:0"}
log: {access_sample: 0}
sale: {token_secret: "0123456789abcdef0123456789abcdef"}
upstreams:
  pools:
    - name: origin
      servers: ["%s"]
  routes:
    - prefix: /
      pool: origin
    - prefix: /shop/
      pool: origin
      waiting_room:
        name: shop
        title: The Shop
        max_active: 2
        session: 1m
        bypass: {paths: [/shop/static/]}
`

type visitor struct {
	c *http.Client
}

func newVisitor() *visitor {
	jar, _ := cookiejar.New(nil)
	return &visitor{c: &http.Client{Jar: jar}}
}

func (v *visitor) get(t *testing.T, url string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	return getWith(t, v.c, url, hdr...)
}

// TestRouteRoomOnEmbeddedRedis: a room with max_active 2 in front of a
// route, on one edge with the embedded Redis. The first two visitors reach
// the origin, the third gets the queue page (JSON with its place and
// Retry-After for an app); the origin ending a session lets the third in
// on its next poll; the origin never sees the third before that, nor the
// poll itself; a bypass path and a minted bypass token walk past; the
// methods switch live.
func TestRouteRoomOnEmbeddedRedis(t *testing.T) {
	o := startRoomOrigin(t)
	e := startEdge(t, fmt.Sprintf(roomConfig, o.addr))
	a, b, c := newVisitor(), newVisitor(), newVisitor()
	for _, v := range []*visitor{a, b} {
		if st, h, body := v.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "yes" {
			t.Fatalf("admitted visitor: %d %s", st, body)
		}
	}
	st, h, body := c.get(t, e.base+"/shop/item", "Accept-Language", "en")
	if st != 200 || h.Get("X-Origin") != "" || !strings.Contains(body, "The Shop") || !strings.Contains(body, `id="fg-place">1<`) {
		t.Fatalf("third visitor: %d %v %s", st, h, body)
	}
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") || h.Get("Cache-Control") != "no-store" {
		t.Errorf("queue page headers: %v", h)
	}
	// An app's first request hears its place at once (its later ones near
	// the head are held: TestRouteRoomHeldPollWalksIn).
	st, h, body = newVisitor().get(t, e.base+"/shop/item", "Accept", "application/json")
	var j struct {
		Status string `json:"status"`
		Place  int64  `json:"place"`
		EtaMs  int64  `json:"etaMs"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil || st != 503 || j.Status != "waiting" || j.Place != 2 || h.Get("Retry-After") != "5" || j.EtaMs <= 0 {
		t.Fatalf("app's answer: %d %v %s", st, h, body)
	}
	// The rest of the site is not behind the room.
	if st, h, _ := c.get(t, e.base+"/about"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("route without a room: %d", st)
	}
	// A bypass path walks past.
	if st, h, _ := c.get(t, e.base+"/shop/static/app.css"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("bypass path: %d", st)
	}
	// A minted bypass token walks past.
	code, out := post(t, e.adminBase+"/admin/rooms/bypass", `{"room":"shop","ttl":"1h"}`)
	var tok struct{ Token string }
	if json.Unmarshal([]byte(out), &tok); code != 200 || tok.Token == "" {
		t.Fatalf("mint: %d %s", code, out)
	}
	if st, h, _ := newVisitor().get(t, e.base+"/shop/staff", routeroom.BypassHeader, tok.Token); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("bypass token: %d", st)
	}
	// A: the origin ends the session; the header never reaches A.
	if st, h, _ := a.get(t, e.base+"/shop/done"); st != 200 || h.Get("Flashgate-Room") != "" {
		t.Fatalf("end: %d %v", st, h)
	}
	// C's poll now admits them (answered by the edge), then C reaches the
	// origin. (The seat was reserved for C at the end: the poll claims it.)
	st, _, body = c.get(t, e.base+"/shop/item", routeroom.PollHeader, "1", "Accept", "application/json")
	if st != 200 || !strings.Contains(body, `"status":"admitted"`) {
		t.Fatalf("poll after the end: %d %s", st, body)
	}
	if st, h, _ := c.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("admitted third: %d", st)
	}
	// A, whose session the origin ended, queues again.
	if st, h, _ := a.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "" {
		t.Fatalf("an ended session still reaches the origin: %d", st)
	}
	// The origin saw /shop/ only from admitted visitors (the bypassed ones
	// aside): a's two, b's one, c's one, and never a poll.
	var shop []string
	for _, r := range o.requests() {
		if strings.HasPrefix(r, "/shop/") && !strings.HasPrefix(r, "/shop/static/") && !strings.HasPrefix(r, "/shop/staff") {
			shop = append(shop, r)
		}
	}
	if len(shop) != 4 {
		t.Errorf("origin saw %d room requests, want 4: %q", len(shop), shop)
	}
	// Methods, live: reject closes; queue_all holds even the admitted; back
	// to fifo lets them through again.
	if code, out := post(t, e.adminBase+"/admin/rooms", `{"room":"shop","method":"reject"}`); code != 200 || !strings.Contains(out, `"method":"reject"`) {
		t.Fatalf("switch: %d %s", code, out)
	}
	if st, _, body := b.get(t, e.base+"/shop/item"); st != 503 || !strings.Contains(body, "Closed") {
		t.Fatalf("reject: %d %s", st, body)
	}
	post(t, e.adminBase+"/admin/rooms", `{"room":"shop","method":"queue_all"}`)
	if st, h, _ := b.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "" {
		t.Fatalf("queue_all let an admitted visitor through: %d", st)
	}
	post(t, e.adminBase+"/admin/rooms", `{"room":"shop","method":"fifo"}`)
	if st, h, _ := b.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("back to fifo: %d", st)
	}
	if code, out := post(t, e.adminBase+"/admin/rooms", `{"room":"shop","method":"lifo"}`); code != 400 {
		t.Fatalf("a bad method: %d %s", code, out)
	}
	if code, _ := post(t, e.adminBase+"/admin/rooms", `{"room":"nope","method":"fifo"}`); code != 404 {
		t.Fatalf("an unknown room: %d", code)
	}
	// The wait histogram: c, who waited, and b, held by queue_all and let in
	// again after it.
	if _, _, m := newVisitor().get(t, e.adminBase+"/metrics"); !strings.Contains(m, `flashgate_route_room_wait_seconds_count{room="shop"} 2`+"\n") ||
		!strings.Contains(m, `flashgate_route_room_ended_total{room="shop"}`) ||
		!strings.Contains(m, `flashgate_route_room_admitted_per_minute{room="shop"}`) ||
		!strings.Contains(m, `flashgate_route_room_wait_p90_seconds{room="shop"}`) {
		t.Errorf("metrics: %s", grepLines(m, "flashgate_route_room"))
	}
	// The list.
	_, _, body = newVisitor().get(t, e.adminBase+"/admin/rooms")
	var rooms map[string]struct {
		Method   string `json:"method"`
		Admitted int64  `json:"admitted"`
		Ended    int64  `json:"ended"`
		// The last minute's figures ride along (their values: window_test.go).
		AbandonRate *float64 `json:"abandonRate"`
		WaitP90S    *float64 `json:"waitP90S"`
	}
	if err := json.Unmarshal([]byte(body), &rooms); err != nil || rooms["shop"].Method != "fifo" || rooms["shop"].Ended != 1 || rooms["shop"].Admitted < 3 ||
		rooms["shop"].AbandonRate == nil || rooms["shop"].WaitP90S == nil {
		t.Fatalf("list: %s", body)
	}
}

// TestRouteRoomPageChecked: proxy -t (Check) refuses a room whose page
// template does not parse, naming the field.
func TestRouteRoomPageChecked(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "queue.html")
	os.WriteFile(page, []byte("<p>{{.Place</p>"), 0o644)
	cfg := fmt.Sprintf(roomConfig, "127.0.0.1:9") + "        page: " + page + "\n"
	path := filepath.Join(dir, "edge.yaml")
	writeConfig(t, path, cfg)
	doc, err := conf.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(doc); err == nil || !strings.Contains(err.Error(), "upstreams.routes[1].waiting_room") {
		t.Fatalf("a broken page passes proxy -t: %v", err)
	}
	os.WriteFile(page, []byte("<p>{{.Room}}: {{.Place}}</p>{{.Script}}"), 0o644)
	if _, err := Check(doc); err != nil {
		t.Fatalf("a good page refused: %v", err)
	}
}

// solveRoomPow finds the nonce a route room's challenge asks for, as the
// sale page's worker (static/site/pow.js) does.
func solveRoomPow(challenge string, zeros int) string {
	for i := uint64(0); ; i++ {
		n := strconv.FormatUint(i, 10)
		sum := sha256.Sum256([]byte(challenge + ":" + n))
		if bits.LeadingZeros32(binary.BigEndian.Uint32(sum[:4])) >= zeros {
			return n
		}
	}
}

// TestRouteRoomChallenge: a room with challenge.difficulty asks a new
// visitor for a proof of work before a place; a solved one gets the place
// (here: in) and never reaches the origin; the same proof again — a
// replay, by a visitor without the first one's cookie — and a forged or
// unsolved one are refused 403 BAD_CHALLENGE with a fresh challenge, and
// counted; a visitor with a place is not asked again.
func TestRouteRoomChallenge(t *testing.T) {
	o := startRoomOrigin(t)
	// poll 1s: the waiting visitor's request near the head is held that long.
	e := startEdge(t, fmt.Sprintf(roomConfig, o.addr)+"        challenge: {difficulty: 8}\n        poll: 1s\n")
	type answer struct {
		Status, Challenge, Code string
		Difficulty              int
	}
	ask := func(v *visitor, hdr ...string) (int, answer, http.Header) {
		t.Helper()
		st, h, body := v.get(t, e.base+"/shop/item", append([]string{"Accept", "application/json"}, hdr...)...)
		var a answer
		if h.Get("X-Origin") == "" {
			if err := json.Unmarshal([]byte(body), &a); err != nil {
				t.Fatalf("%d %s", st, body)
			}
		}
		return st, a, h
	}
	a := newVisitor()
	st, ch, _ := ask(a)
	if st != 503 || ch.Status != "challenge" || ch.Challenge == "" || ch.Difficulty != 8 || ch.Code != "" {
		t.Fatalf("a new visitor: %d %+v, want 503 and a challenge", st, ch)
	}
	// The browser's page carries the challenge for its script.
	if st, h, body := newVisitor().get(t, e.base+"/shop/item"); st != 200 || !strings.Contains(body, `data-status="challenge"`) ||
		!strings.Contains(body, "/seckill/_static/pow.js") || !strings.Contains(h.Get("Content-Security-Policy"), "worker-src 'self'") {
		t.Fatalf("the page: %d %v %s", st, h, body)
	}
	nonce := solveRoomPow(ch.Challenge, ch.Difficulty)
	proof := []string{routeroom.ChallengeHeader, ch.Challenge, routeroom.NonceHeader, nonce}
	if st, _, h := ask(a, proof...); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("a solved proof: %d, want the origin's answer", st)
	}
	// Admitted: no new proof asked.
	if st, _, h := ask(a); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("the admitted visitor again: %d", st)
	}
	refused := func(what string, hdr ...string) {
		t.Helper()
		st, r, _ := ask(newVisitor(), hdr...)
		if st != 403 || r.Code != "BAD_CHALLENGE" || r.Status != "challenge" || r.Challenge == "" || r.Challenge == ch.Challenge {
			t.Errorf("%s: %d %+v, want 403 BAD_CHALLENGE with a fresh challenge", what, st, r)
		}
	}
	refused("replayed", proof...)
	forged := []byte(ch.Challenge)
	forged[len(forged)/2] ^= 1
	refused("forged", routeroom.ChallengeHeader, string(forged), routeroom.NonceHeader, nonce)
	_, fresh, _ := ask(newVisitor())
	refused("unsolved", routeroom.ChallengeHeader, fresh.Challenge, routeroom.NonceHeader, "x")
	// A second visitor solves their own and waits for a place: asked once.
	b := newVisitor()
	_, ch2, _ := ask(b)
	ask(b, routeroom.ChallengeHeader, ch2.Challenge, routeroom.NonceHeader, solveRoomPow(ch2.Challenge, ch2.Difficulty))
	c := newVisitor()
	_, ch3, _ := ask(c)
	if st, w, _ := ask(c, routeroom.ChallengeHeader, ch3.Challenge, routeroom.NonceHeader, solveRoomPow(ch3.Challenge, ch3.Difficulty)); st != 503 || w.Status != "waiting" {
		t.Fatalf("the third solver: %d %+v, want waiting (cap 2)", st, w)
	}
	if st, w, _ := ask(c); st != 503 || w.Status != "waiting" {
		t.Fatalf("the waiting visitor polls: %d %+v, want waiting without a new challenge", st, w)
	}
	for _, r := range o.requests() {
		if strings.Contains(r, "proof of work") {
			t.Errorf("the origin got a proof of work: %q", r)
		}
	}
	if _, _, m := newVisitor().get(t, e.adminBase+"/metrics"); !strings.Contains(m, `flashgate_route_room_requests_total{room="shop",result="bad_challenge"} 3`+"\n") {
		t.Errorf("metrics: %s", grepLines(m, "bad_challenge"))
	}
}

// roomHeld is the edge's count of held requests in room shop.
func roomHeld(t *testing.T, adminBase string) string {
	_, _, m := newVisitor().get(t, adminBase+"/metrics")
	return grepLines(m, `flashgate_route_room_held{room="shop"}`)
}

// TestRouteRoomHeldPollWalksIn: a waiting visitor's poll at the head of a
// capped room's line is held by the edge, and the moment the origin ends
// an admitted visitor's session the held poll answers admitted (the seat
// reserved for her is claimed at once, not at her next poll); an app's
// held request goes on to the origin itself.
func TestRouteRoomHeldPollWalksIn(t *testing.T) {
	o := startRoomOrigin(t)
	e := startEdge(t, fmt.Sprintf(roomConfig, o.addr))
	a, b, c, d := newVisitor(), newVisitor(), newVisitor(), newVisitor()
	for _, v := range []*visitor{a, b} {
		if st, h, body := v.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "yes" {
			t.Fatalf("admitted visitor: %d %s", st, body)
		}
	}
	for _, v := range []*visitor{c, d} { // places 1 and 2: tickets, answered at once
		if st, h, _ := v.get(t, e.base+"/shop/item", "Accept", "application/json"); st != 503 || h.Get("X-Origin") != "" {
			t.Fatalf("waiting visitor's first request: %d", st)
		}
	}
	type answer struct {
		st     int
		origin bool
		body   string
	}
	polled, app := make(chan answer, 1), make(chan answer, 1)
	go func() {
		st, h, body := getWith(t, c.c, e.base+"/shop/item", routeroom.PollHeader, "1", "Accept", "application/json")
		polled <- answer{st, h.Get("X-Origin") != "", body}
	}()
	go func() {
		st, h, body := getWith(t, d.c, e.base+"/shop/item", "Accept", "application/json")
		app <- answer{st, h.Get("X-Origin") != "", body}
	}()
	await.Until(t, 5*time.Second, "both requests held", func() bool { return strings.HasSuffix(roomHeld(t, e.adminBase), " 2") })
	if st, _, _ := a.get(t, e.base+"/shop/done"); st != 200 {
		t.Fatalf("end: %d", st)
	}
	select {
	case r := <-polled:
		if r.st != 200 || r.origin || !strings.Contains(r.body, `"status":"admitted"`) {
			t.Fatalf("held poll: %+v", r)
		}
	case r := <-app:
		t.Fatalf("the app (place 2) went first: %+v", r)
	}
	if st, _, _ := b.get(t, e.base+"/shop/done"); st != 200 {
		t.Fatalf("end: %d", st)
	}
	if r := <-app; r.st != 200 || !r.origin {
		t.Fatalf("held app request: %+v", r)
	}
	if h := roomHeld(t, e.adminBase); !strings.HasSuffix(h, " 0") {
		t.Errorf("still held: %s", h)
	}
}

// TestRouteRoomEndedPassReplayed: a copy of a pass kept from before the
// origin ended its session does not reach the origin again while the room
// is full (it used to, from memory, until its recheck 30 s later): it
// queues behind the visitor the freed seat went to.
func TestRouteRoomEndedPassReplayed(t *testing.T) {
	o := startRoomOrigin(t)
	e := startEdge(t, fmt.Sprintf(roomConfig, o.addr))
	a, b, c := newVisitor(), newVisitor(), newVisitor()
	for _, v := range []*visitor{a, b} {
		if st, h, _ := v.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "yes" {
			t.Fatalf("admitted: %d", st)
		}
	}
	if st, h, _ := c.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "" {
		t.Fatalf("c waits: %d", st)
	}
	u, err := url.Parse(e.base)
	if err != nil {
		t.Fatal(err)
	}
	var pass string
	for _, ck := range a.c.Jar.Cookies(u) {
		if ck.Name == routeroom.CookiePrefix+"shop" {
			pass = ck.Value
		}
	}
	if pass == "" {
		t.Fatal("no pass")
	}
	if st, h, _ := a.get(t, e.base+"/shop/done"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("end: %d", st)
	}
	before := len(o.requests())
	replay := &http.Client{}
	st, h, _ := getWith(t, replay, e.base+"/shop/item", "Cookie", routeroom.CookiePrefix+"shop="+pass)
	if st != 200 || h.Get("X-Origin") != "" || len(o.requests()) != before {
		t.Fatalf("the ended pass replayed reached the origin: %d %v", st, h)
	}
	// The seat went to c, who walks in.
	if st, h, _ := c.get(t, e.base+"/shop/item"); st != 200 || h.Get("X-Origin") != "yes" {
		t.Fatalf("c after the end: %d", st)
	}
}
