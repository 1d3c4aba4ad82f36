package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"flashgate/orders/orderstore"
	"flashgate/orders/reconcile"
	"flashgate/orders/stock"
	"flashgate/proxy/dashboard"
	"flashgate/sale/room"
)

// Report is one sale's story, told after the sale: what the order store
// holds (every order, its payment or expiry), what the edges kept in the
// sale's timeline (answers by code and latency by second, the room's line,
// the fences and breakers), the waiting room's lottery and its audit, and
// reconcile's verdict. WriteHTML draws it; its JSON is this struct.
type Report struct {
	ProductID   string    `json:"productId"`
	GeneratedAt time.Time `json:"generatedAt"`
	Sale        SaleFacts `json:"sale"`
	Orders      Orders    `json:"orders"`
	// FromSec..ToSec is the span the per-second series cover (unix s).
	FromSec int64 `json:"fromSec"`
	ToSec   int64 `json:"toSec"`
	// Sold is the units of the orders created each second; Paid and
	// Expired the units paid, and released by the pay deadline, each
	// second (from the order store).
	Sold    []int64 `json:"sold"`
	Paid    []int64 `json:"paid"`
	Expired []int64 `json:"expired"`
	// Edges is what the edges kept (nil when no timeline survives).
	Edges *EdgeStory `json:"edges"`
	// Room is the waiting room's story (nil for a sale without one).
	Room *RoomStory `json:"room,omitempty"`
	// Incidents are the spans the sale was fenced (recovering), degraded,
	// or had a breaker open on some edge, from the timeline.
	Incidents []Span   `json:"incidents"`
	Reconcile *Verdict `json:"reconcile"`
	// Notes say what the report could not read, and what that leaves out.
	Notes []string `json:"notes"`
}

// SaleFacts are the sale's figures in Redis (its meta).
type SaleFacts struct {
	Known     bool   `json:"known"` // false: Redis has no such sale (lost, or never warmed)
	Initial   int64  `json:"initial"`
	Restocked int64  `json:"restocked"`
	Released  int64  `json:"released"`
	Paid      int64  `json:"paid"`
	Expired   int64  `json:"expired"`
	Remaining int64  `json:"remaining"`
	Limit     int    `json:"limit"`
	Price     string `json:"price"`
	StartMs   int64  `json:"startMs"`
	EndMs     int64  `json:"endMs"`
	Fence     string `json:"fence,omitempty"`
}

// Orders are the order store's counts (orders, units) by final status.
type Orders struct {
	Orders          int64 `json:"orders"`
	Units           int64 `json:"units"`
	UnpaidOrders    int64 `json:"unpaidOrders"`
	UnpaidUnits     int64 `json:"unpaidUnits"`
	PaidOrders      int64 `json:"paidOrders"`
	PaidUnits       int64 `json:"paidUnits"`
	CancelledOrders int64 `json:"cancelledOrders"`
	CancelledUnits  int64 `json:"cancelledUnits"`
	ExpiredOrders   int64 `json:"expiredOrders"`
	ExpiredUnits    int64 `json:"expiredUnits"`
	Buyers          int   `json:"buyers"`
	// The first and the last order's creation, unix ms.
	FirstMs int64 `json:"firstMs"`
	LastMs  int64 `json:"lastMs"`
	// PayMs are percentiles of how long paid orders took to be paid
	// after they were created, ms (the store keeps seconds).
	PayMs map[string]int64 `json:"payMs"`
}

// EdgeStory is the edges' timeline summed (Aggregate) with its totals.
type EdgeStory struct {
	Series
	Answers map[string]uint64 `json:"answers"` // every answer to `do` by code
	Total   uint64            `json:"total"`
	// Latency are the `do` percentiles of the whole sale, ms.
	Latency map[string]float64 `json:"latency"`
	Records int                `json:"records"`
}

// RoomStory is the waiting room: how many joined and were let in, how long
// they waited, and the lottery's audit.
type RoomStory struct {
	Joined   int64 `json:"joined"`
	Admitted int64 `json:"admitted"`
	// Waits are the waits of the shoppers let in, seconds (see waits).
	Waits   WaitStats `json:"waits"`
	Lottery *Audit    `json:"lottery,omitempty"`
}

// WaitStats summarise the waits.
type WaitStats struct {
	Counted int64   `json:"counted"`
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	// Histogram counts the waits by the Bounds' upper edges (seconds; the
	// last bucket is beyond them).
	Bounds    []float64 `json:"bounds"`
	Histogram []int64   `json:"histogram"`
}

// Audit checks the lottery from what it published: the commit is the
// SHA-256 of the revealed key, and the ranking is the pre-queue's tickets
// ordered by HMAC-SHA256(key, ticket).
type Audit struct {
	Order    string `json:"order"`
	Commit   string `json:"commit"`
	Key      string `json:"key"`
	Members  int64  `json:"members"`
	Ranked   bool   `json:"ranked"`
	CommitOK bool   `json:"commitOk"`
	RankOK   bool   `json:"rankOk"`
	Checked  int    `json:"checked"` // tickets whose place was recomputed
	Verdict  string `json:"verdict"`
}

// Span is one stretch of seconds in a state.
type Span struct {
	Kind    string `json:"kind"` // recovering, degraded, breaker_open
	FromSec int64  `json:"fromSec"`
	ToSec   int64  `json:"toSec"`
}

// Verdict is reconcile's answer for the sale.
type Verdict struct {
	Clean   bool              `json:"clean"`
	Text    string            `json:"text"`
	Product reconcile.Product `json:"product"`
	Error   string            `json:"error,omitempty"`
}

// Sources are what a report reads. Reconcile may be nil (not run).
type Sources struct {
	Orders    orderstore.Store
	Stock     *stock.Store
	Reconcile func(ctx context.Context, productID string) (reconcile.Report, error)
	Now       func() time.Time
}

// pageSize is how many order rows one read takes.
const pageSize = 5000

// Build reads the sale's story. It fails only when the order store cannot
// be read; whatever else is missing is said in Notes.
func Build(ctx context.Context, src Sources, productID string) (*Report, error) {
	now := time.Now
	if src.Now != nil {
		now = src.Now
	}
	r := &Report{ProductID: productID, GeneratedAt: now().UTC(), Incidents: []Span{}, Notes: []string{}}
	rows, err := allRows(ctx, src.Orders, productID)
	if err != nil {
		return nil, err
	}
	r.Orders = countOrders(rows)

	if info, ok, err := src.Stock.SaleInfo(ctx, productID); err != nil {
		r.note("Redis could not be read (%v): the sale's figures, the edges' timeline and the room are missing.", err)
	} else if ok {
		r.Sale = SaleFacts{Known: true, Initial: info.Initial, Restocked: info.Restocked, Released: info.Released, Paid: info.Paid,
			Expired: info.Expired, Remaining: info.Remaining, Limit: info.Limit, Price: cents(info.Price),
			StartMs: info.StartMs, EndMs: info.EndMs, Fence: info.Fence}
	} else {
		r.note("Redis has no sale %s: its figures are the order store's only.", productID)
	}

	var recs []Second
	if raw, err := src.Stock.Timeline(ctx, productID, 0); err != nil {
		r.note("The edges' timeline could not be read (%v): answers by code, latency and the room's line are missing.", err)
	} else {
		bad := 0
		for _, b := range raw {
			s, err := DecodeSecond(b)
			if err != nil {
				bad++
				continue
			}
			recs = append(recs, s)
		}
		if bad > 0 {
			r.note("%d timeline record(s) could not be read and were left out.", bad)
		}
		if len(raw) == 0 {
			r.note("No edge timeline survives for this sale (Redis lost it, it expired after %v, or no edge of this version served it): answers by code and latency are missing; sales and payments come from the order store.", stock.TimelineTTL)
		} else if len(raw) >= stock.TimelineMax {
			r.note("The timeline holds its bound of %d records: its oldest seconds were trimmed.", stock.TimelineMax)
		}
	}

	r.FromSec, r.ToSec = span(rows, recs, r.Sale)
	n := int(r.ToSec - r.FromSec + 1)
	r.Sold, r.Paid, r.Expired = make([]int64, n), make([]int64, n), make([]int64, n)
	add := func(s []int64, ms, v int64) {
		if k := ms/1000 - r.FromSec; ms > 0 && k >= 0 && k < int64(n) {
			s[k] += v
		}
	}
	for i := range rows {
		row := &rows[i]
		add(r.Sold, row.CreatedMs, int64(row.Qty))
		switch {
		case row.Status == orderstore.StatusPaid:
			add(r.Paid, row.PaidMs, int64(row.Qty))
		case row.Status == orderstore.StatusCancelled && row.Expired:
			add(r.Expired, row.UpdatedMs, int64(row.Qty))
		}
	}

	if len(recs) > 0 {
		s := Aggregate(recs, r.FromSec, r.ToSec)
		e := &EdgeStory{Series: s, Answers: map[string]uint64{}, Records: len(recs), Latency: Quantiles(s.Buckets)}
		names := codeNames()
		for c, series := range s.Codes {
			var sum uint64
			for _, v := range series {
				sum += v
			}
			if sum > 0 {
				e.Answers[names[c]] = sum
			}
			e.Total += sum
		}
		r.Edges = e
		r.Incidents = incidents(s)
		if room := roomStory(s); room != nil {
			r.Room = room
		}
	}
	if r.Sale.Known {
		r.auditLottery(ctx, src.Stock, now().UnixMilli())
	}
	if src.Reconcile != nil {
		r.Reconcile = verdict(ctx, src.Reconcile, productID)
	} else {
		r.note("Reconcile was not run.")
	}
	return r, nil
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func codeNames() []string {
	out := make([]string, 0, dashboard.NumCodes)
	for _, c := range dashboard.Codes {
		out = append(out, strconv.Itoa(c))
	}
	return append(out, "other")
}

func cents(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// allRows reads every row of the product, page by page.
func allRows(ctx context.Context, st orderstore.Store, productID string) ([]orderstore.Row, error) {
	var out []orderstore.Row
	for after := int64(0); ; {
		page, err := st.Rows(ctx, productID, after, pageSize)
		if err != nil {
			return nil, fmt.Errorf("report: order store: %w", err)
		}
		out = append(out, page...)
		if len(page) < pageSize {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

func countOrders(rows []orderstore.Row) Orders {
	o := Orders{PayMs: map[string]int64{}}
	buyers := map[string]bool{}
	var payMs []int64
	for i := range rows {
		r := &rows[i]
		q := int64(r.Qty)
		o.Orders++
		o.Units += q
		buyers[r.UserID] = true
		if o.FirstMs == 0 || r.CreatedMs < o.FirstMs {
			o.FirstMs = r.CreatedMs
		}
		o.LastMs = max(o.LastMs, r.CreatedMs)
		switch {
		case r.Status == orderstore.StatusUnpaid:
			o.UnpaidOrders, o.UnpaidUnits = o.UnpaidOrders+1, o.UnpaidUnits+q
		case r.Status == orderstore.StatusPaid:
			o.PaidOrders, o.PaidUnits = o.PaidOrders+1, o.PaidUnits+q
			if r.PaidMs > 0 {
				payMs = append(payMs, max(0, r.PaidMs-r.CreatedMs))
			}
		case r.Expired:
			o.ExpiredOrders, o.ExpiredUnits = o.ExpiredOrders+1, o.ExpiredUnits+q
		default:
			o.CancelledOrders, o.CancelledUnits = o.CancelledOrders+1, o.CancelledUnits+q
		}
	}
	o.Buyers = len(buyers)
	slices.Sort(payMs)
	for name, q := range map[string]float64{"p50": 0.5, "p90": 0.9, "max": 1} {
		if len(payMs) > 0 {
			o.PayMs[name] = payMs[min(len(payMs)-1, int(q*float64(len(payMs))))]
		}
	}
	return o
}

// span is the seconds the series cover: from the first thing that happened
// (an order, a record, the sale's start when known and near) to the last,
// at most a day.
func span(rows []orderstore.Row, recs []Second, sale SaleFacts) (from, to int64) {
	see := func(sec int64) {
		if sec <= 0 {
			return
		}
		if from == 0 || sec < from {
			from = sec
		}
		to = max(to, sec)
	}
	for i := range rows {
		see(rows[i].CreatedMs / 1000)
		if rows[i].Status == orderstore.StatusPaid {
			see(rows[i].PaidMs / 1000)
		}
		if rows[i].Expired {
			see(rows[i].UpdatedMs / 1000)
		}
	}
	for i := range recs {
		see(recs[i].Sec)
	}
	if from == 0 {
		now := time.Now().Unix()
		return now, now
	}
	if sale.StartMs > 0 && sale.StartMs/1000 < from && from-sale.StartMs/1000 < 3600 {
		from = sale.StartMs / 1000
	}
	if to-from >= maxSpan {
		to = from + maxSpan - 1
	}
	return from, to
}

// incidents finds the spans of each flag in the summed timeline.
func incidents(s Series) []Span {
	out := []Span{}
	for _, f := range []struct {
		flag uint8
		kind string
	}{{FlagRecovering, "recovering"}, {FlagDegraded, "degraded"}, {FlagBreakerOpen, "breaker_open"}} {
		start := int64(-1)
		for k, fl := range s.Flags {
			on := fl&f.flag != 0
			if on && start < 0 {
				start = int64(k)
			}
			if !on && start >= 0 {
				out = append(out, Span{Kind: f.kind, FromSec: s.FromSec + start, ToSec: s.FromSec + int64(k) - 1})
				start = -1
			}
		}
		if start >= 0 {
			out = append(out, Span{Kind: f.kind, FromSec: s.FromSec + start, ToSec: s.ToSec})
		}
	}
	slices.SortFunc(out, func(a, b Span) int { return int(a.FromSec - b.FromSec) })
	return out
}

// waitBounds are the wait histogram's upper edges, seconds.
var waitBounds = []float64{5, 15, 30, 60, 120, 300, 600, 1800, 3600}

// roomStory reads the room from the timeline, or nil when the sale has
// none. The waits come from the line's two curves, as queueing theory
// reads them: the j-th shopper to join is, in a first-come room, the j-th
// let in, so its wait is the time between the two curves reaching j. The
// pre-queue's shoppers all joined before the opening and are ranked by the
// lottery: their wait counts from the first second of the timeline the
// line moved, which is when they could first be let in. Both curves are
// sampled once a second, so a wait is known to about a second.
func roomStory(s Series) *RoomStory {
	last := len(s.Joined) - 1
	if last < 0 || s.Joined[last] < 0 {
		return nil
	}
	rs := &RoomStory{Joined: s.Joined[last], Admitted: max(0, s.Admitted[last])}
	// joinedAt[j], admittedAt[j]: the second the curve reached j+1.
	var joinedAt, admittedAt []int64
	prevJ, prevA := int64(0), int64(0)
	opened := int64(-1)
	for k := range s.Joined {
		sec := s.FromSec + int64(k)
		if j := s.Joined[k]; j > prevJ {
			for range j - prevJ {
				joinedAt = append(joinedAt, sec)
			}
			prevJ = j
		}
		if a := s.Admitted[k]; a > prevA {
			if opened < 0 {
				opened = sec
			}
			for range a - prevA {
				admittedAt = append(admittedAt, sec)
			}
			prevA = a
		}
	}
	n := min(len(joinedAt), len(admittedAt))
	waits := make([]float64, 0, n)
	for j := range n {
		w := admittedAt[j] - max(joinedAt[j], opened)
		waits = append(waits, float64(max(0, w)))
	}
	slices.Sort(waits)
	ws := WaitStats{Counted: int64(n), Bounds: waitBounds, Histogram: make([]int64, len(waitBounds)+1)}
	if n > 0 {
		at := func(q float64) float64 { return waits[min(n-1, int(q*float64(n)))] }
		ws.P50, ws.P90, ws.P99, ws.Max = at(0.5), at(0.9), at(0.99), waits[n-1]
	}
	for _, w := range waits {
		i, _ := slices.BinarySearch(waitBounds, w)
		ws.Histogram[i]++
	}
	rs.Waits = ws
	return rs
}

// auditLottery checks the lottery of a sale with a room drawn by lottery.
func (r *Report) auditLottery(ctx context.Context, st *stock.Store, nowMs int64) {
	info, ok, err := st.RoomInfo(ctx, r.ProductID, nowMs)
	if err != nil {
		r.note("The waiting room could not be read (%v): no lottery audit.", err)
		return
	}
	if !ok || info.Commit == "" {
		return // no room, or a first-come one: nothing drawn
	}
	if r.Room == nil {
		r.Room = &RoomStory{Joined: info.Joined, Admitted: info.Admitted}
	}
	a := &Audit{Order: "lottery", Commit: info.Commit, Key: info.Key, Members: info.Members, Ranked: info.Ranked}
	r.Room.Lottery = a
	switch {
	case info.Key == "" || !info.Frozen:
		a.Verdict = "Not drawn yet: the key is revealed at the opening."
		return
	case room.Commit(info.Key) != info.Commit:
		a.Verdict = "FAILED: the revealed key does not match the commitment published before the opening."
		return
	}
	a.CommitOK = true
	ranking, err := st.RoomRanking(ctx, r.ProductID)
	if err != nil {
		a.Verdict = "The ranking could not be read: " + err.Error()
		return
	}
	want, err := room.Rank(info.Key, ranking)
	if err != nil {
		a.Verdict = "The key is not hex: " + err.Error()
		return
	}
	a.Checked = len(ranking)
	a.RankOK = slices.Equal(want, ranking) && int64(len(ranking)) == info.Members
	if a.RankOK {
		a.Verdict = fmt.Sprintf("OK: the key matches its commitment, and all %d places follow HMAC-SHA256(key, ticket).", len(ranking))
	} else {
		a.Verdict = fmt.Sprintf("FAILED: the stored ranking (%d tickets, %d members) is not the order HMAC-SHA256(key, ticket) gives.", len(ranking), info.Members)
	}
}

func verdict(ctx context.Context, run func(context.Context, string) (reconcile.Report, error), productID string) *Verdict {
	rep, err := run(ctx, productID)
	v := &Verdict{Clean: err == nil && rep.Clean()}
	var buf bytes.Buffer
	rep.Print(&buf)
	v.Text = buf.String()
	for _, p := range rep.Products {
		if p.ProductID == productID {
			v.Product = p
		}
	}
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		v.Error = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			v.Error += " (timed out)"
		}
	}
	return v
}
