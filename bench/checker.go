package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// The nemesis scenario's checker decides from the history alone: every
// HTTP answer the shoppers got (ok, fail or unknown), the orders table
// read with FINAL, the order topic read from Kafka and each sale's stock
// read from Redis. It never asks flashgate (its reconcile, its metrics,
// its result endpoint beyond what a shopper saw) whether a promise held;
// `proxy reconcile` runs afterwards and must agree with it.

// Op is one HTTP call a shopper made and what came back.
type Op struct {
	ID       int    `json:"id"`
	Shopper  int    `json:"shopper"`
	User     string `json:"user"`
	Edge     int    `json:"edge"`
	Kind     string `json:"kind"` // opToken, opDo, …
	Product  string `json:"product"`
	OrderID  string `json:"order_id,omitempty"`
	StartMs  int64  `json:"start_ms"` // since the schedule's load started
	EndMs    int64  `json:"end_ms"`
	Status   int    `json:"status"`          // HTTP status; 0: no answer
	Code     string `json:"code,omitempty"`  // the error code of an error answer
	State    string `json:"state,omitempty"` // the answer's status field: pending, unknown, success, paid, …
	Err      string `json:"err,omitempty"`   // the transport error of no answer
	Refused  bool   `json:"refused,omitempty"`
	Position int64  `json:"position,omitempty"` // queue answers: the place
	Admitted bool   `json:"admitted,omitempty"` // queue answers
	PaidMs   int64  `json:"paid_ms,omitempty"`  // a payment's answer
	Early    bool   `json:"early,omitempty"`    // a token asked for before the room admitted the shopper
}

// The kinds of operation.
const (
	opToken   = "token"
	opDo      = "do"
	opResult  = "result"  // a result poll
	opEvent   = "event"   // one event of an SSE stream
	opPay     = "pay"     // POST /admin/orders/paid
	opWebhook = "webhook" // POST /api/payments/webhook
	opCancel  = "cancel"  // POST /admin/orders/cancel
	opJoin    = "join"    // POST /api/seckill/queue
	opQueue   = "queue"   // GET /api/seckill/queue
	opResolve = "resolve" // the result of an unknown-outcome order, asked after the run drained
)

// The outcome of an operation, as Jepsen classes them.
const (
	outOK      = "ok"
	outFail    = "fail"
	outUnknown = "unknown"
)

// Outcome classes the answer: 2xx ok; a 4xx or a plain 503 (refused
// before anything was sent) fail, as is a refused connection; no answer,
// another 5xx, or a 503 naming an order (pending or unknown) unknown.
func (o *Op) Outcome() string {
	switch {
	case o.Status == 0 && o.Refused:
		return outFail
	case o.Status == 0:
		return outUnknown
	case o.Status < 300:
		return outOK
	case o.Status < 500:
		return outFail
	case o.Status == 503 && o.OrderID == "" && o.Code != "":
		return outFail
	}
	return outUnknown
}

// Stored is one row of seckill_order FINAL.
type Stored struct {
	OrderID  string `json:"order_id"`
	Product  string `json:"product"`
	User     string `json:"user"`
	Qty      int64  `json:"qty"`
	Status   int    `json:"status"` // 0 unpaid, 1 paid, 2 released
	Expired  bool   `json:"expired"`
	PayTimeS int64  `json:"pay_time_s"`
	PayByMs  int64  `json:"pay_by_ms"`
}

// Event is one order event read from the Kafka topic.
type Event struct {
	Type       string `json:"type"` // order, paid, release
	OrderID    string `json:"orderId"`
	Product    string `json:"productId"`
	User       string `json:"userId"`
	Qty        int64  `json:"quantity"`
	PaidMs     int64  `json:"paidMs"`
	ReleasedMs int64  `json:"releasedMs"`
	Reason     string `json:"reason"`
	PayByMs    int64  `json:"payByMs"`
}

// RedisSale is one sale's stock key read from its master.
type RedisSale struct {
	Product   string `json:"product"`
	Present   bool   `json:"present"`
	Remaining int64  `json:"remaining"`
}

// ProductSpec is one sale of the schedule.
type ProductSpec struct {
	ID             string `json:"id"`
	Stock          int64  `json:"stock"`
	Limit          int64  `json:"limit"`
	Room           bool   `json:"room"`
	AdmitPerMinute int    `json:"admit_per_minute,omitempty"`
	OpenMs         int64  `json:"open_ms"` // the sale's start, ms since the load started (≤ 0: open before)
	PayTimeoutMs   int64  `json:"pay_timeout_ms"`
}

// FaultEvent is one fault of the timeline.
type FaultEvent struct {
	Kind    string `json:"kind"`
	Target  string `json:"target"`
	AtMs    int64  `json:"at_ms"`             // injected, ms since the load started
	HealMs  int64  `json:"heal_ms"`           // healed (the component back and ready); 0: never
	SkewMs  int64  `json:"skew_ms,omitempty"` // edge-clock: the edge's offset meanwhile (ms, + ahead)
	Note    string `json:"note,omitempty"`
	Err     string `json:"error,omitempty"`
	ReopenM int64  `json:"reopen_ms"` // filled by the checker: -1 stuck, -2 nothing to measure
}

// History is everything the checker decides from.
type History struct {
	Seed      int64         `json:"seed"`
	Edges     int           `json:"edges"`
	Products  []ProductSpec `json:"products"`
	Ops       []Op          `json:"ops"`
	Faults    []FaultEvent  `json:"faults"`
	LoadEndMs int64         `json:"load_end_ms"`
	Stored    []Stored      `json:"stored"`
	// StoredRows counts rows per order id in the FINAL read (more than
	// one is a duplicate the table should have merged).
	StoredRows map[string]int `json:"stored_rows"`
	Events     []Event        `json:"events"`
	Redis      []RedisSale    `json:"redis"`
	// ReadErrs are the facts the checker could not read (each is a
	// violation: a check that cannot be made has not passed).
	ReadErrs []string `json:"read_errors,omitempty"`
	// Stalled says the pipeline had not settled a whole drain after the
	// load (orders acknowledged, not stored yet): a violation of liveness.
	Stalled []string `json:"stalled,omitempty"`
}

// Violation is one broken promise.
type Violation struct {
	Kind    string `json:"kind"`
	Detail  string `json:"detail"`
	AtMs    int64  `json:"at_ms"`
	Product string `json:"product,omitempty"`
	User    string `json:"user,omitempty"`
	OrderID string `json:"order_id,omitempty"`
}

// Verdict is what the checker found in one schedule.
type Verdict struct {
	Violations []Violation      `json:"violations"`
	Oversold   int64            `json:"oversold"`
	Lost       int64            `json:"lost"`
	Duplicated int64            `json:"duplicated"`
	Unknown    int              `json:"unknown"`  // unknown-outcome purchases
	Resolved   map[string]int   `json:"resolved"` // … by what their result said after the run
	Answers    map[string]int64 `json:"answers"`  // "kind status[ code]" -> count
	Outcomes   map[string]int64 `json:"outcomes"` // ok / fail / unknown
	ReopenMs   []int64          `json:"reopen_ms"`
	// FinalReopenMs is the reopen after the last fault healed (-1 stuck).
	FinalReopenMs int64 `json:"final_reopen_ms"`
}

// reopenWithin is how soon after the last fault healed every sale must
// answer again (a verdict: 200, 409, 410) on every edge.
const reopenWithin = 3000

func (v *Verdict) add(kind string, at int64, product, user, order, format string, args ...any) {
	v.Violations = append(v.Violations, Violation{Kind: kind, AtMs: at, Product: product, User: user, OrderID: order,
		Detail: fmt.Sprintf(format, args...)})
}

// statusRank orders an order's states: a shopper's status never moves
// backwards, and a final one never changes.
func statusRank(s string) int {
	switch s {
	case "pending":
		return 0
	case "success":
		return 1
	case "paid", "expired", "cancelled", "failed":
		return 2
	}
	return -1
}

// Check runs every check over h.
func Check(h *History) *Verdict {
	v := &Verdict{Answers: map[string]int64{}, Outcomes: map[string]int64{}, Resolved: map[string]int{}, FinalReopenMs: -2}
	for _, e := range h.ReadErrs {
		v.add("unreadable", h.LoadEndMs, "", "", "", "%s", e)
	}
	for _, e := range h.Stalled {
		v.add("pipeline_stalled", h.LoadEndMs, "", "", "", "%s", e)
	}
	spec := map[string]ProductSpec{}
	for _, p := range h.Products {
		spec[p.ID] = p
	}
	stored := map[string]Stored{}
	for _, s := range h.Stored {
		stored[s.OrderID] = s
	}
	for _, op := range h.Ops {
		k := fmt.Sprintf("%s %d", op.Kind, op.Status)
		if op.Code != "" {
			k += " " + op.Code
		}
		v.Answers[k]++
		v.Outcomes[op.Outcome()]++
	}
	checkStock(h, v, spec)
	checkOrders(h, v, spec, stored)
	checkPayments(h, v, stored)
	checkStatuses(h, v)
	checkRoom(h, v, spec)
	checkReopen(h, v)
	sort.SliceStable(v.Violations, func(i, j int) bool { return v.Violations[i].AtMs < v.Violations[j].AtMs })
	return v
}

// live is whether a stored order holds its units (not released).
func (s Stored) live() bool { return s.Status != 2 }

// checkStock: never oversold; each sale's Redis stock is what its stored
// orders leave of the stock (a unit released twice, or taken without an
// order, shows there).
func checkStock(h *History, v *Verdict, spec map[string]ProductSpec) {
	liveUnits := map[string]int64{}
	for _, s := range h.Stored {
		if s.live() {
			liveUnits[s.Product] += s.Qty
		}
	}
	for _, p := range h.Products {
		if over := liveUnits[p.ID] - p.Stock; over > 0 {
			v.Oversold += over
			v.add("oversold", h.LoadEndMs, p.ID, "", "", "%d units held by stored orders, stock %d", liveUnits[p.ID], p.Stock)
		}
	}
	for _, r := range h.Redis {
		p, ok := spec[r.Product]
		if !ok || !r.Present {
			continue
		}
		if want := p.Stock - liveUnits[r.Product]; r.Remaining != want {
			kind := "stock_leaked" // units taken that no stored order holds
			if r.Remaining > want {
				kind = "stock_returned_twice" // more on sale than stock minus what is held: a unit came back twice
			}
			v.add(kind, h.LoadEndMs, r.Product, "", "", "Redis has %d left; stock %d − %d units held by stored orders = %d", r.Remaining, p.Stock, liveUnits[r.Product], want)
		}
	}
}

// checkOrders: every 200 (and every 503 that said the order was placed)
// stored exactly once; every event on the topic stored; nothing stored
// that no shopper asked for; no buyer over the limit; every unknown
// outcome resolved, and the way the store says.
func checkOrders(h *History, v *Verdict, spec map[string]ProductSpec, stored map[string]Stored) {
	for id, n := range h.StoredRows {
		if n > 1 {
			v.Duplicated += int64(n - 1)
			v.add("duplicated", h.LoadEndMs, stored[id].Product, stored[id].User, id, "%d rows of one order in seckill_order FINAL", n)
		}
	}
	lost := map[string]bool{}
	acked := map[string]Op{}
	attempts := map[string]int{} // product/user -> purchases that may have happened
	for _, op := range h.Ops {
		if op.Kind != opDo {
			continue
		}
		if op.Outcome() != outFail {
			attempts[op.Product+"/"+op.User]++
		}
		placed := op.Status == 200 || (op.OrderID != "" && op.State == "pending")
		if !placed || op.OrderID == "" {
			continue
		}
		if prev, ok := acked[op.OrderID]; ok {
			v.add("order_id_twice", op.EndMs, op.Product, op.User, op.OrderID, "the same order id answered to two purchases (op %d and %d)", prev.ID, op.ID)
		}
		acked[op.OrderID] = op
		s, ok := stored[op.OrderID]
		switch {
		case !ok:
			lost[op.OrderID] = true
			v.add("lost", op.EndMs, op.Product, op.User, op.OrderID, "answered %d (%s) on edge %d, not in seckill_order", op.Status, orDefault(op.State, "pending"), op.Edge)
		case s.Product != op.Product || s.User != op.User:
			v.add("stored_wrong", op.EndMs, op.Product, op.User, op.OrderID, "stored as %s/%s", s.Product, s.User)
		}
	}
	events := map[string]Event{}
	for _, e := range h.Events {
		if e.Type != "order" {
			continue
		}
		prev, seen := events[e.OrderID]
		if seen && (prev.Product != e.Product || prev.User != e.User || prev.Qty != e.Qty) {
			v.add("event_conflict", h.LoadEndMs, e.Product, e.User, e.OrderID, "two order events disagree: %+v and %+v", prev, e)
		}
		events[e.OrderID] = e
		if _, ok := stored[e.OrderID]; !ok && !seen && !lost[e.OrderID] {
			lost[e.OrderID] = true
			v.add("lost", h.LoadEndMs, e.Product, e.User, e.OrderID, "an order event on the topic, not in seckill_order")
		}
	}
	v.Lost = int64(len(lost))
	perBuyer := map[string]int64{}
	storedPerBuyer := map[string]int{}
	for _, s := range h.Stored {
		if h.Events != nil {
			if _, ok := events[s.OrderID]; !ok {
				v.add("stored_without_event", h.LoadEndMs, s.Product, s.User, s.OrderID, "in seckill_order, no order event on the topic")
			}
		}
		k := s.Product + "/" + s.User
		storedPerBuyer[k]++
		if s.live() {
			perBuyer[k] += s.Qty
		}
	}
	for k, n := range storedPerBuyer {
		if n > attempts[k] {
			p, u, _ := strings.Cut(k, "/")
			v.add("phantom", h.LoadEndMs, p, u, "", "%d orders stored for %d purchases that may have happened", n, attempts[k])
		}
	}
	for k, units := range perBuyer {
		p, u, _ := strings.Cut(k, "/")
		if lim := spec[p].Limit; lim > 0 && units > lim {
			v.add("over_limit", h.LoadEndMs, p, u, "", "holds %d units, limit %d", units, lim)
		}
	}
	resolved := map[string]Op{}
	for _, op := range h.Ops {
		if op.Kind == opResolve {
			resolved[op.OrderID] = op
		}
	}
	for _, op := range h.Ops {
		if op.Kind != opDo || op.State != "unknown" || op.OrderID == "" {
			continue
		}
		v.Unknown++
		r, ok := resolved[op.OrderID]
		if !ok || statusRank(r.State) < 1 {
			what := "never asked"
			if ok {
				what = fmt.Sprintf("answered %d %s%s", r.Status, r.Code, r.State)
			}
			v.Resolved["unresolved"]++
			v.add("unresolved", op.EndMs, op.Product, op.User, op.OrderID, "503 unknown on edge %d; its result after the run: %s", op.Edge, what)
			continue
		}
		v.Resolved[r.State]++
		_, isStored := stored[op.OrderID]
		if (r.State == "failed") == isStored {
			v.add("resolved_wrong", op.EndMs, op.Product, op.User, op.OrderID, "its result says %s, stored=%v", r.State, isStored)
		}
	}
}

// checkPayments: a payment accepted is final (never released afterwards)
// and never after the deadline; a payment refused as too late never
// stored as paid; the topic never carries both a payment and a release
// of one order.
func checkPayments(h *History, v *Verdict, stored map[string]Stored) {
	payTried := map[string]bool{} // a payment that may have been taken
	for _, op := range h.Ops {
		if (op.Kind == opPay || op.Kind == opWebhook) && op.Outcome() != outFail {
			payTried[op.OrderID] = true
		}
	}
	for _, op := range h.Ops {
		if op.Kind != opPay && op.Kind != opWebhook {
			continue
		}
		s, isStored := stored[op.OrderID]
		switch {
		case op.Status == 200 && op.State == "paid":
			if !isStored {
				v.add("paid_not_stored", op.EndMs, op.Product, op.User, op.OrderID, "payment accepted (%s), order not in seckill_order", op.Kind)
				continue
			}
			switch s.Status {
			case 2:
				v.add("paid_then_released", op.EndMs, op.Product, op.User, op.OrderID, "payment accepted (%s), stored released (expired=%v)", op.Kind, s.Expired)
			case 0:
				v.add("payment_not_stored", op.EndMs, op.Product, op.User, op.OrderID, "payment accepted (%s), the order stored unpaid", op.Kind)
			}
			if s.PayByMs > 0 && op.PaidMs >= s.PayByMs {
				v.add("paid_after_deadline", op.EndMs, op.Product, op.User, op.OrderID, "paid at %d, deadline %d (+%d ms)", op.PaidMs, s.PayByMs, op.PaidMs-s.PayByMs)
			}
		case op.Code == "TOO_LATE":
			if isStored && s.Status == 1 && !payTried[op.OrderID] {
				v.add("refused_payment_stored", op.EndMs, op.Product, op.User, op.OrderID, "refused TOO_LATE, stored as paid")
			}
		}
	}
	paid, released := map[string]Event{}, map[string]Event{}
	payBy := map[string]int64{}
	for _, e := range h.Events {
		switch e.Type {
		case "order":
			if e.PayByMs > 0 {
				payBy[e.OrderID] = e.PayByMs
			}
		case "paid":
			paid[e.OrderID] = e
		case "release":
			released[e.OrderID] = e
		}
	}
	for id, e := range paid {
		if r, ok := released[id]; ok {
			v.add("paid_and_released", e.PaidMs, e.Product, e.User, id, "the topic has a payment (paidMs %d) and a release (%s, releasedMs %d)", e.PaidMs, orDefault(r.Reason, "cancelled"), r.ReleasedMs)
		}
		if d := payBy[id]; d > 0 && e.PaidMs >= d {
			v.add("paid_after_deadline", e.PaidMs, e.Product, e.User, id, "the topic's payment at %d, deadline %d", e.PaidMs, d)
		}
	}
}

// checkStatuses: what one shopper saw of one order never goes backwards,
// in her polls and in her event stream each (a stream and the polls run
// side by side: each is ordered in itself).
func checkStatuses(h *History, v *Verdict) {
	type key struct{ order, kind string }
	last := map[key]Op{}
	for _, op := range h.Ops {
		if op.OrderID == "" || op.Status != 200 {
			continue
		}
		var k key
		switch op.Kind {
		case opResult, opResolve:
			k = key{op.OrderID, opResult}
		case opEvent:
			k = key{op.OrderID + "/" + fmt.Sprint(op.Shopper), opEvent}
		default:
			continue
		}
		r := statusRank(op.State)
		if r < 0 {
			continue
		}
		if prev, ok := last[k]; ok {
			pr := statusRank(prev.State)
			if r < pr || (r == 2 && pr == 2 && op.State != prev.State) {
				v.add("status_backwards", op.EndMs, op.Product, op.User, op.OrderID, "%s after %s (%s, edge %d then edge %d)", op.State, prev.State, k.kind, prev.Edge, op.Edge)
			}
		}
		last[k] = op
	}
}

// checkRoom: nobody bought a room's sale without being admitted first,
// and nobody was admitted before the line reached her at the room's rate.
//
// The room admits by the line alone (sale/room State.Frontier, in
// lua/room_place_fn.lua): place P is let in by the first call — a join, a
// poll, or the purchase-token call itself (the gate) — made once N(t) =
// floor(rate * (t - start) / 60000) >= P on the edge's clock. So a token
// granted before any answer said she was admitted is not by itself out of
// turn: the gate admits her (seed 202, 205: a token 10 ms after a join that
// said waiting; seed 112: her polls failed, her edge's Redis link cut). It
// is out of turn when the line had not reached her place by the token's
// answer, or when she never held a place. An answer that says admitted is
// held to the same line.
func checkRoom(h *History, v *Verdict, spec map[string]ProductSpec) {
	admitted := map[string]int64{} // product/user -> first answer that said admitted
	place := map[string]int64{}    // product/user -> her last place in line, from a 200
	for _, op := range h.Ops {
		p := spec[op.Product]
		if !p.Room {
			continue
		}
		k := op.Product + "/" + op.User
		switch op.Kind {
		case opJoin, opQueue:
			if op.Status != 200 {
				continue
			}
			if op.Position > 0 {
				place[k] = op.Position
			}
			if !op.Admitted {
				continue
			}
			if _, ok := admitted[k]; !ok {
				admitted[k] = op.EndMs
			}
			if front, secs := lineReach(p, op.EndMs, edgeSkewMs(h, op)); op.Position > front {
				v.add("admitted_early", op.EndMs, op.Product, op.User, "", "admitted at place %d, %.1fs after the opening; the line at %d/min reaches %d", op.Position, secs, p.AdmitPerMinute, front)
			}
		case opToken:
			if op.Status != 200 {
				continue
			}
			if at, ok := admitted[k]; ok && at <= op.StartMs {
				continue
			}
			pos, held := place[k]
			front, secs := lineReach(p, op.EndMs, edgeSkewMs(h, op))
			if !held || pos > front {
				v.add("out_of_turn", op.EndMs, op.Product, op.User, "", "a purchase token before any answer admitted her (early=%v), at place %d (0: none), %.1fs after the opening; the line at %d/min reaches %d", op.Early, pos, secs, p.AdmitPerMinute, front)
			}
		}
	}
}

// lineSlackMs is what the checker cannot tell apart in time: op times and
// the opening truncated to the ms, and the load's monotonic clock against
// the edges' wall clock over a schedule.
const lineSlackMs = 50

// lineReach is N(t), the highest place a room's line had let in by the
// answer at atMs, as the room computes it on an edge whose clock ran
// skewMs ahead of the load's (a clock fault): floor(rate * (t - start) /
// 60000), the sale's start being the line's origin; a room without a rate
// reaches everyone. The answer's end bounds the moment the edge read its
// clock.
func lineReach(p ProductSpec, atMs, skewMs int64) (front int64, secs float64) {
	secs = float64(atMs-p.OpenMs) / 1000
	if p.AdmitPerMinute <= 0 {
		return math.MaxInt64, secs
	}
	t := atMs + max(skewMs, 0) + lineSlackMs - p.OpenMs
	if t <= 0 {
		return 0, secs
	}
	return int64(p.AdmitPerMinute) * t / 60000, secs
}

// edgeSkewMs is how far ahead of the load's clock op's edge may have read
// its own: a clock fault's offset while the edge ran with it (restarted
// with it after AtMs, restarted without it by HealMs), 0 otherwise. A
// history from before faults carried the offset counts +2 s.
func edgeSkewMs(h *History, op Op) int64 {
	edge := fmt.Sprintf("edge%d", op.Edge)
	var skew int64
	for _, f := range h.Faults {
		if f.Kind != fEdgeClock || f.Target != edge || op.EndMs < f.AtMs || (f.HealMs > 0 && op.StartMs > f.HealMs) {
			continue
		}
		s := f.SkewMs
		if s == 0 {
			s = clockSkew.Milliseconds()
		}
		skew = max(skew, s)
	}
	return skew
}

// saleVerdict: an answer that is the sale deciding, not the sale closed.
func saleVerdict(op *Op) bool {
	return op.Kind == opDo && (op.Status == 200 || op.Status == 409 || op.Status == 410)
}

// reopenAfter is how long after t every edge and every product that was
// tried answered purchases again (ms): for each, the end of the last
// purchase answered without a verdict (503, no answer) before its first
// verdict (200, 409, 410), 0 when the first try after t got one. It is
// -1 when one was tried after t and never got a verdict, -2 when nothing
// was tried. (Measured from the shoppers' own purchases: its resolution
// is their pace, a few per second per edge.)
func reopenAfter(h *History, t int64) int64 {
	cut := func(op *Op) bool { return op.Status == 0 && op.EndMs >= h.LoadEndMs } // the end of the load cut it short
	verdict := map[string]int64{}
	tried := map[string]bool{}
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind != opDo || op.StartMs < t || cut(op) {
			continue
		}
		for _, k := range []string{fmt.Sprintf("edge%d", op.Edge), op.Product} {
			tried[k] = true
			if saleVerdict(op) {
				if at, ok := verdict[k]; !ok || op.EndMs < at {
					verdict[k] = op.EndMs
				}
			}
		}
	}
	if len(tried) == 0 {
		return -2
	}
	closed := map[string]int64{}
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind != opDo || op.StartMs < t || saleVerdict(op) || cut(op) {
			continue
		}
		for _, k := range []string{fmt.Sprintf("edge%d", op.Edge), op.Product} {
			if v, ok := verdict[k]; !ok || op.EndMs <= v {
				closed[k] = max(closed[k], op.EndMs-t)
			}
		}
	}
	var worst int64
	for k := range tried {
		if _, ok := verdict[k]; !ok {
			return -1
		}
		worst = max(worst, closed[k])
	}
	return worst
}

// checkReopen measures every healed fault's reopen time, and fails the
// schedule when, after the last fault healed, a sale or an edge did not
// answer again within reopenWithin.
func checkReopen(h *History, v *Verdict) {
	var lastHeal int64
	for i := range h.Faults {
		f := &h.Faults[i]
		if f.HealMs <= 0 {
			f.ReopenM = -2
			continue
		}
		f.ReopenM = reopenAfter(h, f.HealMs)
		if f.ReopenM >= 0 {
			v.ReopenMs = append(v.ReopenMs, f.ReopenM)
		}
		lastHeal = max(lastHeal, f.HealMs)
	}
	if lastHeal == 0 {
		return
	}
	r := reopenAfter(h, lastHeal)
	v.FinalReopenMs = r
	switch {
	case r == -1:
		v.add("edge_stuck", lastHeal, "", "", "", "after the last fault healed (%.1fs) an edge or a sale never answered a purchase with a verdict again", float64(lastHeal)/1000)
	case r > reopenWithin:
		v.add("reopen_slow", lastHeal, "", "", "", "every sale answered again %.1fs after the last fault healed (at most %.1fs)", float64(r)/1000, float64(reopenWithin)/1000)
	}
}

// CompareReconcile is the last check: `proxy reconcile` must agree with
// the checker about oversold, lost and duplicated.
func CompareReconcile(v *Verdict, rec Reconciled, at int64) {
	switch {
	case !rec.Ran || rec.Err != "" && rec.Products == 0:
		v.add("reconcile_failed", at, "", "", "", "proxy reconcile did not report: %s", rec.Err)
	case (rec.Oversold > 0) != (v.Oversold > 0) || (rec.Lost > 0) != (v.Lost > 0) || (rec.Duplicated > 0) != (v.Duplicated > 0):
		v.add("reconcile_disagrees", at, "", "", "", "proxy reconcile says oversold=%d lost=%d duplicated=%d, the checker %d/%d/%d",
			rec.Oversold, rec.Lost, rec.Duplicated, v.Oversold, v.Lost, v.Duplicated)
	case !rec.Clean && len(v.Violations) == 0:
		v.add("reconcile_disagrees", at, "", "", "", "proxy reconcile is not clean where the checker found nothing: %s", firstLines(rec.Text, 6))
	}
}

// cmdCheck is `bench check HISTORY.json`: the checker run again over a
// schedule's history as -keep kept it (its facts included), e.g. after a
// change to the checker.
func cmdCheck(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "bench check: want one history.json (bench run -s nemesis -keep writes one per schedule)")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "bench check:", err)
		return 1
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		fmt.Fprintln(stderr, "bench check:", err)
		return 1
	}
	sr := ScheduleResult{Seed: h.Seed, Verdict: Check(&h), Faults: h.Faults, Ops: len(h.Ops), history: &h}
	printSchedule(stdout, &sr)
	if len(sr.Verdict.Violations) > 0 {
		return 1
	}
	return 0
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}
