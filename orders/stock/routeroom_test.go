package stock

import (
	"context"
	"fmt"
	"testing"
)

func visitorID(i int) string { return fmt.Sprintf("%016x", i) }

func routeRoom(method string, rate, cap int64) RouteRoom {
	return RouteRoom{Name: "shop", Method: method, Rate: rate, Cap: cap, SessionMs: 60_000, AbandonMs: 30_000, TTLMs: 3_600_000}
}

// TestRouteRoomCapFIFO: with max_active 3 the first three visitors are let
// in, the next wait in arrival order; an ended session lets exactly the
// next one in, and a place nobody polls for is given up after abandon.
func TestRouteRoomCapFIFO(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	r := routeRoom("fifo", 0, 3)
	now := int64(1_000_000)
	for i := 1; i <= 3; i++ {
		a, err := s.RouteVisit(ctx, r, visitorID(i), 0, now)
		if err != nil || a.Status != VisitAdmitted || a.UntilMs != now+r.SessionMs {
			t.Fatalf("visitor %d: %+v %v", i, a, err)
		}
	}
	for i := 4; i <= 6; i++ {
		a, err := s.RouteVisit(ctx, r, visitorID(i), 0, now)
		if err != nil || a.Status != VisitWaiting || a.Place != int64(i-3) || a.Active != 3 {
			t.Fatalf("visitor %d: %+v %v", i, a, err)
		}
		// The cap holds them: the seat they wait for frees when the
		// (place)-th session ends.
		if a.SeatMs != r.SessionMs {
			t.Errorf("visitor %d: seat in %d ms, want %d", i, a.SeatMs, r.SessionMs)
		}
	}
	// Visitor 5 polls first: still behind 4.
	if a, _ := s.RouteVisit(ctx, r, visitorID(5), 0, now+1); a.Status != VisitWaiting || a.Place != 2 {
		t.Fatalf("visitor 5 jumped the line: %+v", a)
	}
	if ok, err := s.RouteEnd(ctx, r, visitorID(2), now+2); !ok || err != nil {
		t.Fatalf("end: %v %v", ok, err)
	}
	// The end gave the seat to 4 at once (a reservation, which holds the
	// seat): 5 is next, and still waits.
	if a, _ := s.RouteVisit(ctx, r, visitorID(5), 0, now+2); a.Status != VisitWaiting || a.Place != 1 || a.Active != 3 {
		t.Fatalf("visitor 5 took 4's seat: %+v", a)
	}
	if a, _ := s.RouteVisit(ctx, r, visitorID(4), 0, now+3); a.Status != VisitAdmitted || a.UntilMs != now+3+r.SessionMs {
		t.Fatalf("visitor 4 not let in after a session ended: %+v", a)
	}
	// Renewal: an admitted visitor's session runs on; an ended one is over.
	if u, err := s.RouteRenew(ctx, r, visitorID(1), now+10, now+10+r.SessionMs); err != nil || u != now+10+r.SessionMs {
		t.Fatalf("renew: %d %v", u, err)
	}
	if u, _ := s.RouteRenew(ctx, r, visitorID(2), now+10, now+10+r.SessionMs); u != 0 {
		t.Fatalf("an ended session renewed: %d", u)
	}
	// Visitor 5 stops polling; 6 polls on. After abandon 5 is gone and 6 is
	// next (and let in when a seat frees).
	s.RouteVisit(ctx, r, visitorID(6), 0, now+r.AbandonMs/2)
	later := now + r.AbandonMs + 5
	a, _ := s.RouteVisit(ctx, r, visitorID(6), 0, later)
	if a.Place != 1 || a.Waiting != 1 {
		t.Fatalf("abandoned place kept: %+v", a)
	}
	info, err := s.RouteAdmin(ctx, r, RouteChange{}, later)
	if err != nil || info.Abandoned != 1 || info.Admitted != 4 || info.Ended != 1 || info.Joined != 6 || info.Method != "fifo" || info.Cap != 3 {
		t.Fatalf("info %+v %v", info, err)
	}
}

// TestRouteRoomRate: at 120 a minute the bucket holds two; the third
// waits, and is let in half a second later.
func TestRouteRoomRate(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	r := routeRoom("fifo", 120, 0)
	now := int64(5_000_000)
	for i := 1; i <= 2; i++ {
		if a, err := s.RouteVisit(ctx, r, visitorID(i), 0, now); err != nil || a.Status != VisitAdmitted {
			t.Fatalf("visitor %d: %+v %v", i, a, err)
		}
	}
	a, _ := s.RouteVisit(ctx, r, visitorID(3), 0, now)
	if a.Status != VisitWaiting || a.Place != 1 || a.Credit != 0 || a.Rate != 120 {
		t.Fatalf("third: %+v", a)
	}
	if a, _ := s.RouteVisit(ctx, r, visitorID(3), 0, now+499); a.Status != VisitWaiting {
		t.Fatalf("let in early: %+v", a)
	}
	if a, _ := s.RouteVisit(ctx, r, visitorID(3), 0, now+500); a.Status != VisitAdmitted {
		t.Fatalf("not let in on time: %+v", a)
	}
}

// TestRouteRoomMethods: the operator's method wins over the config's on
// the next call; queue_all admits nobody, passthrough everyone (counted),
// random places by the score, and -1 returns to the config's cap.
func TestRouteRoomMethods(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	r := routeRoom("fifo", 0, 1)
	now := int64(9_000_000)
	if _, err := s.RouteAdmin(ctx, r, RouteChange{Method: "queue_all"}, now); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.RouteVisit(ctx, r, visitorID(1), 0, now); a.Status != VisitWaiting || a.Method != "queue_all" {
		t.Fatalf("queue_all let in: %+v", a)
	}
	s.RouteAdmin(ctx, r, RouteChange{Method: "passthrough"}, now)
	for i := 2; i <= 4; i++ {
		if a, _ := s.RouteVisit(ctx, r, visitorID(i), 0, now); a.Status != VisitPassthrough {
			t.Fatalf("passthrough: %+v", a)
		}
	}
	info, _ := s.RouteAdmin(ctx, r, RouteChange{}, now)
	if info.Overlimit != 3 || info.Active != 3 { // visitor 1 waits; 2 over the cap of 1, 3 and 4 too
		t.Fatalf("passthrough counts: %+v", info)
	}
	cap := int64(10)
	s.RouteAdmin(ctx, r, RouteChange{Method: "random", Cap: &cap}, now)
	// Visitor 1 holds place 1 (fifo score 1); a random score below it goes first.
	if a, _ := s.RouteVisit(ctx, r, visitorID(9), 0.5, now); a.Status != VisitAdmitted {
		t.Fatalf("random with room: %+v", a)
	}
	back := int64(-1)
	info, err := s.RouteAdmin(ctx, r, RouteChange{Cap: &back}, now)
	if err != nil || info.Cap != 1 || info.Method != "random" {
		t.Fatalf("cap back to the config's: %+v %v", info, err)
	}
	bad := int64(-5)
	if _, err := s.RouteAdmin(ctx, r, RouteChange{Rate: &bad}, now); err == nil {
		t.Fatal("a rate of -5 accepted")
	}
}

// TestRouteRoomChallengeSpentOnce: a proof of work places one visitor; the
// same challenge again (another visitor id, as a replaying bot has) is
// refused with nothing written, until it expires.
func TestRouteRoomChallengeSpentOnce(t *testing.T) {
	onBothServers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := routeRoom("fifo", 0, 1)
		now := int64(1_000_000)
		const cid = "AAAAAAAAAAAAAAAA"
		a, err := s.RouteVisitSpending(ctx, r, visitorID(1), 0, now, cid, now+120_000)
		if err != nil || a.Status != VisitAdmitted {
			t.Fatalf("first spend: %+v %v", a, err)
		}
		a, err = s.RouteVisitSpending(ctx, r, visitorID(2), 0, now+1, cid, now+120_000)
		if err != nil || a.Status != VisitReplayed {
			t.Fatalf("replayed: %+v %v, want VisitReplayed", a, err)
		}
		info, err := s.RouteAdmin(ctx, r, RouteChange{}, now+2)
		if err != nil || info.Joined != 1 || info.Waiting != 0 || info.Active != 1 {
			t.Fatalf("the replay wrote something: %+v %v", info, err)
		}
		// Another challenge places the next visitor.
		if a, err := s.RouteVisitSpending(ctx, r, visitorID(2), 0, now+3, "BBBBBBBBBBBBBBBB", now+120_000); err != nil || a.Status != VisitWaiting || a.Place != 1 {
			t.Fatalf("a fresh challenge: %+v %v", a, err)
		}
		if _, err := s.RouteVisitSpending(ctx, r, visitorID(3), 0, now, "bad{id}", now+120_000); err == nil {
			t.Error("a malformed challenge id was sent to Redis")
		}
	})
}

// routeRoomStores: the route room's scripts on a real redis-server and on
// the embedded server.
func routeRoomStores(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("redis", func(t *testing.T) { s, _ := openReal(t, Options{}); f(t, s) })
	t.Run("embedded", func(t *testing.T) { f(t, openEmbedded(t, Options{})) })
}

// TestRouteRoomSeatGoesToNextInLine: a seat the origin frees goes to the
// next in line in the same call (reserved: the room stays full and its
// queue shorter), the reserved visitor's next request starts a session,
// the cap holds exactly, and a reservation nobody claims frees its seat
// after abandon, for the next.
func TestRouteRoomSeatGoesToNextInLine(t *testing.T) {
	routeRoomStores(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := routeRoom("fifo", 0, 2)
		now := int64(5_000_000)
		for i := 1; i <= 5; i++ {
			s.RouteVisit(ctx, r, visitorID(i), 0, now)
		}
		if ok, err := s.RouteEnd(ctx, r, visitorID(1), now+10); !ok || err != nil {
			t.Fatalf("end: %v %v", ok, err)
		}
		info, err := s.RouteAdmin(ctx, r, RouteChange{}, now+10)
		if err != nil || info.Active != 2 || info.Waiting != 2 {
			t.Fatalf("after the end, want 2 seats taken and 2 waiting: %+v %v", info, err)
		}
		if a, _ := s.RouteVisit(ctx, r, visitorID(4), 0, now+15); a.Status != VisitWaiting || a.Place != 1 {
			t.Fatalf("visitor 4 took 3's reserved seat: %+v", a)
		}
		if a, _ := s.RouteVisit(ctx, r, visitorID(3), 0, now+20); a.Status != VisitAdmitted || a.UntilMs != now+20+r.SessionMs {
			t.Fatalf("visitor 3 did not claim the seat: %+v", a)
		}
		if a, _ := s.RouteVisit(ctx, r, visitorID(3), 0, now+25); a.Status != VisitAdmitted || a.UntilMs != now+20+r.SessionMs {
			t.Fatalf("a claimed seat claimed again: %+v", a)
		}
		// 2 ends: 4 is given the seat but never comes back; 5 polls on.
		s.RouteEnd(ctx, r, visitorID(2), now+30)
		s.RouteVisit(ctx, r, visitorID(5), 0, now+30+r.AbandonMs/2)
		if a, _ := s.RouteVisit(ctx, r, visitorID(5), 0, now+31+r.AbandonMs); a.Status != VisitAdmitted {
			t.Fatalf("an unclaimed reservation kept its seat: %+v", a)
		}
		info, _ = s.RouteAdmin(ctx, r, RouteChange{}, now+31+r.AbandonMs)
		if info.Active != 2 || info.Waiting != 0 || info.Admitted != 4 || info.Ended != 2 {
			t.Fatalf("counts: %+v", info)
		}
	})
}

// TestRouteRoomCapETAFromFreeRate: when the origin ends sessions early (one
// every 100 ms, sessions of a minute), a capped place's estimate follows
// the rate seats actually free at, not the sessions' ends.
func TestRouteRoomCapETAFromFreeRate(t *testing.T) {
	routeRoomStores(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := routeRoom("fifo", 0, 10)
		now := int64(7_000_000)
		for i := 1; i <= 40; i++ {
			s.RouteVisit(ctx, r, visitorID(i), 0, now)
		}
		for i := 1; i <= 20; i++ {
			t0 := now + 100*int64(i)
			if ok, err := s.RouteEnd(ctx, r, visitorID(i), t0); !ok || err != nil {
				t.Fatalf("end %d: %v %v", i, ok, err)
			}
			if a, _ := s.RouteVisit(ctx, r, visitorID(10+i), 0, t0); a.Status != VisitAdmitted {
				t.Fatalf("visitor %d: %+v", 10+i, a)
			}
		}
		a, err := s.RouteVisit(ctx, r, visitorID(35), 0, now+2050)
		if err != nil || a.Status != VisitWaiting || a.Place != 5 {
			t.Fatalf("visitor 35: %+v %v", a, err)
		}
		// Five seats at ten a second: about 500 ms.
		if a.SeatMs < 250 || a.SeatMs > 750 {
			t.Fatalf("place 5 estimated %d ms, want about 500", a.SeatMs)
		}
	})
}
