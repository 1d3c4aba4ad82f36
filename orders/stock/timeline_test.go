package stock

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// The timeline keeps binary records by second, trims to TimelineMax and
// expires; both servers take it.
func TestTimelineAppendReadTrim(t *testing.T) {
	onBothServers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		rec := func(node, sec int) []byte { return []byte(fmt.Sprintf("%d\x00%d\xff\x01", node, sec)) }
		for sec := 100; sec < 110; sec++ {
			for node := 1; node <= 2; node++ {
				if err := s.AppendTimeline(ctx, "tl1", int64(sec), rec(node, sec)); err != nil {
					t.Fatal(err)
				}
			}
		}
		all, err := s.Timeline(ctx, "tl1", 0)
		if err != nil || len(all) != 20 {
			t.Fatalf("timeline: %d records, %v", len(all), err)
		}
		if !bytes.Equal(all[0], rec(1, 100)) && !bytes.Equal(all[0], rec(2, 100)) {
			t.Fatalf("oldest first, bytes kept: %q", all[0])
		}
		from, err := s.Timeline(ctx, "tl1", 108)
		if err != nil || len(from) != 4 {
			t.Fatalf("from 108: %d records, %v", len(from), err)
		}
		ttl, err := s.c.Do(ctx, s.c.B().Ttl().Key(TimelineKey("tl1")).Build()).AsInt64()
		if err != nil || ttl <= 0 || ttl > int64(TimelineTTL/time.Second) {
			t.Fatalf("ttl %d %v", ttl, err)
		}
		if _, err := s.Timeline(ctx, "bad}id", 0); err == nil {
			t.Fatal("a bad product id was read")
		}
	})
}

// TestTimelineBounded: past TimelineMax records the oldest go.
func TestTimelineBounded(t *testing.T) {
	s, _ := openReal(t, Options{})
	ctx := context.Background()
	key := TimelineKey("tl2")
	// Fill to the bound in one call, then append two more through the API.
	args := s.c.B().Zadd().Key(key).ScoreMember()
	for i := range TimelineMax {
		args = args.ScoreMember(float64(i), fmt.Sprint(i))
	}
	if err := s.c.Do(ctx, args.Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, sec := range []int64{TimelineMax, TimelineMax + 1} {
		if err := s.AppendTimeline(ctx, "tl2", sec, []byte(fmt.Sprint(sec))); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.c.Do(ctx, s.c.B().Zcard().Key(key).Build()).AsInt64()
	if err != nil || n != TimelineMax {
		t.Fatalf("%d records, want %d", n, TimelineMax)
	}
	first, _ := s.Timeline(ctx, "tl2", 0)
	if string(first[0]) != "2" || string(first[len(first)-1]) != fmt.Sprint(TimelineMax+1) {
		t.Fatalf("kept %s..%s, want 2..%d", first[0], first[len(first)-1], TimelineMax+1)
	}
}
