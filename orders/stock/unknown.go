package stock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"flashgate/orders/order"
	"flashgate/orders/orderid"
)

//go:embed lua/resolve_unknown.lua
var resolveUnknownLua string

var resolveUnknownScript = rueidis.NewLuaScript(orderFnLua + resolveUnknownLua)

// Verdict is what ResolveUnknown found out about an attempt.
type Verdict uint8

const (
	// ResolveLater: nothing can be concluded now (the sale is closed, or
	// on a Redis not yet verified against the ledger); ask again later.
	ResolveLater Verdict = iota
	// Placed: the deduction ran and made the order; it follows the normal
	// path (outbox, Kafka, stored) and its result call answers it.
	Placed
	// NotPlaced: the attempt did not happen and never will; its order
	// reads "failed" (StateFailed) until OrderTTL.
	NotPlaced
	// Absent: looked only (fence false): no order and nothing prevents
	// fencing it.
	Absent
)

var verdictNames = [...]string{"later", "placed", "not_placed", "absent"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// ResolveUnknown decides an attempt whose Deduct failed with ErrUnknown:
// did its order happen? With fence false it only looks (Placed, NotPlaced
// if fenced before, Absent, or SettleLater). With fence true an absent order
// is made impossible — the attempt's purchase token is marked used, which
// the deduction script refuses, so a deduction still on its way to Redis
// can no longer succeed — and recorded as a failed order (NotPlaced).
//
// Look first, and fence only once the order is known not to be in the
// ledger either (the order store): a Redis that went back in time may have
// lost the order hash of an order that was stored. The script refuses
// (SettleLater) while the sale's stock key is missing, while it is closed
// for recovery, or when the server is not the one its meta says was last
// verified (meta runid), so that it never fences on a Redis that forgot.
//
// The call has the store's Timeout; an error means nothing was concluded
// (a fence that timed out may have been written: calling again answers
// NotPlaced). a's strings are copied.
func (s *Store) ResolveUnknown(ctx context.Context, a *Attempt, fence bool) (Verdict, error) {
	if err := checkProduct(a.ProductID); err != nil {
		return ResolveLater, err
	}
	if !validNonce(a.TokenNonceHex) {
		return ResolveLater, fmt.Errorf("%w: token nonce %q", ErrInvalid, a.TokenNonceHex)
	}
	if s.closed.Load() {
		return ResolveLater, ErrClosed
	}
	p := a.ProductID
	keys := []string{StockKey(p), MetaKey(p), OrderKey(p, a.ID), TokenKey(p, a.TokenNonceHex), TokenBucketKey(p, a.TokenExpiresMs), OrderBucketKey(p, a.ID)}
	f := "0"
	if fence {
		f = "1"
	}
	args := []string{a.UserID, strconv.Itoa(a.Qty), strconv.FormatInt(a.PriceCents, 10),
		strconv.FormatInt(a.CreatedMs, 10), strconv.Itoa(a.Edge), s.orderTTLMs, f, s.layoutArg, a.TokenNonceHex, strconv.FormatInt(a.ID, 10)}
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := resolveUnknownScript.Exec(ctx, s.c, keys, args).AsInt64()
	if err != nil {
		return ResolveLater, fmt.Errorf("stock: settle order %s/%d: %w", p, a.ID, err)
	}
	if n < 0 || n >= int64(len(verdictNames)) {
		return ResolveLater, fmt.Errorf("stock: settle order %s/%d: script answered %d", p, a.ID, n)
	}
	return Verdict(n), nil
}

// Orphan is a purchase of unknown outcome whose edge died (or restarted)
// before it settled it: another edge knows only what the shopper's result
// call names — the order id (and with it the node and the creation time)
// and the user.
type Orphan struct {
	ProductID string
	OrderID   int64
	UserID    string
	// TokensFromMs: if the attempt's token may still be honoured, every
	// token expiring at or before this is refused from now on (now + the
	// longest token life, as a rebuild sets it).
	TokensFromMs int64
	// CoveredMs: the attempt's token expired at or before this (its
	// creation + the longest token life); a sale already refusing tokens
	// up to it needs no new horizon.
	CoveredMs int64
}

// ResolveOrphan settles an orphan (see lua/resolve_unknown.lua, mode "2"):
// Placed if its order exists, NotPlaced if it was settled failed or is
// now — its token refused with every other token expiring by
// TokensFromMs, so that its deduction can never run late, and a failed
// order recorded for its result call — or ResolveLater while the sale is
// closed or on an unverified Redis. The cost of not knowing the token:
// shoppers holding a token minted before now are refused it once (403
// BAD_TOKEN; they fetch another), as after a rebuild.
func (s *Store) ResolveOrphan(ctx context.Context, o Orphan) (Verdict, error) {
	if err := checkProduct(o.ProductID); err != nil {
		return ResolveLater, err
	}
	if !order.ValidUserID(o.UserID) || o.OrderID <= 0 || o.TokensFromMs < o.CoveredMs {
		return ResolveLater, fmt.Errorf("%w: orphan %+v", ErrInvalid, o)
	}
	if s.closed.Load() {
		return ResolveLater, ErrClosed
	}
	p := o.ProductID
	const noNonce = "000000000000000000000000" // KEYS[4] and [5] are unused in this mode
	keys := []string{StockKey(p), MetaKey(p), OrderKey(p, o.OrderID), TokenKey(p, noNonce), TokenBucketKey(p, o.CoveredMs), OrderBucketKey(p, o.OrderID)}
	args := []string{o.UserID, "0", "0", i64(orderid.Time(o.OrderID).UnixMilli()), strconv.Itoa(orderid.Node(o.OrderID)),
		s.orderTTLMs, "2", s.layoutArg, noNonce, i64(o.OrderID), i64(o.TokensFromMs), i64(o.CoveredMs)}
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := resolveUnknownScript.Exec(ctx, s.c, keys, args).AsInt64()
	if err != nil {
		return ResolveLater, fmt.Errorf("stock: settle orphan %s/%d: %w", p, o.OrderID, err)
	}
	if n < 0 || n > int64(NotPlaced) {
		return ResolveLater, fmt.Errorf("stock: settle orphan %s/%d: script answered %d", p, o.OrderID, n)
	}
	return Verdict(n), nil
}
