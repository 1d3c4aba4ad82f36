package routeroom

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/stock"
	"flashgate/sale/room"
)

// TestLotteryKeyPublishedAfterTheDraw: a random room's waiting visitors
// are told the draw's commit and their own id while it runs, never its
// key; once the draw is over (the operator switches to fifo) the edge
// reveals the key: SHA-256 of it is the commit they were shown, and the
// line's order is room.Rank's under it — anyone can check the draw.
func TestLotteryKeyPublishedAfterTheDraw(t *testing.T) {
	st := stocktest.Open(t, redistest.Start(t))
	nowMs := int64(1_900_000_000_000)
	reg := NewRegistry(st, slog.New(slog.DiscardHandler), func() int64 { return nowMs * 1e6 })
	c := conf.RouteRoomConfig{Name: "draw", Method: conf.RoomRandom, AdmitPerMinute: 1, Session: time.Minute}
	rm, err := New(c.WithDefaults(), Options{Secrets: testSecrets, Store: st, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := (&visitorAt{}).gate(rm, nowMs); !ok {
		t.Fatal("the first visitor (the bucket's one) is not let in")
	}
	type answer struct {
		Status, ID, LotteryCommit, LotteryKey string
		Place                                 int64
	}
	ask := func(v *visitorAt) answer {
		t.Helper()
		ctx, ok := v.gate(rm, nowMs, "Accept", "application/json")
		var a answer
		if err := json.Unmarshal(ctx.Response.Body(), &a); ok || err != nil || a.Status != "waiting" {
			t.Fatalf("waiting answer: %v %v %s", ok, err, ctx.Response.Body())
		}
		return a
	}
	vs := make([]*visitorAt, 6)
	for i := range vs {
		vs[i] = &visitorAt{}
		ask(vs[i])
	}
	reg.Tend(context.Background()) // the draw runs: nothing revealed
	byPlace := make([]string, len(vs))
	var commit string
	for _, v := range vs {
		a := ask(v)
		if a.LotteryCommit == "" || a.LotteryKey != "" || a.ID == "" || (commit != "" && a.LotteryCommit != commit) {
			t.Fatalf("during the draw: %+v (commit so far %q)", a, commit)
		}
		commit = a.LotteryCommit
		byPlace[a.Place-1] = a.ID
	}
	if _, err := rm.Info(context.Background(), stock.RouteChange{Method: conf.RoomFIFO}, nowMs); err != nil {
		t.Fatal(err)
	}
	reg.Tend(context.Background()) // the draw is over: the key comes out
	info := reg.Snapshot()["draw"]
	if info.LotteryKey == "" || room.Commit(info.LotteryKey) != commit || info.LotteryCommit != "" {
		t.Fatalf("after the draw: key %q commit %q, want the key of commit %q", info.LotteryKey, info.LotteryCommit, commit)
	}
	ids := slices.Clone(byPlace)
	ranked, err := room.Rank(info.LotteryKey, ids)
	if err != nil || !slices.Equal(ranked, byPlace) {
		t.Fatalf("the line %v is not the revealed key's ranking %v (%v)", byPlace, ranked, err)
	}
	if a := ask(vs[0]); a.LotteryKey != info.LotteryKey {
		t.Errorf("a waiting visitor is not shown the revealed key: %+v", a)
	}
}
