package stock

import (
	"context"
	"strings"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

func ratePlan(t testing.TB, rules ...RateRule) *RatePlan {
	t.Helper()
	p, err := NewRatePlan(rules)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The script on every kind of server the edge runs on: nginx's burst, a
// lease within the delay, a refusal that charges nothing, several rules
// charged only together, and the key's TTL.
func TestTakeRate(t *testing.T) {
	real, _ := openReal(t, Options{})
	c := redistest.NewCluster(t)
	cluster, err := Open(context.Background(), strings.Join(c.Addrs(), ","), testOptions(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
	for name, s := range map[string]*Store{"standalone": real, "cluster": cluster, "embedded": openEmbedded(t, Options{})} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now := int64(1_750_000_000_000)
			// 1r/s burst 5 nodelay: 6 units at once, the 7th refused.
			p := ratePlan(t, RateRule{Zone: "z", Milli: 1000, Burst: 5, Delay: 5})
			a, err := s.TakeRate(ctx, p, "ip:198.51.100.1", 4, now)
			if err != nil || a.Units != 4 || a.Delay != 0 {
				t.Fatalf("lease of 4 = %+v, %v", a, err)
			}
			a, _ = s.TakeRate(ctx, p, "ip:198.51.100.1", 4, now)
			if a.Units != 2 {
				t.Fatalf("second lease = %+v, want the 2 left", a)
			}
			a, _ = s.TakeRate(ctx, p, "ip:198.51.100.1", 1, now+500)
			if a.Units != 0 || a.Wait != 500*time.Millisecond || a.WaitAll != a.Wait || a.Refused != 0 {
				t.Fatalf("over the burst = %+v, want refused for 500ms", a)
			}
			if a, _ = s.TakeRate(ctx, p, "ip:198.51.100.1", 1, now+1000); a.Units != 1 {
				t.Fatalf("a second later = %+v, want one unit back", a)
			}
			// Another client is independent.
			if a, _ = s.TakeRate(ctx, p, "ip:198.51.100.2", 1, now); a.Units != 1 {
				t.Fatalf("other client = %+v", a)
			}

			// Two rules: the second refuses, the first is not charged.
			two := ratePlan(t, RateRule{Zone: "u#0", Milli: 1000, Burst: 2, Delay: 2}, RateRule{Zone: "u#1", Milli: 1000, Burst: 0})
			if a, _ = s.TakeRate(ctx, two, "u:alice", 3, now); a.Units != 1 {
				t.Fatalf("two rules, first = %+v (the burst-0 rule leases nothing)", a)
			}
			a, _ = s.TakeRate(ctx, two, "u:alice", 1, now)
			if a.Units != 0 || a.Refused != 1 || a.Wait != time.Second {
				t.Fatalf("two rules, second = %+v, want refused by rule 1", a)
			}
			// Rule 0 saw one charge only: 2 more fit at the same instant a second later.
			if a, _ = s.TakeRate(ctx, two, "u:alice", 1, now+1000); a.Units != 1 {
				t.Fatalf("two rules, third = %+v", a)
			}
			if a, _ = s.TakeRate(ctx, ratePlan(t, RateRule{Zone: "u#0", Milli: 1000, Burst: 2, Delay: 2}), "u:alice", 5, now+1000); a.Units != 2 {
				t.Fatalf("rule 0 alone = %+v, want 2 left of its burst", a)
			}

			// Without nodelay: the second request is delayed, one unit only.
			slow := ratePlan(t, RateRule{Zone: "d", Milli: 2000, Burst: 3})
			s.TakeRate(ctx, slow, "ip:d", 1, now)
			if a, _ = s.TakeRate(ctx, slow, "ip:d", 5, now); a.Units != 1 || a.Delay != 500*time.Millisecond {
				t.Fatalf("delayed = %+v, want one unit held 500ms", a)
			}

			if _, err := s.TakeRate(ctx, p, "ip:{x}", 1, now); err == nil {
				t.Fatal("a brace in the client was accepted")
			}
			if got := s.RateCalls(); got.Passed < 8 || got.Refused < 2 || got.Failed != 0 {
				t.Fatalf("RateCalls = %+v", got)
			}
		})
	}

	// The key lives until it is idle (plus a second), on the server's clock.
	p := ratePlan(t, RateRule{Zone: "ttl", Milli: 1000, Burst: 5, Delay: 5})
	if a, err := real.TakeRate(context.Background(), p, "ip:ttl", 3, 0); err != nil || a.Units != 3 {
		t.Fatalf("server clock: %+v, %v", a, err)
	}
	ttl, err := real.c.Do(context.Background(), real.c.B().Pttl().Key("sk:rl:{ip:ttl}:ttl").Build()).AsInt64()
	if err != nil || ttl <= 3000 || ttl > 4000 {
		t.Fatalf("PTTL = %d, %v; want 3s to idle + 1s", ttl, err)
	}
}

// Every call is bounded by the store's Timeout: a paused Redis answers an
// error within it, and the call counts as failed.
func TestTakeRateTimeout(t *testing.T) {
	s, srv := openReal(t, Options{Timeout: 100 * time.Millisecond})
	p := ratePlan(t, RateRule{Zone: "z", Milli: 1000, Burst: 1})
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	_, err := s.TakeRate(context.Background(), p, "ip:1", 1, 0)
	if err == nil {
		t.Fatal("a paused Redis answered")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the call took %v with a 100ms budget", took)
	}
	if s.RateCalls().Failed != 1 {
		t.Fatalf("RateCalls = %+v", s.RateCalls())
	}
}

func TestNewRatePlanRefuses(t *testing.T) {
	for _, rules := range [][]RateRule{nil, {{Zone: "", Milli: 1}}, {{Zone: "z", Milli: 0}}, {{Zone: "z", Milli: 1, Burst: -1}}} {
		if _, err := NewRatePlan(rules); err == nil {
			t.Errorf("NewRatePlan(%+v) accepted", rules)
		}
	}
}

// The embedded server's snapshot leaves the rate keys out: like a local
// limiter's zone, they do not outlive the process.
func TestTakeRateNotInEmbeddedSnapshot(t *testing.T) {
	dir := t.TempDir()
	p := ratePlan(t, RateRule{Zone: "z", Milli: 16, Burst: 0})
	for i, want := range []int{1, 1} { // a restart forgets the refusal to come
		s, err := Open(context.Background(), "embedded", testOptions(Options{DataDir: dir}))
		if err != nil {
			t.Fatal(err)
		}
		if a, err := s.TakeRate(context.Background(), p, "u:dave", 1, 0); err != nil || a.Units != want {
			t.Fatalf("open %d: %+v, %v", i+1, a, err)
		}
		if a, _ := s.TakeRate(context.Background(), p, "u:dave", 1, 0); a.Units != 0 {
			t.Fatalf("open %d: the second request at 1r/m passed", i+1)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
