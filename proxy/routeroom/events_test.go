package routeroom

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/sale/room"
)

// visitorAt is one browser at the room: its cookie, kept across calls.
type visitorAt struct{ cookie string }

func (v *visitorAt) gate(rm *Room, nowMs int64, hdr ...string) (*fasthttp.RequestCtx, bool) {
	if v.cookie != "" {
		hdr = append(hdr, "Cookie", CookiePrefix+rm.Name()+"="+v.cookie)
	}
	ctx := reqCtx("/shop/x", hdr...)
	visit, ok := rm.Gate(ctx, netip.Addr{}, nowMs)
	if ok {
		rm.Finish(ctx, &visit)
	}
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(CookiePrefix + rm.Name())
	if ctx.Response.Header.Cookie(c) {
		v.cookie = string(c.Value())
	}
	return ctx, ok
}

func (v *visitorAt) id(t *testing.T, rm *Room, nowMs int64) room.ID {
	id, _, err := rm.tickets.Check([]byte(v.cookie), visitorUser, rm.name, nowMs)
	if err != nil {
		t.Fatalf("ticket: %v", err)
	}
	return id
}

// TestEventPrequeueShuffle: a scheduled event holds everyone in its
// pre-queue (the admitted too), answers prequeue with the wait until the
// start, and at the start lets them in in the lottery's order (their ids'
// scores), ahead of anyone who came after the start; the event's max_active
// replaces the room's while it runs, and the room's returns after the end.
func TestEventPrequeueShuffle(t *testing.T) {
	st := stocktest.Open(t, redistest.Start(t))
	t0 := time.UnixMilli(1_900_000_000_000)
	// Poll 1s: the late arrival's JSON request near the head is held that long.
	c := conf.RouteRoomConfig{Name: "shop", MaxActive: 1, Session: time.Minute, Poll: time.Second, Events: []conf.RoomEventConfig{
		{Name: "launch", Prequeue: "+10s", Start: "+20s", End: "+60s", MaxActive: 3}}}
	rm, err := New(c.WithDefaults(), Options{Secrets: testSecrets, Store: st, Start: t0})
	if err != nil {
		t.Fatal(err)
	}
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	a := &visitorAt{}
	if _, ok := a.gate(rm, ms(5*time.Second)); !ok {
		t.Fatal("before the event: the first visitor is not let in")
	}
	pre := make([]*visitorAt, 4)
	for i := range pre {
		pre[i] = &visitorAt{}
		ctx, ok := pre[i].gate(rm, ms(12*time.Second), "Accept", "application/json")
		if body := string(ctx.Response.Body()); ok || !strings.Contains(body, `"status":"prequeue","place":0`) || !strings.Contains(body, `"etaMs":8000`) {
			t.Fatalf("pre-queue answer: %v %s", ok, body)
		}
	}
	if ctx, ok := a.gate(rm, ms(13*time.Second)); ok || !strings.Contains(string(ctx.Response.Body()), `data-status="prequeue"`) {
		t.Fatalf("the pre-queue let an admitted visitor through: %v %s", ok, ctx.Response.Body())
	}
	// After the start, in the lottery's order: a holds one of the event's 3
	// seats, so the two best-scored pre-queue visitors are let in.
	byScore := slices.Clone(pre)
	slices.SortFunc(byScore, func(x, y *visitorAt) int {
		ix, iy := x.id(t, rm, ms(20*time.Second)), y.id(t, rm, ms(20*time.Second))
		sx, sy := room.Score(*rm.live.lkey.Load(), ix.AppendHex(nil)), room.Score(*rm.live.lkey.Load(), iy.AppendHex(nil))
		switch {
		case sx < sy:
			return -1
		case sx > sy:
			return 1
		}
		return 0
	})
	late := &visitorAt{}
	if _, ok := late.gate(rm, ms(20*time.Second)); ok {
		t.Fatal("a late arrival went ahead of the pre-queue")
	}
	for i := len(byScore) - 1; i >= 0; i-- { // the worst first: the order is the queue's, not the calls'
		_, ok := byScore[i].gate(rm, ms(21*time.Second))
		if want := i < 2; ok != want {
			t.Errorf("pre-queue visitor ranked %d: let in %v, want %v", i+1, ok, want)
		}
	}
	ctx, _ := late.gate(rm, ms(21*time.Second), "Accept", "application/json")
	if !strings.Contains(string(ctx.Response.Body()), `"place":3`) {
		t.Errorf("the late arrival's place: %s", ctx.Response.Body())
	}
	// After the end the room's cap (1) is back: nobody new while 3 are active.
	if _, ok := (&visitorAt{}).gate(rm, ms(61*time.Second)); ok {
		t.Error("after the event the room's cap does not hold")
	}
}
