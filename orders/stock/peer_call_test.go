package stock

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDeductCallIsWhatDeductSends holds DeductCall, the script's older call
// shape for tools without a Store (bench's peers), to what Store.Deduct's
// lean call sends for the same attempts: the fixed keys and arguments, and
// per attempt the same user, numbers, order value and per-key names (the
// lean call's prefix + user, order id or nonce).
func TestDeductCallIsWhatDeductSends(t *testing.T) {
	s := &Store{graceMs: "604800000", orderTTLMs: "900000", layoutArg: layoutArg(false)}
	p := &product{id: "pc", productKeys: keysOf("pc")}
	a1, a2 := attempt("pc", "alice", 2, 3), attempt("pc", "bob", 1, 5)
	a2.PayByMs = a2.CreatedMs + 60_000
	b := &batch{send: []*call{{a: a1}, {a: a2}}}
	b.build(p, s)

	var want []ScriptAttempt
	for _, c := range b.send {
		a := c.a
		want = append(want, ScriptAttempt{
			User: a.UserID, Qty: strconv.Itoa(a.Qty), Limit: strconv.Itoa(a.Limit),
			OrderID: strconv.FormatInt(a.ID, 10), PriceCents: strconv.FormatInt(a.PriceCents, 10),
			NowMs: strconv.FormatInt(a.CreatedMs, 10), TokenTTLMs: strconv.FormatInt(a.TokenExpiresMs-a.CreatedMs, 10),
			PayByMs: strconv.FormatInt(a.PayByMs, 10), Node: strconv.Itoa(a.Edge), TokenNonce: a.TokenNonceHex,
		})
	}
	keys, args := DeductCall("pc", s.graceMs, s.orderTTLMs, s.fenceArg(), want...)
	n := len(b.send)
	if len(keys) != 3+3*n || len(args) != 4+9*n {
		t.Fatalf("DeductCall made %d keys and %d args for %d attempts", len(keys), len(args), n)
	}
	if !slices.Equal(b.keys[:3], keys[:3]) || !slices.Equal(b.args[:4], args[:4]) {
		t.Errorf("fixed keys and args:\nDeduct     %q %q\nDeductCall %q %q", b.keys[:3], b.args[:4], keys[:3], args[:4])
	}
	// The lean call: ARGV[6..8] the per-key prefixes, ARGV[10] B, then B
	// expiries, then nine strings per attempt.
	nb, _ := strconv.Atoi(b.args[9])
	lean := b.args[10+nb:]
	if len(lean) != 9*n {
		t.Fatalf("lean call: %d per-attempt strings for %d attempts", len(lean), n)
	}
	for i := range n {
		l, o, k := lean[9*i:9*i+9], args[4+9*i:13+9*i], keys[3+3*i:6+3*i]
		// user qty limit orderId value now tokenTTL nonce pos
		if !slices.Equal(l[:4], o[:4]) || l[5] != o[5] || l[6] != o[6] {
			t.Errorf("attempt %d: lean %q, older %q", i, l, o)
		}
		if v := strings.Join([]string{o[0], o[1], o[4], o[5], o[7], o[8]}, ":"); l[4] != v {
			t.Errorf("attempt %d: lean order value %q, older call's fields make %q", i, l[4], v)
		}
		if got := []string{b.args[5] + l[0], b.args[6] + l[3], b.args[7] + l[7]}; !slices.Equal(got, k) {
			t.Errorf("attempt %d: lean per-key names %q, older %q", i, got, k)
		}
	}
}
