package order

import (
	"errors"
	"fmt"

	"flashgate/orders/orderid"
)

// Limits of the shopper API contract. Ids go into Redis keys, URLs, logs
// and JSON without escaping, so their alphabets are deliberately small.
const (
	// MaxProductIDLen bounds a product id: [A-Za-z0-9][A-Za-z0-9_-]{0,63}.
	MaxProductIDLen = 64
	// MaxUserIDLen bounds a user id (a session subject): [A-Za-z0-9_.@-]{1,64}.
	MaxUserIDLen = 64
	// MinQty and MaxQty bound the units of one order, whatever the sale's
	// per-user limit.
	MinQty = 1
	MaxQty = 1000
)

// Order is one purchase. The JSON names are those of the order event
// (order.Event embeds Order); the order id is a decimal string there so
// that no consumer loses precision on a 64-bit id.
type Order struct {
	ID         int64  `json:"orderId,string"`
	ProductID  string `json:"productId"`
	UserID     string `json:"userId"`
	Qty        int    `json:"quantity"`
	PriceCents int64  `json:"priceCents"` // unit price
	CreatedMs  int64  `json:"createdMs"`  // the edge's clock at the deduction, unix ms
	Edge       int    `json:"edge"`       // the node id of the edge that took it
	// PayByMs is the pay deadline, unix ms (CreatedMs + the sale's pay
	// timeout); 0 = none: the order stays held until it is cancelled.
	PayByMs int64 `json:"payByMs,omitempty"`
}

// ErrInvalid is wrapped by every error of Validate.
var ErrInvalid = errors.New("order: invalid")

// Validate checks what every holder of an order relies on. It allocates
// only when it fails.
func (o *Order) Validate() error {
	switch {
	case o.ID <= 0:
		return fmt.Errorf("%w: order id %d must be positive", ErrInvalid, o.ID)
	case !ValidProductID(o.ProductID):
		return fmt.Errorf("%w: order %d: product id %q", ErrInvalid, o.ID, o.ProductID)
	case !ValidUserID(o.UserID):
		return fmt.Errorf("%w: order %d: user id %q", ErrInvalid, o.ID, o.UserID)
	case o.Qty < MinQty || o.Qty > MaxQty:
		return fmt.Errorf("%w: order %d: quantity %d not in %d..%d", ErrInvalid, o.ID, o.Qty, MinQty, MaxQty)
	case o.PriceCents < 0:
		return fmt.Errorf("%w: order %d: price %d cents", ErrInvalid, o.ID, o.PriceCents)
	case o.CreatedMs <= 0:
		return fmt.Errorf("%w: order %d: created %d", ErrInvalid, o.ID, o.CreatedMs)
	case o.Edge < 0 || o.Edge > orderid.MaxNode:
		return fmt.Errorf("%w: order %d: edge %d not in 0..%d", ErrInvalid, o.ID, o.Edge, orderid.MaxNode)
	case o.PayByMs != 0 && o.PayByMs <= o.CreatedMs:
		return fmt.Errorf("%w: order %d: pay deadline %d not after created %d", ErrInvalid, o.ID, o.PayByMs, o.CreatedMs)
	}
	return nil
}

// ValidProductID reports whether id is a product id:
// [A-Za-z0-9][A-Za-z0-9_-]{0,63}. The first character is never '_' or '-',
// which keeps "_static" (and any future "_name") out of the product id
// space of the sale pages; no brace can move a Redis key's hash tag.
func ValidProductID[T ~string | ~[]byte](id T) bool {
	if len(id) == 0 || len(id) > MaxProductIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidUserID reports whether id is a user id: [A-Za-z0-9_.@-]{1,64}.
func ValidUserID[T ~string | ~[]byte](id T) bool {
	if len(id) == 0 || len(id) > MaxUserIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '.', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}
