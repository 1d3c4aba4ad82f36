package sale

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/internal/syncbuf"
	"flashgate/sale/api"
)

// TestRoomFIFOPrequeueJoinHasPlace (issue 28, item 7): a fifo room's join
// before the opening answers prequeue with its real place and estimate
// (it answered waiting with position 0); the first joins after the start,
// before any edge counted the opening, answer their real place and
// estimate too (they answered position 0, etaMs 0).
func TestRoomFIFOPrequeueJoinHasPlace(t *testing.T) {
	r := newRoomRig(t, redistest.Start(t), 1, conf.RoomConfig{AdmitPerMinute: 60, Order: "fifo"})
	for i := 1; i <= 2; i++ {
		a := r.join(0, "f"+strconv.Itoa(i))
		// place i is let in at start + i s; now is start - 30 s.
		if a.str("status") != "prequeue" || a.num("position") != int64(i) || a.num("etaMs") != 30_000+int64(i)*1000 {
			t.Fatalf("pre-queue join %d: %s", i, a.raw)
		}
	}
	poll := r.call(0, api.EndpointQueue, "f1", roomProduct, r.join(0, "f1").cookie, nil)
	if poll.str("status") != "prequeue" || poll.num("position") != 1 {
		t.Fatalf("pre-queue poll: %s", poll.raw)
	}
	r.nowMs.Store(r.start + 100) // no edge has tended the opening yet
	a := r.join(0, "f3")
	if a.str("status") != "waiting" || a.num("position") != 3 || a.num("etaMs") != 2_900 {
		t.Fatalf("first join after the start: %s", a.raw)
	}
}

// TestRoomLotteryFirstJoinsAfterOpening (issue 28, item 7): at the opening,
// before any edge drew the lottery, a pre-queue member asking for their
// place gets it (the edge draws, or waits for the edge drawing), not
// waiting/position 0/etaMs 0; a late arrival comes after the pre-queue.
func TestRoomLotteryFirstJoinsAfterOpening(t *testing.T) {
	r := newRoomRig(t, redistest.Start(t), 2, conf.RoomConfig{AdmitPerMinute: 60})
	r.tend()
	for i := 0; i < 5; i++ {
		r.join(i%2, "p"+strconv.Itoa(i))
	}
	r.nowMs.Store(r.start + 1)
	places := map[int64]bool{}
	for i := 0; i < 5; i++ {
		a := r.join(1, "p"+strconv.Itoa(i))
		p := a.num("position")
		if a.str("status") != "waiting" && a.str("status") != "admitted" || p < 1 || p > 5 || places[p] {
			t.Fatalf("member %d right after the opening: %s", i, a.raw)
		}
		if a.str("status") == "waiting" && a.num("etaMs") <= 0 {
			t.Fatalf("member %d without an estimate: %s", i, a.raw)
		}
		places[p] = true
	}
	if late := r.join(0, "late"); late.num("position") != 6 {
		t.Fatalf("late arrival: %s", late.raw)
	}
}

// TestRoomFIFOShowsNoLottery (issue 28, item 7): a fifo room publishes no
// lottery commit or key, before or after the opening.
func TestRoomFIFOShowsNoLottery(t *testing.T) {
	r := newRoomRig(t, redistest.Start(t), 1, conf.RoomConfig{AdmitPerMinute: 60, Order: "fifo"})
	r.tend()
	r.join(0, "x1")
	for _, at := range []int64{r.start - 1000, r.start + 1000} {
		r.nowMs.Store(at)
		r.tend()
		lot := r.call(0, api.EndpointLottery, "", roomProduct, "", nil)
		if lot.code != 200 || lot.body["commit"] != nil || lot.body["key"] != nil || lot.str("order") != "fifo" {
			t.Fatalf("fifo room's lottery at %d: %s", at-r.start, lot.raw)
		}
	}
}

// TestRoomSpentChallengeAgreesWithREADME (issue 28, item 7): the same
// shopper presenting their spent proof again gets their place (a retried
// join whose answer was lost), and README's error table says so; a spent
// proof is BAD_CHALLENGE only for a join that would give a new place.
func TestRoomSpentChallengeAgreesWithREADME(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.Contains(l, "| BAD_CHALLENGE |") {
			row = l
		}
	}
	if !strings.Contains(row, "joining again with their spent proof gets their place") {
		t.Fatalf("README's BAD_CHALLENGE row does not say what the edge does with a spent proof presented again: %q", row)
	}
	r := newRoomRig(t, redistest.Start(t), 1, conf.RoomConfig{AdmitPerMinute: 60, Challenge: conf.RoomChallenge{Difficulty: 4}})
	ch := r.call(0, api.EndpointChallenge, "c1", roomProduct, "", nil)
	body := map[string]string{"challenge": ch.str("challenge"), "nonce": solve(t, ch.str("challenge"), 4)}
	first := r.call(0, api.EndpointJoin, "c1", roomProduct, "", body)
	again := r.call(0, api.EndpointJoin, "c1", roomProduct, "", body)
	if first.code != 200 || again.code != 200 || again.str("ticketId") != first.str("ticketId") {
		t.Fatalf("the same shopper's spent proof: %s then %s", first.raw, again.raw)
	}
}

// TestRoomJoinLogsChallengeRefusal (issue 28, item 7): the join logs why
// the challenge was refused (the reason's fixed text), never the raw
// challenge or nonce the client sent.
func TestRoomJoinLogsChallengeRefusal(t *testing.T) {
	r := newRoomRig(t, redistest.Start(t), 1, conf.RoomConfig{AdmitPerMinute: 60, Challenge: conf.RoomChallenge{Difficulty: 4}})
	var buf syncbuf.Buffer
	r.edges[0].d.Log = slog.New(slog.NewTextHandler(&buf, nil))
	ch := r.call(0, api.EndpointChallenge, "c1", roomProduct, "", nil)
	const evil = "9999999999\nlevel=ERROR"
	a := r.call(0, api.EndpointJoin, "c1", roomProduct, "", map[string]string{"challenge": ch.str("challenge"), "nonce": evil})
	if a.str("code") != "BAD_CHALLENGE" {
		t.Fatalf("bad nonce: %s", a.raw)
	}
	r.call(0, api.EndpointJoin, "c1", roomProduct, "", map[string]string{"challenge": "", "nonce": ""})
	out := buf.String()
	if !strings.Contains(out, "nonce is not 1 to 20 decimal digits") || !strings.Contains(out, "no challenge sent") {
		t.Fatalf("the refusal's reason is not logged: %q", out)
	}
	if strings.Contains(out, ch.str("challenge")) || strings.Contains(out, "9999999999") {
		t.Fatalf("raw client input in the log: %q", out)
	}
}
