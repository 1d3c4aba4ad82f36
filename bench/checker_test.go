package main

import (
	"sort"
	"strings"
	"testing"
	"time"

	"flashgate/sale/room"
)

// The checker must be able to fail: each case below is a hand-made
// history with one kind of broken promise, and a clean one beside it.

// cleanHistory is one sale (stock 3, limit 1) with a room sale beside it:
// two shoppers bought p1 (one paid it, one cancelled it), one bought the
// room's sale after her turn came, and every edge answered purchases again
// right after the one fault healed.
func cleanHistory() *History {
	h := &History{
		Seed: 7, Edges: 2, LoadEndMs: 10_000,
		Products: []ProductSpec{
			{ID: "p1", Stock: 3, Limit: 1, PayTimeoutMs: 3000},
			{ID: "p4", Stock: 5, Limit: 1, Room: true, AdmitPerMinute: 60, OpenMs: 0},
		},
		Faults: []FaultEvent{{Kind: fEdgeKill, Target: "edge1", AtMs: 2000, HealMs: 5000}},
	}
	add := func(op Op) { op.ID = len(h.Ops) + 1; h.Ops = append(h.Ops, op) }
	add(Op{Kind: opDo, Edge: 1, Product: "p1", User: "a", OrderID: "1", StartMs: 100, EndMs: 110, Status: 200, State: "pending"})
	add(Op{Kind: opResult, Edge: 1, Product: "p1", User: "a", OrderID: "1", StartMs: 200, EndMs: 210, Status: 200, State: "pending"})
	add(Op{Kind: opResult, Edge: 1, Product: "p1", User: "a", OrderID: "1", StartMs: 400, EndMs: 410, Status: 200, State: "success"})
	add(Op{Kind: opPay, Edge: 1, Product: "p1", User: "a", OrderID: "1", StartMs: 500, EndMs: 510, Status: 200, State: "paid", PaidMs: 1500})
	add(Op{Kind: opResult, Edge: 1, Product: "p1", User: "a", OrderID: "1", StartMs: 600, EndMs: 610, Status: 200, State: "paid"})
	add(Op{Kind: opDo, Edge: 2, Product: "p1", User: "b", StartMs: 150, EndMs: 160, Status: 503, Code: "DEGRADED", OrderID: "2", State: "unknown"})
	add(Op{Kind: opCancel, Edge: 2, Product: "p1", User: "b", OrderID: "2", StartMs: 3000, EndMs: 3010, Status: 200, State: "cancelled"})
	add(Op{Kind: opJoin, Edge: 2, Product: "p4", User: "c", StartMs: 100, EndMs: 110, Status: 200, Position: 1})
	add(Op{Kind: opToken, Edge: 2, Product: "p4", User: "c", Early: true, StartMs: 120, EndMs: 125, Status: 403, Code: "NOT_ADMITTED"})
	add(Op{Kind: opQueue, Edge: 2, Product: "p4", User: "c", StartMs: 1000, EndMs: 1010, Status: 200, Position: 1, Admitted: true, State: "admitted"})
	add(Op{Kind: opToken, Edge: 2, Product: "p4", User: "c", StartMs: 1100, EndMs: 1110, Status: 200})
	add(Op{Kind: opDo, Edge: 2, Product: "p4", User: "c", OrderID: "3", StartMs: 1200, EndMs: 1210, Status: 200, State: "pending"})
	// After the fault healed at 5 s: both edges, both products answer.
	add(Op{Kind: opDo, Edge: 1, Product: "p1", User: "d", StartMs: 5100, EndMs: 5200, Status: 503, Code: "RECOVERING"})
	add(Op{Kind: opDo, Edge: 1, Product: "p1", User: "d", StartMs: 5500, EndMs: 5600, Status: 409, Code: "LIMIT_REACHED"})
	add(Op{Kind: opDo, Edge: 2, Product: "p4", User: "c", StartMs: 5300, EndMs: 5400, Status: 409, Code: "LIMIT_REACHED"})
	add(Op{Kind: opResolve, Edge: 2, Product: "p1", User: "b", OrderID: "2", StartMs: 9000, EndMs: 9010, Status: 200, State: "cancelled"})
	h.Stored = []Stored{
		{OrderID: "1", Product: "p1", User: "a", Qty: 1, Status: 1, PayByMs: 3000},
		{OrderID: "2", Product: "p1", User: "b", Qty: 1, Status: 2},
		{OrderID: "3", Product: "p4", User: "c", Qty: 1, Status: 0},
	}
	h.StoredRows = map[string]int{"1": 1, "2": 1, "3": 1}
	h.Events = []Event{
		{Type: "order", OrderID: "1", Product: "p1", User: "a", Qty: 1, PayByMs: 3000},
		{Type: "order", OrderID: "1", Product: "p1", User: "a", Qty: 1, PayByMs: 3000}, // a redelivery: harmless
		{Type: "paid", OrderID: "1", Product: "p1", User: "a", PaidMs: 1500},
		{Type: "order", OrderID: "2", Product: "p1", User: "b", Qty: 1},
		{Type: "release", OrderID: "2", Product: "p1", User: "b", Qty: 1, Reason: "cancelled"},
		{Type: "order", OrderID: "3", Product: "p4", User: "c", Qty: 1},
	}
	h.Redis = []RedisSale{{Product: "p1", Present: true, Remaining: 2}, {Product: "p4", Present: true, Remaining: 4}}
	return h
}

func kinds(v *Verdict) []string {
	var out []string
	for _, x := range v.Violations {
		out = append(out, x.Kind)
	}
	sort.Strings(out)
	return out
}

func TestCheckerCleanHistoryPasses(t *testing.T) {
	v := Check(cleanHistory())
	if len(v.Violations) != 0 {
		t.Fatalf("violations in a clean history: %+v", v.Violations)
	}
	if v.Unknown != 1 || v.Resolved["cancelled"] != 1 {
		t.Errorf("the unknown purchase: %d, resolved %v", v.Unknown, v.Resolved)
	}
	if v.FinalReopenMs != 200 {
		t.Errorf("reopen after the last heal: %d ms, want 200 (edge 1's 503 before its first verdict ended at 5.2 s)", v.FinalReopenMs)
	}
}

// TestCheckerFindsEachViolation breaks one promise per case and wants
// exactly that kind (and the counts RESULT prints).
func TestCheckerFindsEachViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(h *History)
		want   []string
		check  func(t *testing.T, v *Verdict)
	}{
		{"oversold", func(h *History) {
			h.Stored[1].Status = 0 // the cancel never happened in the store
			h.Stored = append(h.Stored, Stored{OrderID: "9", Product: "p1", User: "e", Qty: 2})
			h.StoredRows["9"] = 1
			h.Events = append(h.Events, Event{Type: "order", OrderID: "9", Product: "p1", User: "e", Qty: 2})
			h.Ops = append(h.Ops, Op{Kind: opDo, Product: "p1", User: "e", OrderID: "9", Status: 200, EndMs: 300})
			h.Redis[0].Remaining = 0
		}, []string{"over_limit", "oversold", "stock_returned_twice"}, func(t *testing.T, v *Verdict) {
			if v.Oversold != 1 {
				t.Errorf("oversold %d, want 1", v.Oversold)
			}
		}},
		{"stock returned twice", func(h *History) { h.Redis[0].Remaining = 3 }, []string{"stock_returned_twice"}, nil},
		{"stock leaked", func(h *History) { h.Redis[1].Remaining = 3 }, []string{"stock_leaked"}, nil},
		{"a 200 lost", func(h *History) {
			h.Stored = h.Stored[1:]
			delete(h.StoredRows, "1")
		}, []string{"lost", "paid_not_stored", "stock_leaked"}, func(t *testing.T, v *Verdict) {
			if v.Lost != 1 {
				t.Errorf("lost %d", v.Lost)
			}
		}},
		{"an acknowledged event never stored", func(h *History) {
			h.Events = append(h.Events, Event{Type: "order", OrderID: "8", Product: "p1", User: "d", Qty: 1})
		}, []string{"lost"}, nil},
		{"stored twice", func(h *History) { h.StoredRows["1"] = 2 }, []string{"duplicated"}, func(t *testing.T, v *Verdict) {
			if v.Duplicated != 1 {
				t.Errorf("duplicated %d", v.Duplicated)
			}
		}},
		{"stored with no event on the topic", func(h *History) { h.Events = h.Events[:5] }, []string{"stored_without_event"}, nil},
		{"a phantom order", func(h *History) {
			h.Stored = append(h.Stored, Stored{OrderID: "7", Product: "p4", User: "z", Qty: 1, Status: 2})
			h.StoredRows["7"] = 1
			h.Events = append(h.Events, Event{Type: "order", OrderID: "7", Product: "p4", User: "z", Qty: 1})
		}, []string{"phantom"}, nil},
		{"a refused purchase stored", func(h *History) {
			// d's purchases were all refused (503 RECOVERING, 409), yet an
			// order of hers is stored.
			h.Stored = append(h.Stored, Stored{OrderID: "6", Product: "p1", User: "d", Qty: 1, Status: 2})
			h.StoredRows["6"] = 1
			h.Events = append(h.Events, Event{Type: "order", OrderID: "6", Product: "p1", User: "d", Qty: 1})
		}, []string{"phantom"}, nil},
		{"over the limit", func(h *History) {
			h.Stored[1].Status = 0
			h.Stored[1].User = "a"
			h.Events[3].User = "a"
			h.Ops[5].User = "a"
			h.Redis[0].Remaining = 1
		}, []string{"over_limit"}, nil},
		{"unknown never resolved", func(h *History) { h.Ops = h.Ops[:len(h.Ops)-1] }, []string{"unresolved"}, nil},
		{"unknown resolved as pending", func(h *History) { h.Ops[len(h.Ops)-1].State = "pending" }, []string{"unresolved"}, nil},
		{"unknown resolved failed but stored", func(h *History) { h.Ops[len(h.Ops)-1].State = "failed" }, []string{"resolved_wrong"}, nil},
		{"paid then expired", func(h *History) {
			h.Stored[0].Status, h.Stored[0].Expired = 2, true
			h.Events = append(h.Events, Event{Type: "release", OrderID: "1", Product: "p1", User: "a", Reason: "expired", ReleasedMs: 3000})
			h.Redis[0].Remaining = 3
		}, []string{"paid_and_released", "paid_then_released"}, nil},
		{"paid after the deadline", func(h *History) {
			h.Ops[3].PaidMs = 3200
			h.Events[2].PaidMs = 3200
		}, []string{"paid_after_deadline", "paid_after_deadline"}, nil},
		{"refused as too late, stored as paid", func(h *History) {
			h.Ops[3].Status, h.Ops[3].Code, h.Ops[3].State = 409, "TOO_LATE", "expired"
		}, []string{"refused_payment_stored"}, nil},
		{"status backwards", func(h *History) {
			h.Ops = append(h.Ops, Op{Kind: opResult, Product: "p1", User: "a", OrderID: "1", StartMs: 700, EndMs: 710, Status: 200, State: "success"})
		}, []string{"status_backwards"}, nil},
		{"a final status changes", func(h *History) {
			h.Ops = append(h.Ops, Op{Kind: opResult, Product: "p1", User: "a", OrderID: "1", StartMs: 700, EndMs: 710, Status: 200, State: "expired"})
		}, []string{"status_backwards"}, nil},
		{"pending after success in an event stream", func(h *History) {
			h.Ops = append(h.Ops,
				Op{Kind: opEvent, Shopper: 3, Product: "p1", User: "a", OrderID: "1", EndMs: 300, Status: 200, State: "success"},
				Op{Kind: opEvent, Shopper: 3, Product: "p1", User: "a", OrderID: "1", EndMs: 310, Status: 200, State: "pending"})
		}, []string{"status_backwards"}, nil},
		{"a token out of turn: far back in line", func(h *History) {
			h.Ops[7].Position = 40 // the line at 60/min reaches place 7 by 0.125 s
			h.Ops[8].Status, h.Ops[8].Code = 200, ""
		}, []string{"out_of_turn"}, nil},
		{"a token out of turn: never given a place", func(h *History) {
			h.Ops[7].Status, h.Ops[7].Position = 503, 0
			h.Ops[8].Status, h.Ops[8].Code = 200, ""
		}, []string{"out_of_turn"}, nil},
		{"a token at her turn, her admission unseen (her polls failed)", func(h *History) {
			// seed 112: the poll that would have said admitted failed
			// (her edge's Redis link cut); the token at 1.1 s is hers
			// (the line at 60/min reached place 1 at 1 s).
			h.Ops[9].Status, h.Ops[9].Code, h.Ops[9].Admitted, h.Ops[9].State = 503, "DEGRADED", false, ""
		}, nil, nil},
		{"a token 10 ms after a join that said waiting, the line at her place by then: the gate admits her", func(h *History) {
			// seeds 202, 205: the join at place 1 answered waiting just
			// before 1 s, her early token just after is admitted by the
			// token call itself; no answer ever said admitted.
			h.Ops[7].StartMs, h.Ops[7].EndMs, h.Ops[7].State = 985, 995, "waiting"
			h.Ops[8].StartMs, h.Ops[8].EndMs, h.Ops[8].Status, h.Ops[8].Code = 1000, 1005, 200, ""
			h.Ops[9].Status, h.Ops[9].Code, h.Ops[9].Admitted, h.Ops[9].State = 503, "DEGRADED", false, ""
		}, nil, nil},
		{"a token a second before the line reached her place", func(h *History) {
			// place 3 at 60/min is reached at 3 s; the token at 1.9 s is
			// out of turn (a checker that allowed two seconds and five
			// places of slack let it pass).
			h.Ops[7].Position = 3
			h.Ops[8].StartMs, h.Ops[8].EndMs, h.Ops[8].Status, h.Ops[8].Code = 1900, 1910, 200, ""
			h.Ops[9].StartMs, h.Ops[9].EndMs, h.Ops[9].Position = 3000, 3010, 3
			h.Ops[10].StartMs, h.Ops[10].EndMs = 3100, 3110
		}, []string{"out_of_turn"}, nil},
		{"that token on an edge whose clock ran 2 s ahead: her place reached on its clock", func(h *History) {
			h.Ops[7].Position = 3
			h.Ops[8].StartMs, h.Ops[8].EndMs, h.Ops[8].Status, h.Ops[8].Code = 1900, 1910, 200, ""
			h.Ops[9].StartMs, h.Ops[9].EndMs, h.Ops[9].Position = 3000, 3010, 3
			h.Ops[10].StartMs, h.Ops[10].EndMs = 3100, 3110
			h.Faults = append(h.Faults, FaultEvent{Kind: fEdgeClock, Target: "edge2", AtMs: 500, HealMs: 2500, SkewMs: 2000})
		}, nil, nil},
		{"that token after the edge's clock was set right again", func(h *History) {
			h.Ops[7].Position = 3
			h.Ops[8].StartMs, h.Ops[8].EndMs, h.Ops[8].Status, h.Ops[8].Code = 1900, 1910, 200, ""
			h.Ops[9].StartMs, h.Ops[9].EndMs, h.Ops[9].Position = 3000, 3010, 3
			h.Ops[10].StartMs, h.Ops[10].EndMs = 3100, 3110
			h.Faults = append(h.Faults, FaultEvent{Kind: fEdgeClock, Target: "edge2", AtMs: 500, HealMs: 1800, SkewMs: 2000},
				FaultEvent{Kind: fEdgeClock, Target: "edge1", AtMs: 500, HealMs: 2500, SkewMs: 2000})
		}, []string{"out_of_turn"}, nil},
		{"admitted before the line reached her", func(h *History) { h.Ops[9].Position = 40 }, []string{"admitted_early"}, nil},
		{"admitted a second before the line reached her", func(h *History) {
			h.Ops[7].Position, h.Ops[9].Position = 2, 2 // place 2 is reached at 2 s; the answer at 1 s
		}, []string{"admitted_early"}, nil},
		{"a sale slow to reopen", func(h *History) {
			h.Ops[12].StartMs, h.Ops[12].EndMs = 8000, 8500 // still 503 RECOVERING at 8.5 s
			h.Ops[13].StartMs, h.Ops[13].EndMs = 8600, 8700
		}, []string{"reopen_slow"}, func(t *testing.T, v *Verdict) {
			if v.FinalReopenMs != 3500 {
				t.Errorf("final reopen %d ms, want 3500", v.FinalReopenMs)
			}
		}},
		{"a sale nobody tried for a while is not slow", func(h *History) {
			h.Ops[12].Kind = opResult // edge 1's first purchase after the heal is at 5.5 s, a verdict
		}, nil, func(t *testing.T, v *Verdict) {
			if v.FinalReopenMs != 0 {
				t.Errorf("final reopen %d ms, want 0", v.FinalReopenMs)
			}
		}},
		{"an edge stuck", func(h *History) {
			h.Ops[13].Status, h.Ops[13].Code = 503, "RECOVERING"
		}, []string{"edge_stuck"}, nil},
		{"a fact unreadable", func(h *History) { h.ReadErrs = []string{"clickhouse: connection refused"} }, []string{"unreadable"}, nil},
		{"the pipeline stalled", func(h *History) { h.Stalled = []string{"consumer lag 21 after 60s"} }, []string{"pipeline_stalled"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanHistory()
			tc.break_(h)
			v := Check(h)
			if got := kinds(v); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("violations %v, want %v: %+v", got, tc.want, v.Violations)
			}
			if tc.check != nil {
				tc.check(t, v)
			}
		})
	}
}

func TestCheckerComparesReconcile(t *testing.T) {
	v := Check(cleanHistory())
	CompareReconcile(v, Reconciled{Ran: true, Products: 2, Clean: true}, 1)
	if len(v.Violations) != 0 {
		t.Fatalf("agreeing reconcile: %+v", v.Violations)
	}
	CompareReconcile(v, Reconciled{Ran: true, Products: 2, Lost: 1, Text: "RECONCILE products=2 oversold=0 lost=1 duplicated=0"}, 1)
	if got := kinds(v); strings.Join(got, ",") != "reconcile_disagrees" {
		t.Fatalf("reconcile says lost, the checker does not: %v", got)
	}
}

func TestOutcomeClasses(t *testing.T) {
	for _, tc := range []struct {
		op   Op
		want string
	}{
		{Op{Status: 200}, outOK},
		{Op{Status: 409, Code: "LIMIT_REACHED"}, outFail},
		{Op{Status: 503, Code: "DEGRADED"}, outFail}, // refused before anything was sent
		{Op{Status: 503, Code: "RECOVERING"}, outFail},
		{Op{Status: 503, Code: "DEGRADED", OrderID: "5", State: "unknown"}, outUnknown},
		{Op{Status: 503, Code: "DEGRADED", OrderID: "5", State: "pending"}, outUnknown},
		{Op{Status: 0, Err: "timeout"}, outUnknown},
		{Op{Status: 0, Refused: true}, outFail},
		{Op{Status: 502}, outUnknown},
	} {
		if got := tc.op.Outcome(); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.op, got, tc.want)
		}
	}
}

// TestDrawFaultsIsItsSeed: a schedule is its seed — the same seed draws
// the same faults; no two faults of one component overlap; every fault
// heals before the quiet tail.
func TestDrawFaultsIsItsSeed(t *testing.T) {
	d := 40 * time.Second
	a := drawFaults(42, 8, d, 3, 2, 5, 3, nil)
	b := drawFaults(42, 8, d, 3, 2, 5, 3, nil)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("draws of one seed: %d and %d faults", len(a), len(b))
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			t.Fatalf("draw %d differs: %s / %s", i, a[i], b[i])
		}
	}
	if c := drawFaults(43, 8, d, 3, 2, 5, 3, nil); len(c) == len(a) && c[0].String() == a[0].String() && c[len(c)-1].String() == a[len(a)-1].String() {
		t.Errorf("seeds 42 and 43 drew the same schedule: %v", c)
	}
	for seed := int64(0); seed < 200; seed++ {
		fs := drawFaults(seed, 6, d, 3, 2, 5, 3, nil)
		until := map[string]time.Duration{}
		for _, f := range fs {
			if f.At < 2*time.Second || f.At+f.For > d-10*time.Second {
				t.Fatalf("seed %d: %s outside [2s, %v]", seed, f, d-10*time.Second)
			}
			if f.group == "" {
				continue
			}
			if f.At < until[f.group] {
				t.Fatalf("seed %d: %s overlaps the fault before it on %s", seed, f, f.group)
			}
			until[f.group] = f.At + f.For
		}
	}
	for _, f := range drawFaults(5, 10, d, 3, 2, 5, 3, []string{fBrokerOne}) {
		if f.Kind != fBrokerOne {
			t.Fatalf("kinds limited to %s drew %s", fBrokerOne, f)
		}
	}
}

// TestLineReachIsTheRoomsLine: the checker's N(t) is the room's own
// (sale/room State.Frontier): never below it at the moment the edge read its
// clock (so no admission the room makes is flagged), and above it by no more
// than the clock slack (so no token ahead of the line passes).
func TestLineReachIsTheRoomsLine(t *testing.T) {
	const startUnixMs = 1_796_000_000_000
	for _, rate := range []int{60, 120, 600, 6000} {
		for _, openMs := range []int64{-30_000, -1_234, 0, 777} {
			st := room.State{Frozen: true, BaseMs: startUnixMs, Rate: int64(rate)}
			p := ProductSpec{Room: true, AdmitPerMinute: rate, OpenMs: openMs}
			for at := int64(-2_000); at < 40_000; at += 37 {
				for _, skew := range []int64{0, 2000} {
					edge := startUnixMs + (at - openMs) + skew // the edge's clock when the load's reads at
					got, _ := lineReach(p, at, skew)
					if want := st.Frontier(edge); got < want {
						t.Fatalf("rate %d, open %d, at %d, skew %d: the checker's line %d, the room's %d", rate, openMs, at, skew, got, want)
					}
					if ahead := st.Frontier(edge + lineSlackMs); got > ahead {
						t.Fatalf("rate %d, open %d, at %d, skew %d: the checker's line %d, past the room's %d %d ms later", rate, openMs, at, skew, got, ahead, lineSlackMs)
					}
				}
			}
		}
	}
}
