package api

import (
	"testing"
	"time"

	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
)

// Each Check records its rule when it passes, only then, and decides a rule
// at most once per call.
func TestChecksRecordWhatPassed(t *testing.T) {
	now := time.Now()
	reg := catalog.NewRegistry()
	reg.Put(&catalog.Sale{ProductID: "p", Limit: 2, StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()})
	reg.Put(&catalog.Sale{ProductID: "soon", Limit: 2, StartMs: now.Add(time.Hour).UnixMilli(), EndMs: now.Add(2 * time.Hour).UnixMilli()})
	m, err := ptoken.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(product string) *Call {
		return &Call{NowNano: now.UnixNano(), UserID: []byte("u"), ProductID: []byte(product), Qty: 1,
			Token: m.Mint(nil, []byte("u"), []byte(product), now.Add(time.Minute).UnixMilli())}
	}

	c := call("p")
	for _, step := range []struct {
		rule  Rules
		check func() *Rejection
	}{
		{SignedIn, c.CheckSignedIn},
		{ProductKnown, func() *Rejection { return c.CheckProduct(reg) }},
		{SaleOpen, c.CheckSaleOpen},
		{InStock, c.CheckInStock},
		{TokenValid, func() *Rejection { return c.CheckToken(m) }},
		{WithinLimit, func() *Rejection { return c.CheckLimit(1) }},
	} {
		if rej := step.check(); rej != nil || !c.Checked.Has(step.rule) {
			t.Fatalf("rule %b: %v, checked %b", step.rule, rej, c.Checked)
		}
	}
	if c.Sale.ProductID != "p" || c.TokenExpiresMs == 0 {
		t.Fatalf("the checks did not keep the entry or the token: %+v", c)
	}
	// Decided: not decided again, whatever changed since.
	c.UserID, c.Token, c.Qty = nil, nil, 5
	c.NowNano = now.Add(2 * time.Hour).UnixNano()
	c.Sale.SetSoldOut(true)
	if c.CheckSignedIn() != nil || c.CheckProduct(nil) != nil || c.CheckSaleOpen() != nil || c.CheckInStock() != nil ||
		c.CheckToken(nil) != nil || c.CheckLimit(0) != nil {
		t.Fatal("a decided rule was decided again")
	}
	c.Sale.SetSoldOut(false)

	for _, tc := range []struct {
		name  string
		rule  Rules
		want  *Rejection
		check func(c *Call) *Rejection
	}{
		{"no user", SignedIn, Unauthenticated, func(c *Call) *Rejection { c.UserID = nil; return c.CheckSignedIn() }},
		{"unknown product", ProductKnown, UnknownProduct, func(c *Call) *Rejection { c.ProductID = []byte("x"); return c.CheckProduct(reg) }},
		{"not started", SaleOpen, NotStarted, func(c *Call) *Rejection {
			c.ProductID = []byte("soon")
			c.CheckProduct(reg)
			return c.CheckSaleOpen()
		}},
		{"bad token", TokenValid, BadToken, func(c *Call) *Rejection { c.Token = []byte("x"); return c.CheckToken(m) }},
		{"bought + qty above the limit", WithinLimit, LimitReached, func(c *Call) *Rejection { c.CheckProduct(reg); return c.CheckLimit(2) }},
	} {
		c := call("p")
		if rej := tc.check(c); rej != tc.want || c.Checked.Has(tc.rule) {
			t.Errorf("%s: %v, checked %b", tc.name, rej, c.Checked)
		}
	}
}

// CheckToken is ptoken.Check's allocations, tested there (pooled, so not
// under the race detector) and in the filters' chain.
func TestChecksAllocs(t *testing.T) {
	now := time.Now()
	reg := catalog.NewRegistry()
	reg.Put(&catalog.Sale{ProductID: "p", Limit: 2, StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()})
	c := Call{NowNano: now.UnixNano(), UserID: []byte("u"), ProductID: []byte("p"), Qty: 1}
	n := testing.AllocsPerRun(1000, func() {
		c.Checked = 0
		if c.CheckSignedIn() != nil || c.CheckProduct(reg) != nil || c.CheckSaleOpen() != nil ||
			c.CheckInStock() != nil || c.CheckLimit(0) != nil {
			t.Fatal("refused")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
