package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestWaitingRoomScenarioFileAndQuick(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := loadScenario(resolveScenario(root, "waitingroom"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := sc.WaitingRoom
	if w == nil || w.Edges != 2 || w.PreJoins != 10000 || w.PreOver != 30*time.Second || w.PostJoins != 2000 || w.PostOver != time.Second {
		t.Fatalf("waiting_room %+v: want 2 edges, 10,000 over 30 s, 2,000 over 1 s", w)
	}
	if w.admissionLasts() < 30*time.Second || sc.Stock >= w.shoppers() {
		t.Errorf("admission lasts %v, stock %d for %d shoppers: want >= 30 s and stock smaller than the crowd", w.admissionLasts(), sc.Stock, w.shoppers())
	}
	if lasts := time.Duration(float64(sc.Stock) / float64(w.AdmitPerMinute) * float64(time.Minute)); lasts < w.RateSkip+w.RateWindow {
		t.Errorf("the stock is all admitted after %v, before the rate window ends (%v)", lasts, w.RateSkip+w.RateWindow)
	}
	q, err := loadScenario(resolveScenario(root, "waitingroom"), append(sc.quickSets(), "waiting_room.early=0.5"))
	if err != nil {
		t.Fatal(err)
	}
	if qw := q.WaitingRoom; qw.PreJoins != 1000 || qw.PostJoins != 200 || q.Users != 1200 || qw.Early != 0.5 || qw.Edges != 2 {
		t.Errorf("quick: %+v users %d: want 1,000 + 200 shoppers, the -set early 0.5 over it", qw, q.Users)
	}
}

func TestWaitingRoomScenarioErrors(t *testing.T) {
	base := "users: 100\nproducts: 1\nstock: 10\nwaiting_room:\n  pre_joins: 50\n  post_joins: 10\n  admit_per_minute: 600\n"
	if _, err := parseScenario([]byte(base), "x.yaml", nil); err != nil {
		t.Fatalf("the base is valid (no steps, no rate needed): %v", err)
	}
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"two products", strings.Replace(base, "products: 1", "products: 2", 1), []string{"products", "one sale"}},
		{"too few users", strings.Replace(base, "users: 100", "users: 59", 1), []string{"users", "60"}},
		{"no rate", strings.Replace(base, "admit_per_minute: 600", "admit_per_minute: 0", 1), []string{"waiting_room.admit_per_minute"}},
		{"bad order", base + "  order: random\n", []string{"waiting_room.order", "random"}},
		{"polls backwards", base + "  poll_min: 3s\n  poll_max: 1s\n", []string{"waiting_room.poll_min"}},
		{"early share", base + "  early: 2\n", []string{"waiting_room.early"}},
		{"nobody", strings.NewReplacer("pre_joins: 50", "pre_joins: 0", "post_joins: 10", "post_joins: 0").Replace(base), []string{"waiting_room.pre_joins"}},
	} {
		_, err := parseScenario([]byte(tc.yaml), "x.yaml", nil)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, s)
			}
		}
	}
}

// testRun is a played run made up: 2 edges, 600/min, opened at opens.
func testRun(opens time.Time) *wrRun {
	sc := &Scenario{Products: 1, Stock: 100, WaitingRoom: &Room{Edges: 2, PreJoins: 1000, AdmitPerMinute: 600,
		RateSkip: 2 * time.Second, RateWindow: 30 * time.Second}}
	return &wrRun{sc: sc, w: sc.WaitingRoom, product: "p1", addrs: []string{"a", "b"}, opens: opens}
}

func TestWaitingRoomFigures(t *testing.T) {
	opens := time.Unix(1_700_000_000, 0)
	r := testRun(opens)
	// Edge 1's admin shows exactly 10/s; edge 2's 5 % fewer.
	var samples [2][]AdmitSample
	for i := 0; i <= 80; i++ {
		ts := float64(i) / 2
		samples[0] = append(samples[0], AdmitSample{T: ts, Admitted: int64(10 * ts)})
		samples[1] = append(samples[1], AdmitSample{T: ts, Admitted: int64(9.5 * ts)})
	}
	// 1,000 pre-queue shoppers, positions a fixed shuffle; each admitted
	// on schedule (position p at p/10 s) but number 600, admitted at 35 s
	// (N = 350; after the rate window): ahead of N(t) by more than a
	// second's worth.
	perm := []int64{}
	for i := range 1000 {
		perm = append(perm, int64((i*7919)%1000+1))
	}
	for i := range 1000 {
		s := wrShopper{idx: i, edge: i % 2, pre: true, joinStatus: "prequeue", position: perm[i], outcome: "bought"}
		s.admittedPos = s.position
		s.admittedAt = opens.Add(time.Duration(float64(s.position) / 10 * float64(time.Second)))
		if s.position == 600 {
			s.admittedAt = opens.Add(35 * time.Second)
		}
		if i < 20 {
			s.earlyAnswer = "NOT_ADMITTED"
		}
		r.shoppers = append(r.shoppers, s)
	}
	r.shoppers[3].earlyAnswer, r.shoppers[3].earlyBought = "OK", true
	// 20 after the opening, FIFO places after the pre-queue, not admitted.
	for k := range 20 {
		r.shoppers = append(r.shoppers, wrShopper{idx: 1000 + k, edge: k % 2, joinStatus: "waiting", position: int64(1001 + k), outcome: "closed"})
	}
	wr := &RoomResult{JoinStatuses: map[string]int{}, Outcomes: map[string]int{}, EarlyAnswers: map[string]int{}}
	r.figures(wr, samples[:])
	near(t, "edge 1 admission deviation", wr.AdminRate[0].DevPct, 0, 0.01)
	near(t, "edge 2 admission deviation", wr.AdminRate[1].DevPct, -5, 0.01)
	if wr.MaxDevPct == nil {
		t.Fatal("no worst deviation")
	}
	near(t, "worst deviation", *wr.MaxDevPct, 5, 0.01)
	if wr.AheadOfSchedule != 1 || wr.EarlySucceeded != 1 || wr.OutOfTurn != 2 || wr.EarlyTries != 20 || wr.EarlyAnswers["NOT_ADMITTED"] != 19 {
		t.Errorf("out of turn %+v: want 1 ahead of schedule + 1 early success, 19 early refusals", wr)
	}
	// The front each edge's shoppers saw moves at ~600/min.
	for _, er := range wr.FrontRate {
		if math.Abs(er.DevPct) > 2 {
			t.Errorf("edge %d's shoppers saw admission at %.0f/min (%+.1f%%), want ~600", er.Edge, er.PerMinute, er.DevPct)
		}
	}
	if fa := wr.Fairness; fa.N != 1000 || fa.DF != 81 || math.IsNaN(fa.Spearman) || math.IsNaN(fa.P) || fa.Err != "" {
		t.Errorf("fairness %+v: want 1,000 pre-queue positions, df 81, figures", fa)
	}
	if wr.Fairness.PostN != 20 || wr.Fairness.PostSpearman != 1 {
		t.Errorf("after the opening: %d shoppers, spearman %v; want 20 in FIFO order (1)", wr.Fairness.PostN, wr.Fairness.PostSpearman)
	}
	if wr.Joined != 1020 || wr.Admitted != 1000 || wr.Outcomes["bought"] != 1000 {
		t.Errorf("counts: joined %d admitted %d outcomes %v", wr.Joined, wr.Admitted, wr.Outcomes)
	}
	if _, err := json.Marshal(wr); err != nil {
		t.Errorf("result.json: %v", err)
	}
	// A FIFO pre-queue fails the fairness test.
	for i := range 1000 {
		r.shoppers[i].position = int64(i + 1)
	}
	r.figures(wr, samples[:])
	if fa := wr.Fairness; fa.Spearman < 0.99 || fa.P > 1e-9 {
		t.Errorf("FIFO: spearman %.3f p %.3g, want 1 and ~0", fa.Spearman, fa.P)
	}
	// Readings missing around the window's end: no figure, said so.
	r.figures(wr, [][]AdmitSample{samples[0][:10], samples[1]})
	r.shoppers = r.shoppers[:50] // too few for the fairness test: said, and still JSON
	r.figures(wr, [][]AdmitSample{samples[0][:10], samples[1]})
	if _, err := json.Marshal(wr); err != nil || wr.Fairness.Err == "" {
		t.Errorf("50 shoppers: fairness %+v, json error %v: want the test refused in words", wr.Fairness, err)
	}
	if wr.AdminRate[0].Err == "" || wr.MaxDevPct != nil {
		t.Errorf("missing readings: %+v max dev %v, want an error and no figure", wr.AdminRate[0], wr.MaxDevPct)
	}
}

// TestCheckLotteryAgainstAStandInEdge serves a published key, its commit
// and a ranked list over loopback (a stand-in for the edge's two calls:
// this tests bench's check, not the edge) and checks a list in the key's
// order is reproduced and one with two tickets swapped is not.
func TestCheckLotteryAgainstAStandInEdge(t *testing.T) {
	key, _ := hex.DecodeString("6b65792d6f662d7468652d6c6f7474657279")
	commit := sha256.Sum256(key)
	var tickets []string
	for i := range 50 {
		tickets = append(tickets, fmt.Sprintf("t%03d", i))
	}
	mac := func(id string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id))
		return string(m.Sum(nil))
	}
	sort.Slice(tickets, func(a, b int) bool { return mac(tickets[a]) < mac(tickets[b]) })
	served := append([]string(nil), tickets...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/seckill/queue/lottery", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"commit": hex.EncodeToString(commit[:]), "key": hex.EncodeToString(key), "members": 50})
	})
	mux.HandleFunc("/admin/waitroom/lottery", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"productId": "p1", "ranking": served})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	r := testRun(time.Now())
	r.addrs, r.admins = []string{ln.Addr().String()}, []string{ln.Addr().String()}
	for i, id := range tickets {
		r.shoppers = append(r.shoppers, wrShopper{idx: i, pre: true, joinStatus: "prequeue", ticketID: id, position: int64(i + 1)})
	}
	if l := r.checkLottery(); !l.Reproduced || !l.CommitOK || !l.OrderOK || l.PositionsOK != 50 || l.Err != "" {
		t.Fatalf("the key's order: %+v, want reproduced", l)
	}
	served[3], served[4] = served[4], served[3]
	if l := r.checkLottery(); l.Reproduced || l.OrderOK || !l.CommitOK {
		t.Errorf("two tickets swapped: %+v, want the order refused", l)
	}
}

func TestTicketIDReadsTheIDOfATicket(t *testing.T) {
	raw := []byte{1, 0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3}
	raw = append(raw, make([]byte, 8+8+16)...)
	if got := ticketID(base64.RawURLEncoding.EncodeToString(raw)); got != "deadbeef00010203" {
		t.Errorf("ticketID = %q, want deadbeef00010203", got)
	}
	if got := ticketID("not a ticket!"); got != "" {
		t.Errorf("ticketID of junk = %q, want empty", got)
	}
}
