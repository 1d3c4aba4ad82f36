package push

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/stock"
)

// The per-message and per-tick work runs for every waiting stream of the
// edge: once warm, it allocates nothing. (Parsing the message is stock's,
// tested there.)
func TestHotPathsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	d := conf.Defaults()
	st := stocktest.Open(t, redistest.Start(t), stocktest.Timeout(d.Redis.Timeout))
	now := time.Now().UnixNano()
	ev := d.Events
	ev.Heartbeat, ev.Deadline = time.Second, time.Hour
	h, err := New(st, Config{EventsConfig: ev, KeepHijackedConns: true,
		Now:    func() int64 { return now },
		Render: func(b []byte, o stock.OrderInfo) []byte { return append(b, o.State...) }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 50
	for i := range n {
		s, rej := h.Open([]byte("p1"), int64(1000+i), []byte("u"+strconv.Itoa(i)))
		if rej != nil {
			t.Fatal(rej)
		}
		cc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		s.attach(sc)
	}
	ctx := context.Background()
	if a := testing.AllocsPerRun(50, func() {
		now += int64(time.Second) // every stream is due a heartbeat
		h.tick(ctx, now)
	}); a != 0 {
		t.Errorf("a tick with %d heartbeats: %.1f allocations, want 0", n, a)
	}
	if st := h.Stats(); st.Open != n {
		t.Fatalf("streams dropped by heartbeats: %+v", st)
	}
	ids := make([]int64, 500)
	for i := range ids {
		ids[i] = int64(5000 + i) // nobody waits for these
	}
	msg := stock.StateChange{ProductID: "p1", OrderIDs: ids}
	if a := testing.AllocsPerRun(50, func() { h.onSettled(msg) }); a != 0 {
		t.Errorf("a message of 500 ids: %.1f allocations, want 0", a)
	}
}
