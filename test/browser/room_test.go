package browser

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/bits"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// roomSale is a sale with a waiting room: the pre-queue is open from the
// edge's start, the sale (and the draw) starts in start, one place is let in
// every two seconds, and joining asks for a small proof of work.
func roomSale(id, start string, stock int) string {
	return fmt.Sprintf("  - {product_id: %s, name: \"Waiting-room Kettle\", price: \"25.00\", stock: %d, limit: 1,"+
		" start: %q, end: \"+1h\", waiting_room: {enabled: true, prequeue_opens: 1h, admit_per_minute: 30,"+
		" session: 5m, challenge: {difficulty: 8}}}\n", id, stock, start)
}

// roomRecorder keeps every distinct text of the room's line, so a test can
// assert on a state that was on screen only for a moment ("Checking your
// browser…").
const roomRecorder = `(function () {
  var seen = window.__room = [];
  document.addEventListener('DOMContentLoaded', function () {
    var n = document.getElementById('room-line');
    if (!n) return;
    function rec() { var t = n.textContent; if (t && seen[seen.length - 1] !== t) seen.push(t); }
    new MutationObserver(rec).observe(n, { subtree: true, childList: true, characterData: true });
    rec();
  });
})();`

// TestWaitingRoom is a shopper's way through a sale's waiting room: the page
// shows the room; signed in, the shopper presses Join, the browser solves
// the sale's challenge ("Checking your browser…"), and the page counts down
// to the draw. At the opening the place appears ("You are number N in
// line") and moves as the line advances, then "It's your turn — you have
// 5:00 to buy", Buy (with the token the admitting poll carried: no token
// call), success. A second shopper who joined after the opening
// (so behind the first) is told at once that the sale is sold out.
//
// Five more shoppers join the pre-queue over HTTP, so the draw puts some of
// them ahead of the browser's shopper — unless it puts the browser's first
// (one time in six); then its place cannot move, and the test starts again
// with a new edge and a new draw.
func TestWaitingRoom(t *testing.T) {
	t.Parallel()
	for attempt := 1; ; attempt++ {
		var first bool
		t.Run(fmt.Sprintf("draw%d", attempt), func(t *testing.T) { first = waitingRoomRun(t) })
		if !first || t.Failed() {
			return
		}
		if attempt == 6 {
			t.Fatal("the draw put the browser's shopper first six times running: the lottery is not random")
		}
		t.Logf("draw %d put the browser's shopper first in line, so its place could not move; again with a new draw", attempt)
	}
}

// waitingRoomRun is one attempt of TestWaitingRoom; it reports true when the
// draw put the browser's shopper first (nothing left to check).
func waitingRoomRun(t *testing.T) (drawnFirst bool) {
	const others = 5
	b := newTab(t, "shopper")
	b.initScript(roomRecorder)
	late := newTab(t, "late")
	late.initScript(roomRecorder)
	b.do(chromedp.EmulateViewport(1280, 900))
	late.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch))

	e := startEdge(t, activities(roomSale("p3", "+9s", 1)))
	st := e.status("p3")
	if _, ok := st["waitingRoom"].(map[string]any); !ok {
		t.Fatalf("status of p3 has no waitingRoom: %v", st)
	}
	startMs := int64(st["startMs"].(float64))
	start := time.UnixMilli(startMs)

	// Signed out: the page is the room, the queue is open, Join waits for a
	// sign-in, and there is no Buy to press.
	b.open(e.page("p3"))
	b.waitText(5*time.Second, "room-line", regexp.MustCompile(`^The queue is open\. Sign in to join it\.$`))
	if st := eval[joinState](b, joinStateJS); !st.Visible || st.Enabled || st.Text != "Sign in to join" {
		t.Errorf("signed out: Join is %+v, want shown and off, 'Sign in to join'", st)
	}
	if vis := eval[bool](b, `document.getElementById('buy-row').offsetParent !== null`); vis {
		t.Error("signed out, before the shopper's turn: the Buy row shows")
	}
	if got := b.text("signin-title"); got != "Sign in to join the queue" {
		t.Errorf("sign-in title %q", got)
	}
	roomShots(t, b, "1-signed-out")

	// The others join the pre-queue over the API.
	for i := range others {
		e.joinRoom(fmt.Sprintf("early-%d", i), "p3")
	}

	b.signIn("kettle-fan")
	b.waitBuyHidden()
	b.waitJS(5*time.Second, "Join on", `!document.getElementById('join').disabled`)
	mark := b.mark()
	b.do(chromedp.Click(chromedp.ID("join")))
	prequeue := regexp.MustCompile(`^You’re in the queue\. Places are drawn at random when the sale opens in (\d+:\d\d)\.$`)
	line := b.waitText(5*time.Second, "room-line", prequeue)
	before := time.Now()
	if !before.Before(start) {
		t.Fatalf("setting up took too long: the sale opened before the shopper had joined")
	}
	// The countdown is the server's: whole seconds to the start, ceiled.
	left := prequeue.FindStringSubmatch(line)[1]
	if secs := clockSeconds(left); secs < int(time.Until(start).Seconds())-1 || secs > int(time.Until(start).Seconds())+2 {
		t.Errorf("the pre-queue counts down %q, the sale opens in %v", left, time.Until(start).Round(time.Millisecond))
	}
	if seen := roomLines(b); !slices.Contains(seen, "Checking your browser…") {
		t.Errorf("room lines %q: never showed 'Checking your browser…' while solving the challenge", seen)
	}
	if n := b.countReqs(mark, "/api/seckill/challenge"); n != 1 {
		t.Errorf("%d challenge requests for one join, want 1", n)
	}
	if st := eval[joinState](b, joinStateJS); st.Visible {
		t.Errorf("joined: Join still shows: %+v", st)
	}
	roomShots(t, b, "2-prequeue")

	// The countdown moves on its own.
	b.waitJS(3*time.Second, "the pre-queue countdown to tick", `(function () {
  var m = /opens in (\d+:\d\d)\./.exec(document.getElementById('room-line').textContent);
  return !!m && m[1] !== `+jsString(left)+`;
})()`)

	// After the opening: the place appears.
	place := regexp.MustCompile(`^You are number (\d[\d,]*) in line — (.+)\.$`)
	line = b.waitText(time.Until(start)+5*time.Second, "room-line", place)
	firstPos := positionOf(place, line)
	t.Logf("the draw put the browser's shopper at place %d of %d", firstPos, others+1)
	if firstPos < 1 || firstPos > others+1 {
		t.Fatalf("room line %q: place %d, want 1..%d", line, firstPos, others+1)
	}
	if firstPos == 1 {
		return true
	}
	if m := place.FindStringSubmatch(line); !regexp.MustCompile(`^(less than a minute|about \d+ minutes?|any moment now)$`).MatchString(m[2]) {
		t.Errorf("room line %q: the wait %q is not in plain words", line, m[2])
	}
	if n := b.countReqs(0, "/api/seckill/token"); n != 0 {
		t.Errorf("the page asked for a purchase token %d times before the shopper's turn", n)
	}
	roomShots(t, b, "3-in-line")

	// The late shopper joins after the opening: behind everyone.
	late.open(e.page("p3"))
	late.signIn("late-comer")
	late.waitJS(5*time.Second, "Join on", `!document.getElementById('join').disabled`)
	late.do(chromedp.Click(chromedp.ID("join")))
	lateLine := late.waitText(5*time.Second, "room-line", place)
	if lp, cur := positionOf(place, lateLine), positionOf(place, b.text("room-line")); cur > 0 && lp < cur {
		t.Errorf("the late shopper is number %d in line, ahead of the pre-queue's shopper (number %d)", lp, cur)
	}
	roomFits(t, late, "late shopper in line")
	late.keepShot("3-late-in-line-390")

	// The place moves as the line advances, then it is the shopper's turn.
	b.waitJS(6*time.Second, "the place to move", `(function () {
  var m = /^You are number (\d[\d,]*) in line/.exec(document.getElementById('room-line').textContent);
  return !m || parseInt(m[1].replace(/,/g, ''), 10) < `+strconv.Itoa(firstPos)+`;
})()`)
	turn := regexp.MustCompile(`^It’s your turn — you have (\d+:\d\d) to buy\.$`)
	line = b.waitText(time.Duration(firstPos)*2*time.Second+5*time.Second, "room-line", turn)
	if secs := clockSeconds(turn.FindStringSubmatch(line)[1]); secs < 290 || secs > 300 {
		t.Errorf("your turn: %q, want about 5:00 to buy", line)
	}
	var positions []int
	for _, s := range roomLines(b) {
		if m := place.FindStringSubmatch(s); m != nil {
			if p := positionOf(place, s); len(positions) == 0 || positions[len(positions)-1] != p {
				positions = append(positions, p)
			}
		}
	}
	t.Logf("places shown: %v", positions)
	if len(positions) < 2 || !slices.IsSortedFunc(positions, func(a, b int) int { return b - a }) {
		t.Errorf("places shown %v: want the place to come down, in at least two steps", positions)
	}
	// One place every 2 s, a poll every 1-2 s: the number comes down a
	// place or two at a time, to 1, never in a jump.
	for i := 1; i < len(positions); i++ {
		if positions[i-1]-positions[i] > 2 {
			t.Errorf("places shown %v: a jump from %d to %d", positions, positions[i-1], positions[i])
		}
	}
	if positions[len(positions)-1] > 2 {
		t.Errorf("places shown %v: the turn came while %d places were still ahead", positions, positions[len(positions)-1]-1)
	}
	b.waitBuy(3*time.Second, `^Buy now$`, true)
	b.waitJS(3*time.Second, "the turn to count down", `(function () {
  var m = /you have (\d+:\d\d) to buy/.exec(document.getElementById('room-line').textContent);
  return !!m && m[1] !== `+jsString(turn.FindStringSubmatch(line)[1])+`;
})()`)
	roomShots(t, b, "4-your-turn")
	// The poll that said it is her turn carried her purchase token (issue
	// 26): Buy is one request, do, with no token call.
	b.waitJS(3*time.Second, "the queue poll's token", `document.getElementById('buy').hasAttribute('data-token')`)

	// Buy: do, with the token of the admitting poll.
	mark = b.mark()
	b.clickBuy()
	b.waitText(10*time.Second, "message", regexp.MustCompile(`^Success! Order \d+ confirmed\.$`))
	apiID := doOrderID(t, b, mark)
	if r := e.result("kettle-fan", "p3", apiID); r.Status != 200 || r.field("status") != "success" {
		t.Errorf("result of %s: %v", apiID, r)
	}
	if n := b.countReqs(0, "/api/seckill/token"); n != 0 {
		t.Errorf("%d token requests for a purchase with the queue poll's token, want none", n)
	}
	if n := b.countReqs(mark, "/api/seckill/do"); n != 1 {
		t.Errorf("%d do requests for one purchase, want 1", n)
	}
	roomShots(t, b, "5-success")
	noJSONInMessages(t, b)

	// The only unit is sold: the shopper still in line hears it at once.
	late.waitText(4*time.Second, "room-line", regexp.MustCompile(`^Sold out — every item has been claimed, so the queue is closed\.$`))
	if vis := eval[bool](late, `document.getElementById('buy-row').offsetParent !== null`); vis {
		t.Error("sold out: the late shopper's Buy row shows")
	}
	if st := eval[joinState](late, joinStateJS); st.Visible {
		t.Errorf("sold out: the late shopper's Join shows: %+v", st)
	}
	roomFits(t, late, "sold out")
	late.keepShot("6-sold-out-390")
	// Nothing more can change for it: the queue poll stops.
	quiet := late.mark()
	time.Sleep(2500 * time.Millisecond) // the absence of requests over time is the point
	if n := late.countReqs(quiet, "/api/seckill/queue"); n > 0 {
		t.Errorf("sold out: the late shopper's page polled the queue %d more times", n)
	}
	for _, tb := range []*tab{b, late} {
		for _, r := range tb.requests(0) {
			if !strings.HasPrefix(r.URL, e.base+"/") {
				t.Errorf("%s: request to another origin: %s %s", tb.name, r.Method, r.URL)
			}
		}
	}
	return false
}

type joinState struct {
	Text    string `json:"text"`
	Enabled bool   `json:"enabled"`
	Visible bool   `json:"visible"`
}

const joinStateJS = `(function () {
  var n = document.getElementById('join');
  return { text: n.textContent, enabled: !n.disabled, visible: n.offsetParent !== null };
})()`

// waitBuyHidden waits until the Buy row is off the page (in the room, before
// the shopper's turn).
func (b *tab) waitBuyHidden() {
	b.t.Helper()
	b.waitJS(3*time.Second, "the Buy row hidden", `document.getElementById('buy-row').offsetParent === null`)
}

func roomLines(b *tab) []string {
	b.t.Helper()
	return eval[[]string](b, `window.__room || []`)
}

func positionOf(re *regexp.Regexp, line string) int {
	m := re.FindStringSubmatch(line)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	if err != nil {
		return -1
	}
	return n
}

// clockSeconds parses "0:42" or "1:02:03" into seconds (-1 if not).
func clockSeconds(s string) int {
	total := 0
	for p := range strings.SplitSeq(s, ":") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return -1
		}
		total = total*60 + n
	}
	return total
}

// roomShots checks that the page fits a 390 px phone at this stage and, with
// BROWSER_SHOTS set, saves it at desktop and phone widths.
func roomShots(t *testing.T, b *tab, label string) {
	t.Helper()
	b.keepShot(label + "-desktop")
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch))
	roomFits(t, b, label)
	b.keepShot(label + "-390")
	b.do(chromedp.EmulateViewport(1280, 900))
}

// roomFits checks that nothing overflows sideways and the room panel is on
// the first screen.
func roomFits(t *testing.T, b *tab, when string) {
	t.Helper()
	m := eval[struct {
		ScrollWidth float64 `json:"scrollWidth"`
		InnerWidth  float64 `json:"innerWidth"`
		RoomTop     float64 `json:"roomTop"`
		InnerHeight float64 `json:"innerHeight"`
	}](b, `({ scrollWidth: document.documentElement.scrollWidth, innerWidth: innerWidth, innerHeight: innerHeight,
  roomTop: document.getElementById('room').getBoundingClientRect().top + scrollY })`)
	if m.ScrollWidth > m.InnerWidth {
		t.Errorf("%s: horizontal overflow at %v px: scrollWidth %v", when, m.InnerWidth, m.ScrollWidth)
	}
	if m.RoomTop > m.InnerHeight {
		t.Errorf("%s: the waiting room starts at %v px, below the first screen (%v px)", when, m.RoomTop, m.InnerHeight)
	}
}

// joinRoom joins user to the product's waiting room over the API, solving
// the challenge when the sale asks for one; it returns the join's answer.
func (e *edge) joinRoom(user, product string) apiResp {
	e.t.Helper()
	jwt := e.session(user)
	body := map[string]any{"productId": product}
	if c := e.request("GET", e.base+"/api/seckill/challenge?productId="+url.QueryEscape(product), jwt, nil); c.Status == 200 {
		var ch struct {
			Challenge  string `json:"challenge"`
			Difficulty int    `json:"difficulty"`
		}
		if err := json.Unmarshal(c.Body, &ch); err != nil || ch.Challenge == "" {
			e.t.Fatalf("challenge for %s: %v", user, c)
		}
		body["challenge"], body["nonce"] = ch.Challenge, solveChallenge(ch.Challenge, ch.Difficulty)
	}
	r := e.request("POST", e.base+"/api/seckill/queue", jwt, body)
	if r.Status != 200 {
		e.t.Fatalf("join %s to %s: %v", user, product, r)
	}
	return r
}

// solveChallenge finds a nonce whose SHA-256(challenge ":" nonce) starts
// with difficulty zero bits.
func solveChallenge(challenge string, difficulty int) string {
	for n := 0; ; n++ {
		nonce := strconv.Itoa(n)
		if leadingZeroBits(sha256.Sum256([]byte(challenge+":"+nonce))) >= difficulty {
			return nonce
		}
	}
}

func leadingZeroBits(h [32]byte) int {
	z := 0
	for _, c := range h {
		if c != 0 {
			return z + bits.LeadingZeros8(c)
		}
		z += 8
	}
	return z
}

// TestWaitingRoomTurnEndsAndQueueCloses: a sale with a room but no browser
// check, a cap of one shopper at a time and a 6-second turn, whose queue
// opens 3 s after the edge starts. The first shopper sees the countdown to
// the queue's opening and Join turn on by itself, joins the pre-queue, and
// gets the turn at the opening. The second, who joins
// after the opening, waits behind the cap; when the operator closes the
// queue, their page says so. The first lets the turn run out: the page says
// so and Buy goes away.
func TestWaitingRoomTurnEndsAndQueueCloses(t *testing.T) {
	t.Parallel()
	first, second := newTab(t, "first"), newTab(t, "second")
	first.initScript(roomRecorder)
	second.initScript(roomRecorder)
	e := startEdge(t, activities("  - {product_id: p3, name: \"Waiting-room Lamp\", price: \"9.00\", stock: 5, limit: 1,"+
		" start: \"+7s\", end: \"+1h\", waiting_room: {enabled: true, prequeue_opens: 4s, admit_per_minute: 6000,"+
		" max_active: 1, session: 6s}}\n"))

	wr, _ := e.status("p3")["waitingRoom"].(map[string]any)
	opensMs, _ := wr["queueOpensMs"].(float64)
	opens := time.UnixMilli(int64(opensMs))
	first.open(e.page("p3"))
	first.signIn("lamp-1")
	line := first.waitText(3*time.Second, "room-line", regexp.MustCompile(`^The queue opens in \d:\d\d\. Keep this page open — the Join button turns on by itself\.$`))
	join := eval[joinState](first, joinStateJS)
	if !time.Now().Before(opens) {
		t.Fatalf("setting up took too long: the queue opened before the page was checked")
	}
	if !join.Visible || join.Enabled || !strings.HasPrefix(join.Text, "Queue opens in ") {
		t.Errorf("before the queue opens: Join is %+v, want shown and off, 'Queue opens in …'", join)
	}
	if secs := clockSeconds(strings.TrimSuffix(strings.TrimPrefix(line, "The queue opens in "), ". Keep this page open — the Join button turns on by itself.")); float64(secs) < time.Until(opens).Seconds()-1 || float64(secs) > time.Until(opens).Seconds()+1.5 {
		t.Errorf("%q, the queue opens in %v", line, time.Until(opens).Round(time.Millisecond))
	}
	roomShots(t, first, "queue-not-open")
	mark := first.mark()
	first.waitJS(time.Until(opens)+3*time.Second, "Join on by itself", `!document.getElementById('join').disabled`)
	first.do(chromedp.Click(chromedp.ID("join")))
	first.waitText(5*time.Second, "room-line", regexp.MustCompile(`^You’re in the queue\. Places are drawn at random`))
	if n := first.countReqs(mark, "/api/seckill/challenge"); n != 0 {
		t.Errorf("a sale without a browser check: the page asked for a challenge %d times", n)
	}
	turn := regexp.MustCompile(`^It’s your turn — you have 0:0[1-6] to buy\.$`)
	first.waitText(8*time.Second, "room-line", turn)
	first.waitBuy(2*time.Second, `^Buy now$`, true)

	// The second shopper joins behind the first, and the cap holds them.
	second.open(e.page("p3"))
	second.signIn("lamp-2")
	second.waitJS(5*time.Second, "Join on", `!document.getElementById('join').disabled`)
	second.do(chromedp.Click(chromedp.ID("join")))
	second.waitText(5*time.Second, "room-line", regexp.MustCompile(`^You are number 1 in line`))

	// The operator closes the queue while the first still has the turn:
	// the second shopper hears it.
	e.adminPost("/admin/waitroom", map[string]any{"productId": "p3", "action": "close"})
	if got := first.text("room-line"); !turn.MatchString(got) {
		t.Fatalf("the first shopper's turn ended before the queue was closed (%q): machine too slow for this test", got)
	}
	second.waitText(5*time.Second, "room-line", regexp.MustCompile(`^The queue has been closed — nobody else is being let in\.$`))
	if vis := eval[bool](second, `document.getElementById('buy-row').offsetParent !== null`); vis {
		t.Error("closed: the second shopper's Buy row shows")
	}
	if seen := roomLines(second); slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, "It’s your turn") }) {
		t.Errorf("the second shopper was given a turn while the first held the only one: %q", seen)
	}
	roomShots(t, second, "closed")

	// The first shopper's turn runs out (closing the queue does not take a
	// turn already given).
	first.waitText(8*time.Second, "room-line", regexp.MustCompile(`^Your time to buy has run out, so your turn is over\.$`))
	first.waitBuyHidden()
	roomShots(t, first, "turn-over")
	noJSONInMessages(t, first)
	noJSONInMessages(t, second)
}
