package e2e

import (
	"strconv"
	"testing"
	"time"

	"flashgate/internal/redistest"
	"flashgate/orders/orderid"
)

// An edge restarted with its clock behind its previous run never hands out
// an order id its previous process did (nemesis seed 557: edge2 stopped
// and started 2 s behind answered one id to two purchases, p1's and p3's,
// and the store held one order for both). Order ids are made of the
// edge's clock; each process reserves the times its ids may carry in
// Redis, and the next one starts after them — after a graceful stop
// (SIGTERM) and after a crash (SIGKILL), each with the clock 5 s behind
// the process before.
func TestOrderIDsNeverRepeatAfterRestartBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts an edge process: skipped with -short")
	}
	const p, units = "oid", 100
	r := redistest.New(t)
	env := newOrdEnvOn(t, r, r.Addr())
	rig := startNemRig(t, env, r.Addr(), []string{r.Addr()}, ordSales([]string{p}, units))
	e, proc := rig.edges[0], rig.procs[0]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the edge's log:\n%s", proc.logTail())
		}
	})
	n := 0
	// buy makes k purchases on the edge and returns the highest order id.
	buy := func(k int) int64 {
		t.Helper()
		var top int64
		for range k {
			n++
			res, err := e.attempt(env.j.get("u"+strconv.Itoa(n)), p, 1)
			if err != nil || res.status != 200 {
				t.Fatalf("purchase %d: %v %v\n%s", n, res, err, proc.logTail())
			}
			id, err := strconv.ParseInt(jsonStr(res.body, "orderId"), 10, 64)
			if err != nil {
				t.Fatalf("purchase %d answered no order id: %s", n, res.body)
			}
			top = max(top, id)
		}
		return top
	}
	// restart starts the edge again on its config with its clock offset
	// by behind, and returns the lowest id of its first purchases.
	restart := func(how, behind string) int64 {
		t.Helper()
		e.api.CloseIdleConnections() // the kept-alive ones went with the process
		proc = startEdgeProc(t, rig.bin, "-c", e.cfg, "-test-clock-offset", behind)
		var low int64 = 1<<63 - 1
		for range 3 {
			n++
			res, err := e.attempt(env.j.get("u"+strconv.Itoa(n)), p, 1)
			if err != nil || res.status != 200 {
				t.Fatalf("purchase %d after the %s: %v %v\n%s", n, how, res, err, proc.logTail())
			}
			id, _ := strconv.ParseInt(jsonStr(res.body, "orderId"), 10, 64)
			low = min(low, id)
		}
		return low
	}

	before := buy(5)
	proc.term()
	proc.awaitExit(15 * time.Second)
	after := restart("graceful stop", "-5s")
	if after <= before {
		t.Errorf("after a graceful stop and a start 5 s behind, the new process's first id %d (%v) is not after the last one before %d (%v)",
			after, orderid.Time(after), before, orderid.Time(before))
	} else {
		t.Logf("graceful stop: ids %v → %v", orderid.Time(before).Format(time.StampMilli), orderid.Time(after).Format(time.StampMilli))
	}

	before = buy(5)
	proc.kill9()
	after = restart("crash", "-10s") // 5 s behind the process it follows
	if after <= before {
		t.Errorf("after a crash and a start 5 s behind again, the new process's first id %d (%v) is not after the last one before %d (%v)",
			after, orderid.Time(after), before, orderid.Time(before))
	} else {
		t.Logf("crash: ids %v → %v", orderid.Time(before).Format(time.StampMilli), orderid.Time(after).Format(time.StampMilli))
	}
	env.awaitRows(int64(n), 20*time.Second)
}
