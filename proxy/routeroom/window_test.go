package routeroom

import (
	"math"
	"testing"
	"time"

	"flashgate/metrics"
	"flashgate/orders/stock"
)

func TestWindowLastMinute(t *testing.T) {
	w := newWindow()
	h := metrics.NewHistogram(waitBounds)
	if s := w.stats(); s.AbandonRate != -1 || s.WaitAvgS != -1 || s.WaitP90S != -1 || s.AdmittedPerMin != 0 {
		t.Fatalf("empty window: %+v", s)
	}
	// 10 let in and 1 abandoned a second, for 90 s; the visitors this
	// edge let in waited 2 s each, then (from 60 s on) 20 s each.
	info := stock.RouteRoomInfo{}
	for sec := int64(0); sec <= 90; sec++ {
		if sec > 0 {
			info.Admitted += 10
			info.Abandoned++
			wait := 2 * time.Second
			if sec > 60 {
				wait = 20 * time.Second
			}
			for range 10 {
				h.Observe(wait)
			}
		}
		w.add(1_000_000+sec*1000, &info, h)
		// A second reading within the second changes nothing.
		w.add(1_000_000+sec*1000+500, &stock.RouteRoomInfo{Admitted: 1 << 40}, h)
	}
	s := w.stats()
	if s.AdmittedPerMin != 600 {
		t.Errorf("admitted per minute %v, want 600", s.AdmittedPerMin)
	}
	if want := 1.0 / 11; math.Abs(s.AbandonRate-want) > 1e-9 {
		t.Errorf("abandon rate %v, want %v", s.AbandonRate, want)
	}
	// The last minute: 30 s of 2 s waits, 30 s of 20 s waits.
	if math.Abs(s.WaitAvgS-11) > 1e-9 {
		t.Errorf("average wait %v s, want 11 (the last minute's, not the first 2 s ones)", s.WaitAvgS)
	}
	if s.WaitP90S <= 15 || s.WaitP90S > 30 {
		t.Errorf("p90 wait %v s, want in the (15, 30] bucket", s.WaitP90S)
	}
}

func TestWindowScalesAShortSpan(t *testing.T) {
	w := newWindow()
	h := metrics.NewHistogram(waitBounds)
	w.add(0, &stock.RouteRoomInfo{}, h)
	w.add(10_000, &stock.RouteRoomInfo{Admitted: 50, Abandoned: 50}, h)
	if s := w.stats(); s.AdmittedPerMin != 300 || s.AbandonRate != 0.5 || s.WaitAvgS != -1 {
		t.Errorf("10 s of 50 let in and 50 gone: %+v, want 300/min, 0.5, no wait", s)
	}
}

func TestWindowAddAllocs(t *testing.T) {
	w := newWindow()
	h := metrics.NewHistogram(waitBounds)
	info := stock.RouteRoomInfo{}
	now := int64(0)
	if n := testing.AllocsPerRun(200, func() {
		now += 1000
		info.Admitted += 3
		h.Observe(time.Second)
		w.add(now, &info, h)
		_ = w.stats()
	}); n != 0 {
		t.Errorf("window.add allocates %v times, want none", n)
	}
}
