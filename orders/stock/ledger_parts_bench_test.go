package stock

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"flashgate/internal/redistest"
)

// The parts of a purchase's Redis CPU: what each part of deduct.lua and
// mark_success.lua costs, measured by taking it out. Each variant is the
// shipped script with one part cut by a text edit (the benchmark fails when
// an edit no longer applies, so the variants follow the scripts); it runs on
// its own server, call by call alternating with the shipped script on
// another, both on a sale of ledger "b" and buyer hashes, 64 attempts a call,
// every attempt a new shopper with a new token. A variant is no layout: some
// of them break a promise (no token marks, no limit); they bound what a
// layout change could save, the "smaller design" questions of issue 26:
//
//	go test -run '^$' -bench 'DeductParts|MarkParts' -benchtime 64000x -count 3 ./orders/stock/
//
// part/whole is the variant's Redis CPU over the shipped script's, over the
// same calls. Results: bench/README.md, Findings 10.

// partEdit is one text edit of a script: old must occur in it.
type partEdit struct{ old, new string }

// partVariant is a named script variant.
type partVariant struct {
	name  string
	edits []partEdit
}

// deductParts are deduct.lua without one of its parts.
var deductParts = []partVariant{
	// The call with its keys and arguments, and its reply, and nothing
	// done: what any script call of today's shape costs.
	{"floor", []partEdit{{
		"local pre = string.sub(KEYS[1], 1, -6)",
		"do local n = (#ARGV - 10 - tonumber(ARGV[10])) / 9\n" +
			"return {0, string.rep('0', n), '0-1/1'} end\nlocal pre = string.sub(KEYS[1], 1, -6)",
	}}},
	// No used-token hash read or written (one use unchecked): the bound
	// of folding the token's mark into another field.
	{"no-token-marks", []partEdit{
		{"local v = redis.call('HMGET', KEYS[19 + t], unpack(f))", "local v = {}"},
		{"    redis.call('HSET', key, unpack(w))\n    redis.call('PEXPIRE', key, tokenEnd[t], 'NX')", ""},
	}},
	// One buyer hash instead of 16 (3 calls a call instead of ~48).
	{"one-buyer-hash", []partEdit{
		{"local b, t = pos % 16,", "local b, t = 0,"},
	}},
	// Neither buyers nor tokens read or written (no limit, no one use).
	{"no-buyers-no-tokens", []partEdit{
		{"local v = redis.call('HMGET', KEYS[4 + b], unpack(f))\n    for j = 1, #f do bought[f[j]] = tonumber(v[j] or '0') end",
			"for j = 1, #f do bought[f[j]] = 0 end"},
		{"local v = redis.call('HMGET', KEYS[19 + t], unpack(f))", "local v = {}"},
		{"    redis.call('HSET', KEYS[4 + b], unpack(w))\n    redis.call('PEXPIREAT', KEYS[4 + b], exp)", ""},
		{"    redis.call('HSET', key, unpack(w))\n    redis.call('PEXPIRE', key, tokenEnd[t], 'NX')", ""},
	}},
	// No order bucket written (the outbox entry still is).
	{"no-order-writes", []partEdit{{
		"    redis.call('HSET', key, unpack(w))\n    local at = ARGV[10 + ob]\n" +
			"    redis.call('PEXPIREAT', key, at, 'NX')\n    redis.call('PEXPIREAT', key, at, 'GT')", "",
	}}},
}

// markParts are mark_success.lua without, or with another form of, one of
// its parts.
var markParts = []partVariant{
	// No pay deadline written (no sorted-set member per order): the bound
	// of keeping the deadlines per stored batch.
	{"no-deadlines", []partEdit{{"if #due > 0 then redis.call('ZADD', KEYS[1], unpack(due)) end", ""}}},
}

// variantScript is src with v's edits applied.
func variantScript(b *testing.B, src string, v partVariant) *rueidis.Lua {
	b.Helper()
	for _, e := range v.edits {
		if !strings.Contains(src, e.old) {
			b.Fatalf("variant %s: %q is no longer in the script", v.name, e.old)
		}
		src = strings.Replace(src, e.old, e.new, 1)
	}
	return rueidis.NewLuaScript(src)
}

func BenchmarkDeductParts(b *testing.B) {
	for _, v := range deductParts {
		b.Run(v.name, func(b *testing.B) {
			part := variantScript(b, deductLua, v)
			whole, cut := newLedgerBench(b, false, false, 64), newLedgerBench(b, false, false, 64)
			cut.name = v.name
			b.ResetTimer()
			whole.snap(b)
			cut.snap(b)
			for i := range whole.calls {
				whole.deduct(b, i)
				c := cut.calls[i]
				res, err := part.Exec(context.Background(), cut.s.c, c.keys, c.args).ToArray()
				placedLean(b, cut.name, res, err, len(c.send))
			}
			whole.snap(b)
			cut.snap(b)
			b.StopTimer()
			reportParts(b, whole, cut)
		})
	}
}

func BenchmarkMarkParts(b *testing.B) {
	for _, v := range markParts {
		b.Run(v.name, func(b *testing.B) {
			part := variantScript(b, orderFnLua+markSuccessLua, v)
			whole, cut := newLedgerBench(b, false, false, 64), newLedgerBench(b, false, false, 64)
			cut.name = v.name
			for i := range whole.calls {
				whole.deduct(b, i)
				cut.deduct(b, i)
			}
			b.ResetTimer()
			whole.snap(b)
			cut.snap(b)
			for i := range whole.calls {
				whole.mark(b, i)
				keys, args := markSuccessCall(ledgerProduct, cut.ids[i])
				if n, err := part.Exec(context.Background(), cut.s.c, keys, args).AsInt64(); err != nil || n != int64(len(cut.ids[i])) {
					b.Fatalf("%s mark: %d, %v", v.name, n, err)
				}
			}
			whole.snap(b)
			cut.snap(b)
			b.StopTimer()
			reportParts(b, whole, cut)
		})
	}
}

// reportParts reports both servers' CPU per purchase between their last
// two snaps, and the ratio.
func reportParts(b *testing.B, whole, cut *ledgerBench) {
	n := float64(b.N)
	w := whole.cpu[len(whole.cpu)-1] - whole.cpu[len(whole.cpu)-2]
	c := cut.cpu[len(cut.cpu)-1] - cut.cpu[len(cut.cpu)-2]
	b.ReportMetric(w/n, "whole-us/op")
	b.ReportMetric(c/n, "part-us/op")
	b.ReportMetric(c/w, "part/whole")
}

// hashFieldLua writes ARGV[2] calls of ARGV[1] new fields each, every call
// reading them first (HMGET) and then writing them (HSET) as a deduction
// does, into one hash ("big") or into a new hash per 128 fields ("small",
// which Redis keeps as a listpack). ARGV[4] makes the names unique per run.
const hashFieldLua = `
local per, calls, small, run = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == 'small', ARGV[4]
for c = 0, calls - 1 do
  local key = KEYS[1]
  if small then key = KEYS[1] .. run .. ':' .. math.floor(c * per / 128) end
  local f, w = {}, {}
  for i = 1, per do
    local name = run .. ':' .. c .. ':' .. i
    f[i], w[2 * i - 1], w[2 * i] = name, name, '1'
  end
  redis.call('HMGET', key, unpack(f))
  redis.call('HSET', key, unpack(w))
end
return calls * per
`

// BenchmarkHashFieldCost is Redis' CPU per field read and written, 64
// fields a call, in one hash that grows to b.N fields against hashes of 128
// fields, side by side on two servers (the "smaller hashes" idea of issue
// 26; a field is one HMGET miss and one HSET):
//
//	go test -run '^$' -bench HashFieldCost -benchtime 640000x ./orders/stock/
func BenchmarkHashFieldCost(b *testing.B) {
	script := rueidis.NewLuaScript(hashFieldLua)
	type server struct {
		c rueidis.Client
		redisMeter
	}
	big, small := &server{c: redistest.Client(b, redistest.New(b).Addr())}, &server{c: redistest.Client(b, redistest.New(b).Addr())}
	const per, calls = 64, 100 // fields a call, calls a script run
	key := "hashfieldcost"     // no key of the stock package's
	b.ResetTimer()
	big.snapOf(b, big.c)
	small.snapOf(b, small.c)
	for run := 0; run*per*calls < b.N; run++ {
		for _, l := range []*server{big, small} {
			mode := map[bool]string{true: "big", false: "small"}[l == big]
			if err := script.Exec(context.Background(), l.c, []string{key},
				[]string{strconv.Itoa(per), strconv.Itoa(calls), mode, strconv.Itoa(run)}).Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
	big.snapOf(b, big.c)
	small.snapOf(b, small.c)
	b.StopTimer()
	fields := float64((b.N + per*calls - 1) / (per * calls) * per * calls)
	bw, sw := big.cpu[1]-big.cpu[0], small.cpu[1]-small.cpu[0]
	b.ReportMetric(bw/fields, "big-us/field")
	b.ReportMetric(sw/fields, "small-us/field")
	b.ReportMetric(sw/bw, "small/big")
}
