package e2e

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"flashgate/internal/redistest"
)

// TestRestartMidSaleKeepsStock: an edge restarted with the same config and
// Redis continues the sale where it stopped: warm-up never resets a live
// sale's stock, and buyers keep their counts.
func TestRestartMidSaleKeepsStock(t *testing.T) {
	const units = 100
	t.Run("between_requests", func(t *testing.T) {
		r := redistest.New(t)
		rd := openRedis(t, r.Addr())
		j := newJWTs(t, sessionSecret)
		e1 := startEdge(t, r.Addr(), activities(sale("r", units, 1)))
		for i := range 30 {
			if res, err := e1.attempt(j.get("first-"+strconv.Itoa(i)), "r", 1); err != nil || res.status != 200 {
				t.Fatalf("purchase %d: %v %v", i, res, err)
			}
		}
		e1.stop()

		e2 := startEdgeFile(t, e1.cfg)
		if st, rem := e2.status("r"); st != "active" || rem != units-30 {
			t.Fatalf("after restart: status %q remaining %d, want active %d", st, rem, units-30)
		}
		if s := rd.stock("r"); s != units-30 {
			t.Fatalf("after restart: Redis stock %d, want %d", s, units-30)
		}
		// A buyer of the first edge is still at the limit on the new
		// one (its bought cache is empty: the script decides).
		if res, _ := e2.attempt(j.get("first-0"), "r", 1); res.status != 409 || res.code() != "LIMIT_REACHED" {
			t.Errorf("earlier buyer on the restarted edge: %v, want 409 LIMIT_REACHED", res)
		}
		ok := 30
		for i := range units {
			res, err := e2.attempt(j.get("second-"+strconv.Itoa(i)), "r", 1)
			switch {
			case err != nil:
				t.Fatal(err)
			case res.status == 200:
				ok++
			case res.status != 410:
				t.Errorf("attempt %d after restart: %v", i, res)
			}
		}
		if ok != units {
			t.Errorf("%d purchases in total, want exactly %d", ok, units)
		}
		if s, n := rd.stock("r"), rd.orderCount("r"); s != 0 || n != units {
			t.Errorf("stock %d outbox %d, want 0 and %d", s, n, units)
		}
		if st, _ := e2.status("r"); st != "soldout" {
			t.Errorf("status %q, want soldout", st)
		}
	})

	// The edge is shut down while shoppers are buying: requests in flight
	// finish (and are answered), new ones fail to connect; a new edge
	// takes over. Every 200 is one outbox entry and the totals add up.
	t.Run("under_load", func(t *testing.T) {
		r := redistest.New(t)
		rd := openRedis(t, r.Addr())
		j := newJWTs(t, sessionSecret)
		e1 := startEdge(t, r.Addr(), activities(sale("r", units, 1)))
		var ok, transport, lostDo atomic.Int64
		var cur atomic.Pointer[edge]
		cur.Store(e1)
		restarted := make(chan struct{})
		var seq atomic.Int64
		stopAt := make(chan struct{})
		var once sync.Once
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for {
					i := seq.Add(1)
					if i > 3*units {
						return
					}
					jwt := j.get("s-" + strconv.FormatInt(i, 10))
					retried := false
				retry:
					e := cur.Load()
					res, tok, err := e.token(jwt, "r")
					if err == nil && res.status == 200 {
						if res, err = e.buy(jwt, "r", tok, 1); err != nil {
							// Sent on a keep-alive connection the draining
							// edge closed: the shopper retries (below). Had
							// the edge processed it and lost the answer, the
							// retry would meet the limit (409).
							lostDo.Add(1)
						}
					}
					switch {
					case err != nil:
						transport.Add(1)
						<-restarted // the shopper retries on the new edge
						retried = true
						goto retry
					case res.status == 409 && retried:
						t.Errorf("attempt %d: a do the draining edge processed got no answer (retry: %v)", i, res)
					case res.status == 200:
						if ok.Add(1) == 30 {
							once.Do(func() { close(stopAt) })
						}
					case res.status == 410:
					default:
						t.Errorf("attempt %d: %v", i, res)
					}
				}
			})
		}
		<-stopAt
		e1.stop()
		sold := rd.orderCount("r")
		e2 := startEdgeFile(t, e1.cfg)
		want := "active"
		if sold == units {
			want = "soldout"
		}
		// Checked before the shoppers are let onto the new edge.
		if st, rem := e2.status("r"); rem != units-sold || st != want {
			t.Errorf("after restart: status %q remaining %d, want %s %d", st, rem, want, units-sold)
		}
		cur.Store(e2)
		close(restarted)
		wg.Wait()
		t.Logf("sold %d before the restart; %d requests failed while the edge was down (%d of them do calls on closed keep-alive connections, retried)",
			sold, transport.Load(), lostDo.Load())
		if got := ok.Load(); got != units {
			t.Errorf("%d answers 200, want exactly %d", got, units)
		}
		if s, n := rd.stock("r"), rd.orderCount("r"); s != 0 || n != units {
			t.Errorf("stock %d outbox %d, want 0 and %d", s, n, units)
		}
	})
}
