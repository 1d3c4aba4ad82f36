package api

import (
	"flashgate/sale/catalog"
	"flashgate/sale/ptoken"
)

// Rules is a set of purchase rules: Call.Checked holds the ones already
// decided for the call. Each rule is one Check method below. The sale
// filter that enforces a rule calls it, and the sale handler calls every
// Check of a purchase, so a rule is decided whatever the config's filter
// list (a filter left out, or a dry_run one that refused, leaves its rule
// to the handler), and at most once per call: a Check whose rule is already
// in Checked passes without deciding again.
//
// A rule is recorded only when it passed. A refusal answers the call, except
// from a dry_run filter, whose call goes on with the rule still undecided.
type Rules uint8

const (
	// SignedIn: the call acts for a verified shopper.
	SignedIn Rules = 1 << iota
	// ProductKnown: the product is one of the edge's sales; Call.Activity is
	// its entry.
	ProductKnown
	// SaleOpen: the sale has started and not ended.
	SaleOpen
	// InStock: the product is not flagged sold out.
	InStock
	// TokenValid: the purchase token was minted for this user and product
	// and has not expired; Call.TokenNonce and TokenExpiresMs are its own.
	TokenValid
	// WithinLimit: what the shopper bought, as far as the edge knows, plus
	// this call's quantity stays within the sale's per-user limit.
	WithinLimit
)

// Has reports whether every rule of r is in s.
func (s Rules) Has(r Rules) bool { return s&r == r }

// passed records rule r as decided; it is nil, the passing answer.
func (c *Call) passed(r Rules) *Rejection {
	c.Checked |= r
	return nil
}

// CheckSignedIn: the session filter is the only source of a purchase call's
// user (it sets UserID from a verified session, and nothing else), so a
// call with a user is signed in.
func (c *Call) CheckSignedIn() *Rejection {
	if c.Checked.Has(SignedIn) {
		return nil
	}
	if len(c.UserID) == 0 {
		return Unauthenticated
	}
	return c.passed(SignedIn)
}

// CheckProduct finds the call's product in reg and keeps its entry in
// Activity.
func (c *Call) CheckProduct(reg *catalog.Registry) *Rejection {
	if c.Checked.Has(ProductKnown) {
		return nil
	}
	e, ok := reg.Get(c.ProductID)
	if !ok {
		return UnknownProduct
	}
	c.Sale = e
	return c.passed(ProductKnown)
}

// CheckSaleOpen: the sale of the product found (CheckProduct) is open at
// the call's time.
func (c *Call) CheckSaleOpen() *Rejection {
	if c.Checked.Has(SaleOpen) {
		return nil
	}
	switch c.Sale.PhaseAt(c.NowNano/1e6, false) {
	case catalog.Upcoming:
		return NotStarted
	case catalog.Ended:
		return Ended
	}
	return c.passed(SaleOpen)
}

// CheckInStock: the product found (CheckProduct) is not flagged sold out.
// The flag is the edge's memory of the deduction's answers and of the other
// edges' broadcasts: a sold-out product costs no Redis call.
func (c *Call) CheckInStock() *Rejection {
	if c.Checked.Has(InStock) {
		return nil
	}
	if c.Sale.SoldOut() {
		return SoldOut
	}
	return c.passed(InStock)
}

// CheckToken verifies the call's purchase token with m and keeps its nonce
// and expiry (zero when it is refused). Whether the token was already used
// is decided atomically by the deduction, which records its nonce.
func (c *Call) CheckToken(m *ptoken.Minter) *Rejection {
	if c.Checked.Has(TokenValid) {
		return nil
	}
	nonce, exp, err := m.Check(c.Token, c.UserID, c.ProductID, c.NowNano/1e6)
	c.TokenNonce, c.TokenExpiresMs = nonce, exp
	if err != nil {
		return BadToken
	}
	return c.passed(TokenValid)
}

// CheckLimit: bought units (the edge's cache of them, or 0 when it has
// none) plus the call's quantity, at least one, are within the limit of the
// product found (CheckProduct). The deduction enforces the limit exactly;
// this spares Redis what the edge already knows.
func (c *Call) CheckLimit(bought int) *Rejection {
	if c.Checked.Has(WithinLimit) {
		return nil
	}
	if bought+max(c.Qty, 1) > c.Sale.Limit {
		return LimitReached
	}
	return c.passed(WithinLimit)
}
