package stock

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestRoomPlaceRestoresForgottenShopper: a shopper the room no longer
// knows (Redis forgot the line) who presents a ticket with a place is put
// back at that place; a new join is then numbered past the most tickets
// the edge saw given; without a held place she stays unknown.
func TestRoomPlaceRestoresForgottenShopper(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	now := time.Now().UnixMilli()
	// A line far behind: rate 1 a minute from now, nobody admitted yet.
	rs := RoomSale{Product: "rr1", StartMs: now, RatePerMinute: 1, ExpireAtMs: now + time.Hour.Milliseconds()}
	id := func(i int) string { return "0000000000000000000000" + strconv.Itoa(10+i) }
	for i := range 5 {
		a, err := s.RoomJoin(ctx, rs, Join{User: "u" + strconv.Itoa(i), ID: id(i), NowMs: now})
		if err != nil || a.Place.Place != int64(i+1) {
			t.Fatalf("join %d: %+v %v", i, a, err)
		}
	}
	// Redis forgets the line (a restart empty).
	if err := s.c.Do(ctx, s.c.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ask := PlaceAsk{User: "u3", ID: id(3), NowMs: now}
	if p, err := s.RoomPlace(ctx, rs, ask); err != nil || p.Found {
		t.Fatalf("a forgotten shopper without a held place: %+v %v, want not found", p, err)
	}
	ask.Held, ask.Seen = 4, 5
	p, err := s.RoomPlace(ctx, rs, ask)
	if err != nil || !p.Found || p.Place != 4 {
		t.Fatalf("a forgotten shopper holding place 4: %+v %v, want found at 4", p, err)
	}
	// Asked again: the same place, nothing given twice.
	if p, err = s.RoomPlace(ctx, rs, ask); err != nil || p.Place != 4 {
		t.Fatalf("asked again: %+v %v", p, err)
	}
	a, err := s.RoomJoin(ctx, rs, Join{User: "new", ID: id(9), NowMs: now})
	if err != nil || a.Place.Place != 6 {
		t.Fatalf("a newcomer after the restore: %+v %v, want place 6 (after the 5 the edge saw given)", a, err)
	}
	// Another shopper's ticket id is not hers to take over.
	if p, err := s.RoomPlace(ctx, rs, PlaceAsk{User: "u3", ID: id(1), NowMs: now, Held: 2, Seen: 5}); err != nil || !p.Mismatch {
		t.Fatalf("a ticket id that is not the shopper's: %+v %v, want a mismatch", p, err)
	}
}
