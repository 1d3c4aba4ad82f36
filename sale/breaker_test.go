package sale

import (
	"testing"
	"time"
)

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	now := time.Unix(1000, 0)
	var changes []string
	b := NewBreaker(3, 5*time.Second, func() time.Time { return now }, func(from, to BreakerState) {
		changes = append(changes, from.String()+">"+to.String())
	})
	for i := 0; i < 2; i++ {
		if !b.Allow() {
			t.Fatal("closed breaker refused")
		}
		b.Failure()
	}
	b.Success() // a success resets the count
	for i := 0; i < 3; i++ {
		b.Allow()
		b.Failure()
	}
	if b.State() != Open || b.Allow() {
		t.Fatalf("state %v after 3 consecutive failures", b.State())
	}
	now = now.Add(5 * time.Second)
	if !b.Allow() {
		t.Fatal("no probe after open_for")
	}
	if b.Allow() {
		t.Fatal("second concurrent probe allowed")
	}
	b.Failure() // probe failed: open again
	if b.State() != Open || b.Allow() {
		t.Fatalf("state %v after failed probe", b.State())
	}
	now = now.Add(5 * time.Second)
	if !b.Allow() {
		t.Fatal("no second probe")
	}
	b.Success()
	if b.State() != Closed || !b.Allow() {
		t.Fatalf("state %v after successful probe", b.State())
	}
	want := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v", changes)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
}

// A probe whose attempt says nothing about Redis (never sent, or its call's
// failure counted by another attempt) abstains: the next caller probes.
// Without it the breaker would stay half-open with no probe, for good.
func TestBreakerProbeAbstains(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBreaker(1, time.Second, func() time.Time { return now }, nil)
	if ok, probe := b.Admit(); !ok || probe {
		t.Fatalf("closed: Admit = %v, %v, want true, false", ok, probe)
	}
	b.Failure()
	if ok, _ := b.Admit(); ok {
		t.Fatal("open breaker admitted")
	}
	now = now.Add(time.Second)
	if ok, probe := b.Admit(); !ok || !probe {
		t.Fatalf("after open_for: Admit = %v, %v, want the probe", ok, probe)
	}
	if ok, _ := b.Admit(); ok {
		t.Fatal("second probe admitted while the first is out")
	}
	b.Abstain()
	if b.State() != HalfOpen {
		t.Fatalf("state %v after abstaining, want half_open", b.State())
	}
	ok, probe := b.Admit()
	if !ok || !probe {
		t.Fatalf("after the probe abstained: Admit = %v, %v, want a new probe", ok, probe)
	}
	b.Success()
	if b.State() != Closed {
		t.Fatalf("state %v after the probe succeeded", b.State())
	}
}

func TestBreakerAllocs(t *testing.T) {
	b := NewBreaker(1<<30, time.Second, nil, nil)
	if n := testing.AllocsPerRun(1000, func() {
		if ok, _ := b.Admit(); ok {
			b.Failure()
			b.Success()
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
