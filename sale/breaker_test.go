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
