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

// One product's failures open that product's breaker only: the others keep
// calling Redis, and the half-open probe is the failing product's own call.
func TestBreakersArePerProduct(t *testing.T) {
	now := time.Unix(1000, 0)
	var changes []string
	bs := NewBreakers(3, 5*time.Second, func() time.Time { return now }, func(product string, from, to BreakerState) {
		changes = append(changes, product+":"+from.String()+">"+to.String())
	})
	a, b := bs.For("a"), bs.For("b")
	if bs.For("a") != a {
		t.Fatal("a second For made a second breaker for the same product")
	}
	for range 3 {
		if ok, _ := a.Admit(); !ok {
			t.Fatal("closed breaker refused")
		}
		a.Failure()
		if ok, _ := b.Admit(); !ok {
			t.Fatal("b refused while only a failed")
		}
		b.Success()
	}
	if bs.State("a") != Open || bs.State("b") != Closed {
		t.Fatalf("states a=%v b=%v after a's 3 failures, want open and closed", bs.State("a"), bs.State("b"))
	}
	if ok, _ := a.Admit(); ok {
		t.Fatal("a admitted while open")
	}
	if bs.Worst() != Open {
		t.Fatalf("edge summary %v with a open", bs.Worst())
	}

	now = now.Add(5 * time.Second)
	// b's calls go on and are never a's probe.
	if ok, probe := b.Admit(); !ok || probe {
		t.Fatalf("b: Admit = %v, %v while a is due a probe, want true, false", ok, probe)
	}
	ok, probe := a.Admit()
	if !ok || !probe {
		t.Fatalf("a after open_for: Admit = %v, %v, want its probe", ok, probe)
	}
	if ok, _ := a.Admit(); ok {
		t.Fatal("a second probe for a while the first is out")
	}
	if bs.State("a") != HalfOpen || bs.Worst() != HalfOpen {
		t.Fatalf("a %v, summary %v during the probe, want half_open", bs.State("a"), bs.Worst())
	}
	a.Success()
	if bs.State("a") != Closed || bs.Worst() != Closed {
		t.Fatalf("a %v, summary %v after its probe succeeded", bs.State("a"), bs.Worst())
	}
	want := []string{"a:closed>open", "a:open>half_open", "a:half_open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
	if bs.AllTransitions() != 3 || bs.Transitions("a") != 3 || bs.Transitions("b") != 0 {
		t.Fatalf("transitions: all %d, a %d, b %d; want 3, 3, 0", bs.AllTransitions(), bs.Transitions("a"), bs.Transitions("b"))
	}
}

// Reading a product's state (metrics, dashboard) makes no breaker: only
// the handler, after the product check, does.
func TestBreakersStateMakesNone(t *testing.T) {
	bs := NewBreakers(1, time.Second, nil, nil)
	if bs.State("nope") != Closed || bs.Transitions("nope") != 0 || bs.Worst() != Closed {
		t.Fatal("an unknown product's breaker is not closed")
	}
	if n := len(*bs.m.Load()); n != 0 {
		t.Fatalf("%d breakers after reading states, want none", n)
	}
}

// The purchase path's breaker work: a lookup of the product's breaker, its
// admission and its verdict, through every state. Lock-free in the closed
// state (atomics and a map read), allocation-free in all of them.
func TestBreakersAllocs(t *testing.T) {
	now := time.Unix(1000, 0)
	bs := NewBreakers(2, time.Second, func() time.Time { return now }, nil)
	products := []string{"a", "b", "c"}
	for _, p := range products {
		bs.For(p) // made once, off the measured path
	}
	i := 0
	cycle := func() {
		i++
		b := bs.For(products[i%len(products)])
		for range 2 { // closed: two failed calls open it
			if ok, _ := b.Admit(); ok {
				b.Failure()
			}
		}
		if ok, _ := b.Admit(); ok {
			t.Fatal("open breaker admitted")
		}
		now = now.Add(time.Second)
		if _, probe := b.Admit(); probe {
			b.Abstain() // the probe's call said nothing about Redis
		}
		if _, probe := b.Admit(); probe {
			b.Success() // the next probe closes it
		}
	}
	cycle()
	if bs.AllTransitions() != 3 || bs.State("b") != Closed {
		t.Fatalf("a cycle made %d transitions, ended %v; want 3 (open, half-open, closed), closed", bs.AllTransitions(), bs.State("b"))
	}
	if n := testing.AllocsPerRun(1000, cycle); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
