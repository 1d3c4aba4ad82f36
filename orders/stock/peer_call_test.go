package stock

import (
	"slices"
	"strconv"
	"testing"
)

// TestDeductCallIsWhatDeductSends holds DeductCall, the script's call for
// tools without a Store (bench's peers), to what Store.Deduct builds for
// the same attempts: the fixed keys, each attempt's per-key names and its
// nine arguments, in the same places.
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

	// Deduct's keys: the fixed three, the 16 buyer hashes, 3 per attempt,
	// then the token hashes; its arguments: the fixed four, 9 per attempt,
	// then the order layout and 2 per attempt (the hashes' positions).
	n := len(b.send)
	sent := slices.Concat(b.keys[:3], b.keys[3+BuyerShards:3+BuyerShards+3*n])
	if !slices.Equal(sent, keys) {
		t.Errorf("keys:\nDeduct     %q\nDeductCall %q", sent, keys)
	}
	if got := b.args[:4+9*n]; !slices.Equal(got, args) {
		t.Errorf("args:\nDeduct     %q\nDeductCall %q", got, args)
	}
	if len(keys) != 3+3*n || len(args) != 4+9*n {
		t.Errorf("DeductCall made %d keys and %d args for %d attempts", len(keys), len(args), n)
	}
}
