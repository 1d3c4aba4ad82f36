package stock

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestGroupCommit makes the batching observable: with Redis paused, the
// first attempt is in flight and the others queue behind it; on resume they
// all go as ONE more script call, each with its own answer.
func TestGroupCommit(t *testing.T) {
	s, srv := openReal(t, Options{MaxBatch: 16})
	const product, n = "gc", 40
	warm(t, s, product, 30, 1)
	calls0, _ := s.Stats()

	srv.Pause()
	var wg sync.WaitGroup
	outs := make([]Outcome, n)
	errs := make([]error, n)
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Users repeat (i%35): five attempts hit the limit of 1.
			outs[i], errs[i] = s.Deduct(context.Background(), attempt(product, "u"+strconv.Itoa(i%35), 1, 1))
		}()
	}
	start(0)
	p := s.product(product)
	waitFor(t, func() bool { c, _ := s.Stats(); return c == calls0+1 }) // the leader is in flight
	for i := 1; i < n; i++ {
		start(i)
	}
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) == n-1
	})
	srv.Resume()
	wg.Wait()

	codes := map[Code]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("attempt %d: %v", i, errs[i])
		}
		codes[outs[i].Code]++
	}
	// 39 queued attempts, MaxBatch 16: batches of 16, 16, 7 after the first.
	if calls, _ := s.Stats(); calls-calls0 != 4 {
		t.Errorf("%d script calls for %d attempts, want 4", calls-calls0, n)
	}
	if codes[OK] != 30 || codes[LimitReached]+codes[SoldOut] != 10 {
		t.Errorf("codes %v, want 30 OK and 10 rejected", codes)
	}
	if r := remaining(t, s, product); r != 0 {
		t.Errorf("remaining %d", r)
	}
}

// waitFor polls a condition (never a fixed sleep) for up to 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDeductAllocs guards the hot path's allocations: what remains is
// rueidis' reply array (one per script call) and, per successful attempt,
// the outbox entry id string rueidis reads (Outcome.OutboxID).
func TestDeductAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	s, _ := openReal(t, Options{})
	warm(t, s, "al", 1<<40, 1<<30)
	for name, deduct := range map[string]func(context.Context, Attempt) (Outcome, error){
		"Deduct": s.Deduct, "DeductDirect": s.DeductDirect,
	} {
		// Built up front: a fresh token per attempt, and the test's own
		// string building is not counted.
		as := make([]Attempt, 102)
		for i := range as {
			as[i] = attempt("al", "u"+strconv.Itoa(i), 1, 1<<30)
		}
		i := 0
		next := func() {
			out, err := deduct(context.Background(), as[i])
			i++
			if err != nil || out.Code != OK {
				t.Fatal(out, err)
			}
		}
		n := testing.AllocsPerRun(100, next)
		t.Logf("%s: %v allocs per attempt", name, n)
		if n > 2 {
			t.Errorf("%s: %v allocs per attempt, want <= 2", name, n)
		}
	}
}
