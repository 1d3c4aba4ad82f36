package stock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

// BenchmarkLedgerRedisCPU is Redis' own CPU per purchase, side by side on
// three servers: "orders", a sale warmed with OrderKeys (per order a string
// SET PX and an XADD; its XDEL; its GET + SETRANGE mark); "prev", a sale of
// ledger "b" (per call one HSET per order bucket and one XADD; one XDEL per
// entry; per stored batch one HMGET + one HSET per bucket) called as the
// previous version did (testdata/deduct_b.lua and mark_success_b.lua
// verbatim: three per-key names and 12 strings an attempt, one answer per
// attempt; three strings an order marked); "batches", the same ledger
// called as this version does (the lean calls: nine strings an attempt, the
// codes in one answer; two strings an order marked, its deadline as text). All keep their buyers and tokens in
// hashes (the default). A purchase is the three calls of its life on the
// hot path: the deduction, the outbox entry's removal once Kafka has the
// order (AckOutbox, as the publisher's acker sends it per call's orders),
// and the consumer's success mark (MarkSuccess) with a pay deadline, so
// that the due set's ZADD counts too. batch64 is one hot product's group
// commit (64 attempts a call, every one a new shopper with a new token),
// batch1 a quiet sale (one attempt a call, marked alone). The servers run
// in the same time window, call by call in turn, as
// BenchmarkOrderLayoutRedisCPU does:
//
//	go test -run '^$' -bench LedgerRedisCPU -benchtime 64000x -count 4 ./orders/stock/
//
// orders-us/op, prev-us/op and batches-us/op are the servers' CPU per
// purchase, batches/orders and batches/prev their ratios (deduct-* the
// deductions' alone), *-deduct-us, *-ack-us and *-mark-us the split,
// *-calls/op the commands the scripts and the acks ran per purchase.
// Results: bench/README.md, Findings.
func BenchmarkLedgerRedisCPU(b *testing.B) {
	for _, size := range []int{64, 1} {
		b.Run("batch"+strconv.Itoa(size), func(b *testing.B) {
			orders, prev, batches := newLedgerBench(b, true, false, size), newLedgerBench(b, false, true, size), newLedgerBench(b, false, false, size)
			ls := []*ledgerBench{orders, prev, batches}
			b.ResetTimer()
			for _, step := range []func(*ledgerBench, *testing.B, int){(*ledgerBench).deduct, (*ledgerBench).ack, (*ledgerBench).mark} {
				for _, l := range ls {
					l.snap(b)
				}
				for i := range orders.calls {
					for _, l := range ls {
						step(l, b, i)
					}
				}
			}
			for _, l := range ls {
				l.snap(b)
			}
			b.StopTimer()
			n := float64(b.N)
			for _, l := range ls {
				l.check(b)
				b.ReportMetric((l.cpu[3]-l.cpu[0])/n, l.name+"-us/op")
				b.ReportMetric((l.cpu[1]-l.cpu[0])/n, l.name+"-deduct-us/op")
				b.ReportMetric((l.cpu[2]-l.cpu[1])/n, l.name+"-ack-us/op")
				b.ReportMetric((l.cpu[3]-l.cpu[2])/n, l.name+"-mark-us/op")
				b.ReportMetric((l.cmds[3]-l.cmds[0])/n, l.name+"-calls/op")
			}
			for _, o := range []*ledgerBench{orders, prev} {
				b.ReportMetric((batches.cpu[3]-batches.cpu[0])/(o.cpu[3]-o.cpu[0]), "batches/"+o.name)
				b.ReportMetric((batches.cpu[1]-batches.cpu[0])/(o.cpu[1]-o.cpu[0]), "deduct-batches/"+o.name)
			}
		})
	}
}

// ledgerBench is one ledger's server, store and prepared calls.
type ledgerBench struct {
	name      string
	orderKeys bool
	prev      bool // the previous version's deduction call (prevCall)
	s         *Store
	calls     []*batch
	ids       [][]int64  // each call's order ids
	outboxIDs [][]string // each call's Outcome.OutboxIDs, once deducted
	redisMeter
}

const ledgerProduct = "ledger"

func newLedgerBench(b *testing.B, orderKeys, prev bool, size int) *ledgerBench {
	srv := redistest.New(b)
	ctx := context.Background()
	s, err := Open(ctx, srv.Addr(), testOptions(Options{OrderKeys: orderKeys}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	p := ledgerProduct
	if _, err := s.Warm(ctx, SaleStock{ProductID: p, Stock: 1 << 50, Limit: 1 << 30, EndMs: time.Now().Add(time.Hour).UnixMilli()}); err != nil {
		b.Fatal(err)
	}
	l := &ledgerBench{name: map[bool]string{true: "orders", false: "batches"}[orderKeys], orderKeys: orderKeys, prev: prev, s: s}
	if prev {
		l.name = "prev"
	}
	now := time.Now().UnixMilli()
	// The calls are built before the clock starts: only Redis is measured.
	pr := s.product(p)
	for lo := 0; lo < b.N; lo += size {
		bt := new(batch)
		var ids []int64
		for i := lo; i < min(lo+size, b.N); i++ {
			a := attempt(p, "user"+strconv.Itoa(i), 1, 1<<30)
			// As a hot product's attempts come: ~30 a millisecond (the
			// creation times, and so the pay deadlines, mostly distinct
			// across calls, a few alike within one).
			at := now + int64(i/30)
			a.CreatedMs, a.TokenExpiresMs, a.PayByMs = at, at+600_000, at+15*time.Minute.Milliseconds()
			bt.send = append(bt.send, &call{a: a})
			ids = append(ids, a.ID)
		}
		if prev {
			var as []Attempt
			for _, c := range bt.send {
				as = append(as, c.a)
			}
			bt.keys, bt.args = prevCall(s, p, now, as...)
		} else {
			bt.build(pr, s)
		}
		l.calls = append(l.calls, bt)
		l.ids = append(l.ids, ids)
	}
	l.outboxIDs = make([][]string, len(l.calls))
	// Loads the scripts (on a sale that is not warmed: nothing is written).
	const none = "none"
	if err := deductScript.Exec(ctx, s.c, []string{StockKey(none), OutboxKey(none), MetaKey(none)}, []string{none, s.graceMs, s.orderTTLMs, s.fenceArg()}).Error(); err != nil {
		b.Fatal(err)
	}
	if err := prevDeductScript.Exec(ctx, s.c, []string{StockKey(none), OutboxKey(none), MetaKey(none)}, []string{none, s.graceMs, s.orderTTLMs, s.fenceArg()}).Error(); err != nil {
		b.Fatal(err)
	}
	if err := prevMarkScript.Exec(ctx, s.c, []string{DueKey(none)}, []string{"0"}).Error(); err != nil {
		b.Fatal(err)
	}
	if _, err := s.MarkSuccess(ctx, none, 1); err != nil {
		b.Fatal(err)
	}
	return l
}

func (l *ledgerBench) snap(b *testing.B) { l.snapOf(b, l.s.c) }

func (l *ledgerBench) deduct(b *testing.B, i int) {
	c := l.calls[i]
	ids := make([]string, len(c.send))
	if l.prev {
		res, err := prevDeductScript.Exec(context.Background(), l.s.c, c.keys, c.args).ToArray()
		placed(b, l.name, res, err, len(c.send))
		for j := range ids {
			ids[j], _ = res[j+1].ToString()
		}
	} else {
		res, err := deductScript.Exec(context.Background(), l.s.c, c.keys, c.args).ToArray()
		for j, o := range placedLean(b, l.name, res, err, len(c.send)) {
			ids[j] = o.OutboxID
		}
	}
	l.outboxIDs[i] = ids
}

func (l *ledgerBench) ack(b *testing.B, i int) {
	if err := l.s.AckOutbox(context.Background(), ledgerProduct, l.outboxIDs[i]...); err != nil {
		b.Fatal(err)
	}
}

func (l *ledgerBench) mark(b *testing.B, i int) {
	if l.prev {
		keys, args := prevMarkCall(ledgerProduct, l.ids[i])
		if n, err := prevMarkScript.Exec(context.Background(), l.s.c, keys, args).AsInt64(); err != nil || n != int64(len(l.ids[i])) {
			b.Fatalf("%s mark: %d, %v", l.name, n, err)
		}
		return
	}
	if n, err := l.s.MarkSuccess(context.Background(), ledgerProduct, l.ids[i]...); err != nil || n != len(l.ids[i]) {
		b.Fatalf("%s mark: %d, %v", l.name, n, err)
	}
}

// check: the sale has the ledger measured, its outbox is empty, its first
// order marked.
func (l *ledgerBench) check(b *testing.B) {
	ctx := context.Background()
	id := l.ids[0][0]
	o, ok, err := l.s.OrderState(ctx, ledgerProduct, id)
	if batchedSale(b, l.s, ledgerProduct) == l.orderKeys || !ok || err != nil || o.State != StateSuccess {
		b.Fatalf("%s ledger: order %+v %v %v", l.name, o, ok, err)
	}
	if (orderHome(b, l.s, ledgerProduct, id) == OrderKey(ledgerProduct, id)) != l.orderKeys {
		b.Fatalf("%s ledger: order %d in %s", l.name, id, orderHome(b, l.s, ledgerProduct, id))
	}
	if n, err := l.s.OutboxLen(ctx, ledgerProduct); err != nil || n != 0 {
		b.Fatalf("%s ledger: %d outbox entries left (%v)", l.name, n, err)
	}
}
