package stock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"flashgate/internal/redistest"
)

// BenchmarkOrderLayoutRedisCPU is Redis' own CPU per purchase (INFO's
// used_cpu_sys + used_cpu_user, before and after, over the purchases) for
// the two order layouts, side by side: "hash" runs the older version's
// deduct.lua and mark_success.lua verbatim (testdata), "string" this one's.
// Each purchase is one attempt of a 32-attempt group-commit call (what a
// busy edge sends) with a pay deadline, then its success mark in a 32-order
// call, as the consumer makes it. The two layouts run on two redis-servers
// in the same time window, call by call alternating A and B, so that
// whatever else the machine runs costs both the same; each -count round
// gets fresh servers:
//
//	go test -run '^$' -bench OrderLayoutRedisCPU -benchtime 128000x -count 6 ./orders/stock/
//
// hash-us/op and string-us/op are the two servers' CPU per purchase
// (deduct and mark), string/hash their ratio; *-deduct-us and *-mark-us
// split them between the two calls. *-calls/op counts the commands the
// scripts ran per purchase (INFO commandstats, EVALSHA and INFO left out),
// which the machine's noise does not move.
//
// Measured on the shared 2-core dev VM (Redis 7.0.15, the command above):
// string/hash 0.948–0.967 per round, median 0.957, of Redis' CPU per
// purchase (hash 22.6–26.2 µs, string 21.7–25.2). The deduction: one call
// fewer (6.09 → 5.09 per purchase, the rest is per batch), 0.92–0.935 of
// the CPU (15.6–18.5 → 14.4–17.2 µs). The mark: no gain, 1.01–1.04 (6.9–8.6
// → 7.0–8.8 µs): GET + SETRANGE cost what HMGET + HSET did, the per-call
// cost dominates. Tried and reverted: reading the mark's payby with an
// unanchored '(%d+)$' (Lua tries it from every byte): the mark 1.30×.
// Run as two separate benchmarks, one layout after the other, the
// machine's noise (±25 % between runs) hid the difference altogether.
func BenchmarkOrderLayoutRedisCPU(b *testing.B) {
	hash, str := newLayoutBench(b, true), newLayoutBench(b, false)
	b.ResetTimer()
	hash.snap(b)
	str.snap(b)
	for i := range hash.calls {
		hash.deduct(b, i)
		str.deduct(b, i)
	}
	hash.snap(b)
	str.snap(b)
	for i := range hash.calls {
		hash.mark(b, i)
		str.mark(b, i)
	}
	hash.snap(b)
	str.snap(b)
	b.StopTimer()
	for _, l := range []*layoutBench{hash, str} {
		l.check(b)
		n := float64(b.N)
		b.ReportMetric((l.cpu[2]-l.cpu[0])/n, l.name+"-us/op")
		b.ReportMetric((l.cpu[1]-l.cpu[0])/n, l.name+"-deduct-us/op")
		b.ReportMetric((l.cpu[2]-l.cpu[1])/n, l.name+"-mark-us/op")
		b.ReportMetric((l.cmds[2]-l.cmds[0])/n, l.name+"-calls/op")
	}
	b.ReportMetric((str.cpu[2]-str.cpu[0])/(hash.cpu[2]-hash.cpu[0]), "string/hash")
}

// layoutBench is one layout's server, store, scripts and prepared calls.
type layoutBench struct {
	name         string
	hash         bool
	s            *Store
	deductScript *rueidis.Lua
	markScript   *rueidis.Lua
	calls        []layoutCall
	firstID      int64
	redisMeter
}

type layoutCall struct {
	dk, da, mk, ma []string
	n              int // purchases
}

const layoutProduct = "cpu"

func newLayoutBench(b *testing.B, hash bool) *layoutBench {
	const batch, p = 32, layoutProduct
	srv := redistest.New(b)
	ctx := context.Background()
	// Per-key buyers and tokens: the only layout the older script knows,
	// and the shape of call it makes (BenchmarkBuyerLayoutRedisCPU has the
	// hashes).
	s, err := Open(ctx, srv.Addr(), testOptions(Options{BuyerKeys: true, OrderKeys: true}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Warm(ctx, SaleStock{ProductID: p, Stock: 1 << 50, Limit: 1 << 30, EndMs: time.Now().Add(time.Hour).UnixMilli()}); err != nil {
		b.Fatal(err)
	}
	l := &layoutBench{name: "string", hash: hash, s: s, deductScript: deductScript, markScript: markSuccessScript}
	if hash {
		l.name, l.deductScript, l.markScript = "hash", hashDeductScript, hashMarkScript
	}
	now := time.Now().UnixMilli()
	payBy := i64(now + 15*time.Minute.Milliseconds())
	// The calls are built before the clock starts: only Redis is measured.
	for lo := 0; lo < b.N; lo += batch {
		c := layoutCall{
			dk: []string{StockKey(p), OutboxKey(p), MetaKey(p)},
			da: []string{p, s.graceMs, s.orderTTLMs, s.fenceArg()},
			mk: []string{DueKey(p)},
		}
		for i := lo; i < min(lo+batch, b.N); i++ {
			id := orderSeq.Add(1)
			if l.firstID == 0 {
				l.firstID = id
			}
			user := "user" + strconv.Itoa(i%10_000)
			c.dk = append(c.dk, BuyerKey(p, user), OrderKey(p, id), TokenKey(p, strconv.FormatInt(id, 16)))
			c.da = append(c.da, user, "1", "1073741824", i64(id), "1999", i64(now), "600000", "1", payBy)
			c.mk = append(c.mk, OrderKey(p, id))
			c.ma = append(c.ma, i64(id))
		}
		c.n = len(c.ma)
		if !hash {
			c.da = append(c.da, s.layoutArg)
			// This version's mark: the order bucket hashes first (none
			// holds these orders: they are strings), then the order keys.
			ids := make([]int64, len(c.ma))
			for j, a := range c.ma {
				ids[j], _ = strconv.ParseInt(a, 10, 64)
			}
			c.mk, c.ma = markSuccessCall(p, ids)
		}
		l.calls = append(l.calls, c)
	}
	// Loads both scripts.
	if err := l.deductScript.Exec(ctx, s.c, []string{StockKey(p), OutboxKey(p), MetaKey(p)}, []string{p, s.graceMs, s.orderTTLMs, s.fenceArg()}).Error(); err != nil {
		b.Fatal(err)
	}
	if err := l.markScript.Exec(ctx, s.c, []string{DueKey(p)}, nil).Error(); err != nil {
		b.Fatal(err)
	}
	return l
}

// redisMeter is a benchmark's Redis CPU and command count at each snap.
type redisMeter struct{ cpu, cmds []float64 }

func (m *redisMeter) snapOf(b *testing.B, c rueidis.Client) {
	m.cpu = append(m.cpu, redisCPU(b, c))
	m.cmds = append(m.cmds, redisCalls(b, c))
}

func (l *layoutBench) snap(b *testing.B) { l.snapOf(b, l.s.c) }

// placed fails the benchmark unless a deduction call answered for all n
// attempts and placed the first.
func placed(b *testing.B, name string, res []rueidis.RedisMessage, err error, n int) {
	if err != nil || len(res) != n+1 {
		b.Fatalf("%s deduct: %d values, %v", name, len(res), err)
	}
	if _, err := res[1].ToString(); err != nil {
		b.Fatalf("%s deduct did not place: %v", name, res[1])
	}
}

// placedLean is placed for a lean call's reply (deduct.lua): it returns the
// attempts' outcomes.
func placedLean(b *testing.B, name string, res []rueidis.RedisMessage, err error, n int) []Outcome {
	if err != nil {
		b.Fatalf("%s deduct: %v", name, err)
	}
	outs, err := leanAnswers(res, n)
	if err != nil || outs[0].Code != OK {
		b.Fatalf("%s deduct did not place: %v %v", name, outs, err)
	}
	return outs
}

func (l *layoutBench) deduct(b *testing.B, i int) {
	c := l.calls[i]
	res, err := l.deductScript.Exec(context.Background(), l.s.c, c.dk, c.da).ToArray()
	placed(b, l.name, res, err, c.n)
}

func (l *layoutBench) mark(b *testing.B, i int) {
	c := l.calls[i]
	if n, err := l.markScript.Exec(context.Background(), l.s.c, c.mk, c.ma).AsInt64(); err != nil || n != int64(c.n) {
		b.Fatalf("%s mark: %d, %v", l.name, n, err)
	}
}

// check: the orders have the layout measured, and are marked.
func (l *layoutBench) check(b *testing.B) {
	o, ok, err := l.s.OrderState(context.Background(), layoutProduct, l.firstID)
	if typ := keyType(b, l.s, OrderKey(layoutProduct, l.firstID)); typ != map[bool]string{true: "hash", false: "string"}[l.hash] ||
		!ok || err != nil || o.State != StateSuccess {
		b.Fatalf("%s layout: order is a %s, %+v %v %v", l.name, typ, o, ok, err)
	}
}

// redisCPU is the server's used_cpu_sys + used_cpu_user, µs.
func redisCPU(b *testing.B, c rueidis.Client) float64 {
	b.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", line, err)
			}
			total += f * 1e6
		}
	}
	return total
}

// redisCalls is the commands the server ran so far (INFO commandstats),
// scripts' own calls included, less the script calls and INFO themselves.
func redisCalls(b *testing.B, c rueidis.Client) float64 {
	b.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_evalsha" || name == "cmdstat_eval" || name == "cmdstat_info" {
			continue
		}
		n, _, _ := strings.Cut(stats, ",")
		f, err := strconv.ParseFloat(n, 64)
		if err != nil {
			b.Fatalf("INFO %s: %v", line, err)
		}
		total += f
	}
	return total
}

// BenchmarkBuyerLayoutRedisCPU is Redis' own CPU per purchase of the
// deduction in the two layouts of buyer counts and used tokens (keys.go):
// "keys" a sale warmed with BuyerKeys (SET NX PX of the token, GET + SET
// PXAT of the count per attempt), "hashes" one warmed without (one HMGET,
// one HSET and one expiry per buyer hash and token hash the batch
// touches). The calls are the edge's own (batch.build, both layouts' keys),
// 100 attempts each (a busy edge's group commit), one token bucket; the two servers run in the same time window, call by call
// alternating, as BenchmarkOrderLayoutRedisCPU does:
//
//	go test -run '^$' -bench BuyerLayoutRedisCPU -benchtime 128000x -count 4 ./orders/stock/
//
// keys-us/op and hashes-us/op are the two servers' CPU per purchase,
// hashes/keys their ratio, *-calls/op the commands the script ran per
// purchase. Every attempt is a new shopper with a new token, as in a sale
// with a limit of one.
//
// Measured on the shared 2-core dev VM (Redis 7.0.15, the command above,
// 4 rounds): hashes/keys 0.830–0.861, median 0.844; keys 19.9–21.9 µs
// (median 20.5), hashes 16.6–18.9 µs (median 17.3): ~3.2 µs less Redis CPU
// per purchase, and 5.03 → 2.54 commands. (The machine's load moves the
// absolute figures by ±25 % between runs, not the ratio: in quieter runs
// keys 12.8–15.4 µs, hashes 11.6–13.9.) Where the rest goes: a purchase's
// order SET and XADD (~2.5 µs), passing ~15 arguments (~1.6 µs), the Lua
// around the calls, and the dicts growing (dictFind/dictRehash are a
// quarter of the samples in a perf profile of the hash run). First cut:
// parsing each attempt's numbers twice and building the writes from
// pairs() cost ~0.8 µs of the gain.
func BenchmarkBuyerLayoutRedisCPU(b *testing.B) {
	keys, hashes := newBuyerBench(b, true), newBuyerBench(b, false)
	b.ResetTimer()
	keys.snap(b)
	hashes.snap(b)
	for i := range keys.calls {
		keys.deduct(b, i)
		hashes.deduct(b, i)
	}
	keys.snap(b)
	hashes.snap(b)
	b.StopTimer()
	for _, l := range []*buyerBench{keys, hashes} {
		l.check(b)
		n := float64(b.N)
		b.ReportMetric((l.cpu[1]-l.cpu[0])/n, l.name+"-us/op")
		b.ReportMetric((l.cmds[1]-l.cmds[0])/n, l.name+"-calls/op")
	}
	b.ReportMetric((hashes.cpu[1]-hashes.cpu[0])/(keys.cpu[1]-keys.cpu[0]), "hashes/keys")
}

// buyerBench is one buyer layout's server, store and prepared calls.
type buyerBench struct {
	name    string
	perKeys bool
	s       *Store
	calls   []*batch
	redisMeter
}

func newBuyerBench(b *testing.B, perKeys bool) *buyerBench {
	const batchN, p = 100, "buyers"
	srv := redistest.New(b)
	ctx := context.Background()
	s, err := Open(ctx, srv.Addr(), testOptions(Options{BuyerKeys: perKeys}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Warm(ctx, SaleStock{ProductID: p, Stock: 1 << 50, Limit: 1 << 30, EndMs: time.Now().Add(time.Hour).UnixMilli()}); err != nil {
		b.Fatal(err)
	}
	l := &buyerBench{name: map[bool]string{true: "keys", false: "hashes"}[perKeys], perKeys: perKeys, s: s}
	now := time.Now().UnixMilli()
	// The calls are built before the clock starts: only Redis is measured.
	// Each keeps its own batch (and buffer), never recycled.
	pr := s.product(p)
	for lo := 0; lo < b.N; lo += batchN {
		bt := new(batch)
		for i := lo; i < min(lo+batchN, b.N); i++ {
			a := attempt(p, "user"+strconv.Itoa(i), 1, 1<<30)
			a.CreatedMs, a.TokenExpiresMs, a.PayByMs = now, now+600_000, now+15*time.Minute.Milliseconds()
			bt.send = append(bt.send, &call{a: a})
		}
		bt.build(pr, s)
		l.calls = append(l.calls, bt)
	}
	// Loads the script (on a sale that is not warmed: nothing is written).
	const none = "none"
	if err := deductScript.Exec(ctx, s.c, []string{StockKey(none), OutboxKey(none), MetaKey(none)}, []string{none, s.graceMs, s.orderTTLMs, s.fenceArg()}).Error(); err != nil {
		b.Fatal(err)
	}
	return l
}

func (l *buyerBench) snap(b *testing.B) { l.snapOf(b, l.s.c) }

func (l *buyerBench) deduct(b *testing.B, i int) {
	c := l.calls[i]
	res, err := deductScript.Exec(context.Background(), l.s.c, c.keys, c.args).ToArray()
	placedLean(b, l.name, res, err, len(c.send))
}

// check: the sale has the layout measured.
func (l *buyerBench) check(b *testing.B) {
	keys, hashes := layoutKeys(b, l.s, "buyers")
	if l.perKeys && (keys == 0 || hashes != 0) || !l.perKeys && (keys != 0 || hashes == 0) {
		b.Fatalf("%s layout: %d per-key keys, %d hashes", l.name, keys, hashes)
	}
}
