package stock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/internal/await"
)

// TestGroupCommit makes the batching observable: with Redis paused, the
// first attempt is in flight (the first inFlightPerProduct, each its own
// call) and the others queue behind it; on resume the queued ones go as
// MaxBatch-sized script calls, each attempt with its own answer.
func TestGroupCommit(t *testing.T) {
	s, srv := openReal(t, Options{MaxBatch: 16})
	const product, n, k = "gc", 40, inFlightPerProduct
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
	p := s.product(product)
	for i := range k {
		start(i)
		await.Until(t, 10*time.Second, "the condition", func() bool { c, _ := s.Stats(); return c == calls0+uint64(i)+1 }) // in flight
	}
	for i := k; i < n; i++ {
		start(i)
	}
	await.Until(t, 10*time.Second, "the condition", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) == n-k
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
	// With one in flight: 39 queued attempts, MaxBatch 16: batches of 16,
	// 16, 7 after the first.
	if calls, _ := s.Stats(); calls-calls0 != k+(n-k+15)/16 {
		t.Errorf("%d script calls for %d attempts, want %d", calls-calls0, n, k+(n-k+15)/16)
	}
	if codes[OK] != 30 || codes[LimitReached]+codes[SoldOut] != 10 {
		t.Errorf("codes %v, want 30 OK and 10 rejected", codes)
	}
	if r := remaining(t, s, product); r != 0 {
		t.Errorf("remaining %d", r)
	}
}

// TestQueuedBatchGetsItsOwnBudget: attempts that queued behind a slow call
// until their own budget was nearly spent still get Redis's answer, because
// the call that carries them has a full budget from when it is sent. Redis
// holds every command for pause (CLIENT PAUSE from a second connection):
// the first call times out after budget (so does the second one in
// flight, sent later); the batch queued behind them (a quarter budget in)
// goes out then, its oldest attempt with a quarter of its own budget left,
// less than the pause still lasts, and Redis answers it when the pause
// ends, well within a fresh budget.
func TestQueuedBatchGetsItsOwnBudget(t *testing.T) {
	const budget, pause = time.Second, 1600 * time.Millisecond
	s, srv := openReal(t, Options{Timeout: budget})
	const product, n, k = "qb", 20, inFlightPerProduct
	warm(t, s, product, 100, 1)
	mustDeduct(t, s, attempt(product, "warmup", 1, 1)) // loads the script
	calls0, _ := s.Stats()

	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ms := strconv.FormatInt(pause.Milliseconds(), 10)
	if err := admin.Do(context.Background(), admin.B().Arbitrary("CLIENT", "PAUSE", ms, "ALL").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()

	var wg sync.WaitGroup
	outs := make([]Outcome, n)
	errs := make([]error, n)
	start := func(i int) {
		wg.Go(func() { outs[i], errs[i] = s.Deduct(context.Background(), attempt(product, "u"+strconv.Itoa(i), 1, 1)) })
	}
	start(0)
	p := s.product(product)
	await.Until(t, 10*time.Second, "the condition", func() bool { c, _ := s.Stats(); return c == calls0+1 }) // the first call is held
	// Not synchronisation: the queued attempts' budgets must start after
	// the first call's by more than its timer may fire late (or they are
	// dropped unsent with it), and early enough that their own deadlines,
	// the old call deadline, pass before the pause ends.
	time.Sleep(budget / 4)
	for i := 1; i < k; i++ { // the other calls in flight, held too
		start(i)
		await.Until(t, 10*time.Second, "the condition", func() bool { c, _ := s.Stats(); return c == calls0+uint64(i)+1 })
	}
	for i := k; i < n; i++ {
		start(i)
	}
	await.Until(t, 10*time.Second, "the condition", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) == n-k
	})
	// Before the fix the batch inherited its oldest attempt's deadline,
	// queued+budget, which passes before the pause ends.
	t.Logf("%d attempts queued %v after the pause began (pause %v, budget %v)", n-k, time.Since(paused).Round(time.Millisecond), pause, budget)
	wg.Wait()

	for i := range k {
		if !errors.Is(errs[i], ErrUnknown) || !errors.Is(errs[i], ErrCallFailed) {
			t.Fatalf("attempt %d in flight: %v %v, want a timeout (ErrUnknown, ErrCallFailed): the pause did not hold it", i, outs[i], errs[i])
		}
	}
	for i := k; i < n; i++ {
		if errs[i] != nil || outs[i].Code != OK {
			t.Errorf("queued attempt %d: %v %v, want OK", i, outs[i], errs[i])
		}
	}
	if calls, _ := s.Stats(); calls-calls0 != k+1 {
		t.Errorf("%d script calls, want %d (the held ones, then the queued batch)", calls-calls0, k+1)
	}
}

// TestFailedCallMarksOneAttempt: every attempt of a failed call gets an
// unknown outcome, exactly one of them also ErrCallFailed; an attempt
// dropped unsent gets neither. Redis is hung (SIGSTOP); MaxBatch 4 makes
// the queue outlast one call: the first calls in flight (1 attempt each)
// time out after budget, the next ones (4 attempts each, queued half a
// budget in) after another budget, and the attempts still queued have
// spent their own budget by then.
func TestFailedCallMarksOneAttempt(t *testing.T) {
	// Timers fire late on a loaded machine: the queued attempts must be
	// sent when the first calls fail (queued less than a budget before)
	// and dropped when the next ones fail (queued more than a budget
	// before); half a budget of margin either way.
	const budget = 600 * time.Millisecond
	s, srv := openReal(t, Options{Timeout: budget, MaxBatch: 4})
	const product, n, k = "fm", 12, inFlightPerProduct
	warm(t, s, product, 100, 1)
	mustDeduct(t, s, attempt(product, "warmup", 1, 1))
	calls0, _ := s.Stats()

	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := func(i int) {
		wg.Go(func() { _, errs[i] = s.Deduct(context.Background(), attempt(product, "u"+strconv.Itoa(i), 1, 1)) })
	}
	p := s.product(product)
	for i := range k {
		start(i)
		await.Until(t, 10*time.Second, "the condition", func() bool { c, _ := s.Stats(); return c == calls0+uint64(i)+1 })
	}
	// Not synchronisation: queued at once, the first calls' timers firing a
	// moment late would leave the queued attempts no budget at all.
	time.Sleep(budget / 2)
	for i := k; i < n; i++ {
		start(i)
	}
	await.Until(t, 10*time.Second, "the condition", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) == n-k
	})
	wg.Wait()

	var failed, unknown, notSent int
	for i, err := range errs {
		switch {
		case errors.Is(err, ErrNotSent):
			notSent++
			if errors.Is(err, ErrUnknown) || errors.Is(err, ErrCallFailed) {
				t.Errorf("attempt %d: %v: not sent, yet unknown or failed", i, err)
			}
		case errors.Is(err, ErrUnknown):
			unknown++
			if errors.Is(err, ErrCallFailed) {
				failed++
			}
		default:
			t.Errorf("attempt %d: %v, want a timeout or not sent", i, err)
		}
	}
	calls, _ := s.Stats()
	// k calls of 1 attempt, then k of MaxBatch; the rest was never sent.
	if calls-calls0 != 2*k || failed != 2*k || unknown != 5*k || notSent != n-5*k {
		t.Errorf("%d calls, %d ErrCallFailed, %d unknown, %d not sent; want %d, %d, %d, %d",
			calls-calls0, failed, unknown, notSent, 2*k, 2*k, 5*k, n-5*k)
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
	// Built up front: a fresh token per attempt, and the test's own
	// string building is not counted.
	as := make([]Attempt, 112)
	for i := range as {
		as[i] = attempt("al", "u"+strconv.Itoa(i), 1, 1<<30)
	}
	i := 0
	next := func() {
		out, err := s.Deduct(context.Background(), as[i])
		i++
		if err != nil || out.Code != OK {
			t.Fatal(out, err)
		}
	}
	// rueidis dials its connections lazily, the first time a command
	// is routed to each (~4,300 allocations for its ring): warm them
	// all, or a dial inside the window reads as 43 per attempt.
	for range 10 {
		next()
	}
	n := testing.AllocsPerRun(100, next)
	t.Logf("%v allocs per attempt", n)
	if n > 2 {
		t.Errorf("%v allocs per attempt, want <= 2", n)
	}
}
