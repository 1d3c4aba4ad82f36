package stock

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/orders/order"
)

// Two edges (two Store clients) sweep one due set while payments for the
// same orders arrive from many goroutines, a few milliseconds either side of
// each deadline: every order is settled exactly once — paid or expired,
// never both — and whoever lost is told which.
func TestPayRacesTheDeadlineStandalone(t *testing.T) {
	a, srv := openReal(t, Options{})
	b, err := Open(context.Background(), srv.Addr(), testOptions(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	racePayAgainstDeadline(t, a, b, "race")
}

func TestPayRacesTheDeadlineOnCluster(t *testing.T) {
	a, c := openCluster(t, Options{Timeout: 2 * time.Second})
	b, err := Open(context.Background(), strings.Join(c.Addrs(), ","), testOptions(Options{Timeout: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	racePayAgainstDeadline(t, a, b, "race")
}

func racePayAgainstDeadline(t *testing.T, a, b *Store, product string) {
	const orders, qty = 300, 1
	ctx := context.Background()
	warm(t, a, product, orders*qty, 1)
	stores := []*Store{a, b}

	// Deadlines 1.5-1.6 s from now, 1 ms apart give or take: the sweeps
	// and the payments meet on every one of them. The margin is for the
	// set-up (300 deductions and their success marks), which must end
	// before the first deadline: on a loaded 2-core machine it took over
	// 150 ms, and deadlines before the orders' own creation were refused.
	base := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	list := make([]Attempt, orders)
	for i := range list {
		at := attempt(product, "u"+strconv.Itoa(i), qty, 1)
		at.PayByMs = base + int64(i%100)
		if out := mustDeduct(t, a, at); out.Code != OK {
			t.Fatalf("deduct %d: %v", i, out.Code)
		}
		list[i] = at
	}
	ids := make([]int64, orders)
	for i, at := range list {
		ids[i] = at.ID
	}
	if n, err := a.MarkSuccess(ctx, product, ids...); err != nil || n != orders {
		t.Fatalf("MarkSuccess = %d, %v", n, err)
	}
	if late := time.Now().UnixMilli() - base; late >= 0 {
		t.Fatalf("the set-up ended %d ms after the first deadline: the race cannot be run", late)
	}

	var mu sync.Mutex
	wins := map[int64][]string{}    // order -> who changed it, and to what
	payAnswer := map[int64]string{} // order -> the state its payer was told
	win := func(id int64, who string) { mu.Lock(); wins[id] = append(wins[id], who); mu.Unlock() }

	// The sweeps stop between calls, never inside one: a call cancelled
	// after its script ran would drop what it expired from wins (a run
	// under load read "expired, settled by []").
	var stop atomic.Bool
	var sweeps sync.WaitGroup
	for e, s := range stores {
		sweeps.Go(func() {
			for !stop.Load() {
				got, err := s.ExpireDue(ctx, product, 16)
				if err != nil {
					t.Errorf("edge %d: ExpireDue: %v", e, err)
					return
				}
				for _, st := range got {
					if !st.Changed || st.Info.State != StateExpired || st.Info.PayByMs > st.AtMs {
						t.Errorf("edge %d expired %+v", e, st)
					}
					win(st.Info.ID, "sweep:"+st.Info.State)
				}
			}
		})
	}

	// Every other order is paid, at its deadline ± 3 ms, by two payers at
	// once (a payment system retrying, or the webhook and the admin call).
	// One in four of those is aimed up to 100 ms before its deadline instead:
	// on a loaded 2-core machine 300 sleepers wake several milliseconds late
	// and every ± 3 ms payment can lose (a run saw paid 0), and the test then
	// cannot tell a payment that wins from one that was never allowed to.
	var payers sync.WaitGroup
	for i, at := range list {
		if i%2 == 1 {
			continue
		}
		for k := range 2 {
			payers.Go(func() {
				lead := time.Duration(rand.IntN(7000)-3000) * time.Microsecond
				if i%8 == 0 {
					lead = time.Duration(rand.IntN(100_000)+3000) * -time.Microsecond
				}
				when := time.UnixMilli(at.PayByMs).Add(lead)
				time.Sleep(time.Until(when)) // the stimulus: a payment at that moment
				replay := ""
				if k == 1 {
					replay = "evt_" + strconv.FormatInt(at.ID, 10) + "_" + strconv.Itoa(k)
				}
				st, err := stores[k].Pay(ctx, product, at.ID, replay, time.Minute)
				if err != nil {
					t.Errorf("Pay %d: %v", at.ID, err)
					return
				}
				if st.Info.State != StatePaid && st.Info.State != StateExpired {
					t.Errorf("Pay %d answered %+v", at.ID, st)
				}
				mu.Lock()
				if prev, ok := payAnswer[at.ID]; ok && prev != st.Info.State {
					t.Errorf("order %d: one payer told %s, the other %s", at.ID, prev, st.Info.State)
				}
				payAnswer[at.ID] = st.Info.State
				mu.Unlock()
				if st.Changed {
					win(at.ID, "pay:"+st.Info.State)
				}
			})
		}
	}
	payers.Wait()
	await.Until(t, 10*time.Second, "every deadline swept", func() bool {
		_, n, err := a.NextDeadlines(ctx, product, 0)
		return err == nil && n == 0
	})
	stop.Store(true)
	sweeps.Wait()

	var paid, expired int64
	for i, at := range list {
		o, ok, err := a.OrderState(ctx, product, at.ID)
		if err != nil || !ok {
			t.Fatalf("order %d: %v %v", at.ID, ok, err)
		}
		w := wins[at.ID]
		if len(w) != 1 || !strings.HasSuffix(w[0], ":"+o.State) {
			t.Errorf("order %d (%s): settled by %v, final %s", at.ID, o.State, w, o.State)
		}
		if told, ok := payAnswer[at.ID]; ok && told != o.State {
			t.Errorf("order %d: payer told %s, final %s", at.ID, told, o.State)
		}
		switch o.State {
		case StatePaid:
			paid += qty
			if i%2 == 1 {
				t.Errorf("order %d paid without a payment", at.ID)
			}
			if o.PaidMs >= o.PayByMs {
				t.Errorf("order %d paid at %d, deadline %d", at.ID, o.PaidMs, o.PayByMs)
			}
		case StateExpired:
			expired += qty
			if o.ClosedMs < o.PayByMs {
				t.Errorf("order %d expired at %d before its deadline %d", at.ID, o.ClosedMs, o.PayByMs)
			}
		default:
			t.Errorf("order %d: %s", at.ID, o.State)
		}
	}
	info := saleInfo(t, a, product)
	if info.Paid != paid || info.Expired != expired || info.Released != expired || info.Remaining != expired {
		t.Errorf("meta %+v; paid %d expired %d", info, paid, expired)
	}
	if paid == 0 || expired <= orders/2 {
		t.Errorf("paid %d, expired %d: the race was not run", paid, expired)
	}
	t.Logf("paid %d, expired %d (of them %d by a late payment)", paid, expired, count(wins, "pay:"+StateExpired))

	// One settlement event per order in the outbox, the one Event says.
	perOrder := map[int64]int{}
	for _, ev := range outboxEvents(t, a, product) {
		if ev.Type != order.TypeOrder {
			perOrder[ev.ID]++
		}
	}
	for _, at := range list {
		if perOrder[at.ID] != 1 {
			t.Errorf("order %d: %d settlement events", at.ID, perOrder[at.ID])
		}
	}
}

func count(wins map[int64][]string, who string) int {
	n := 0
	for _, w := range wins {
		for _, x := range w {
			if x == who {
				n++
			}
		}
	}
	return n
}

func outboxEvents(t testing.TB, s *Store, product string) []order.Event {
	t.Helper()
	evs, err := s.OutboxEvents(context.Background(), product)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// Two edges sweeping the same 2,000 due orders, in small batches, release
// each exactly once.
func TestTwoEdgesSweepEachOrderOnce(t *testing.T) {
	a, srv := openReal(t, Options{})
	b, err := Open(context.Background(), srv.Addr(), testOptions(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 2000
	ctx := context.Background()
	warm(t, a, "sw", n, 1)
	ids := make([]int64, 0, n)
	for i := range n {
		at := attempt("sw", "u"+strconv.Itoa(i), 1, 1)
		at.PayByMs = at.CreatedMs + 1
		mustDeduct(t, a, at)
		ids = append(ids, at.ID)
	}
	if _, err := a.MarkSuccess(ctx, "sw", ids...); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	released := map[int64]int{}
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b, a, b} {
		wg.Go(func() {
			for {
				got, err := s.ExpireDue(ctx, "sw", 32)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					if _, left, _ := s.NextDeadlines(ctx, "sw", 0); left == 0 {
						return
					}
				}
				mu.Lock()
				for _, st := range got {
					released[st.Info.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if released[id] != 1 {
			t.Fatalf("order %d released %d times", id, released[id])
		}
	}
	if r := remaining(t, a, "sw"); r != n {
		t.Fatalf("remaining %d, want %d", r, n)
	}
	if info := saleInfo(t, a, "sw"); info.Expired != n || info.Released != n {
		t.Fatalf("meta %+v", info.SaleStock)
	}
}
