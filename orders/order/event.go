package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Version is the schema version written in every event ("v"). Consumers
// refuse versions they do not know (dead-letter) rather than guess.
const Version = 1

// Event types.
const (
	TypeOrder   = "order"   // a successful deduction: store the order
	TypeRelease = "release" // the order's units went back to stock: mark it released
	TypePaid    = "paid"    // the payment arrived before the deadline: the order is kept for good
)

// Why a release happened (Event.Reason). An absent reason is a cancel: the
// events written before deadlines existed carry none.
const (
	ReasonCancelled = "cancelled" // released by a cancel call
	ReasonExpired   = "expired"   // released by the pay deadline
)

// Event is one message on the orders topic, keyed by order id, JSON:
//
//	{"v":1,"type":"order","orderId":"120850008860790784","productId":"p1",
//	 "userId":"alice","quantity":1,"priceCents":9900,"createdMs":1796038487397,
//	 "edge":1}
//
// The order's fields are Order's, flattened by encoding/json. orderId
// is a decimal string so that no consumer loses precision on a 64-bit id. A
// release carries the same fields as the order it releases, plus
// releasedMs and its reason; a paid event carries the order's fields plus
// paidMs. Redis decides which of paid and expired happens to an order, so
// the store never sees both.
type Event struct {
	V    int    `json:"v"`
	Type string `json:"type"`
	Order
	ReleasedMs int64  `json:"releasedMs,omitempty"`
	Reason     string `json:"reason,omitempty"`
	PaidMs     int64  `json:"paidMs,omitempty"`
}

// Expired reports whether the event is a release by the pay deadline.
func (e *Event) Expired() bool { return e.Type == TypeRelease && e.Reason == ReasonExpired }

// StoreVersion is the row version of the event for a store that keeps the
// highest version of an order (ClickHouse's ReplacingMergeTree): the order
// event is CreatedMs, a settlement (paid or release) is its time but never
// below CreatedMs+1, so the settlement wins over the order whatever the
// edges' clocks say and whichever arrives first.
func (e *Event) StoreVersion() int64 {
	switch e.Type {
	case TypePaid:
		return max(e.PaidMs, e.CreatedMs+1)
	case TypeRelease:
		return max(e.ReleasedMs, e.CreatedMs+1)
	}
	return e.CreatedMs
}

// Key is the Kafka message key: the order id, so all events of one order
// land in one partition, in order.
func (e *Event) Key() []byte { return strconv.AppendInt(nil, e.ID, 10) }

// Encode renders the event.
func (e *Event) Encode() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// ErrMalformed wraps every decoding failure; such events go to the
// dead-letter topic.
var ErrMalformed = errors.New("orders: malformed event")

// Decode parses and validates one event.
func Decode(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Validate checks the fields every consumer relies on: the schema version
// and type, and the order (Order.Validate).
func (e *Event) Validate() error {
	switch {
	case e.V != Version:
		return fmt.Errorf("%w: unknown schema version %d", ErrMalformed, e.V)
	case e.Type != TypeOrder && e.Type != TypeRelease && e.Type != TypePaid:
		return fmt.Errorf("%w: unknown type %q", ErrMalformed, e.Type)
	case e.Reason != "" && (e.Type != TypeRelease || e.Reason != ReasonCancelled && e.Reason != ReasonExpired):
		return fmt.Errorf("%w: reason %q on a %s event", ErrMalformed, e.Reason, e.Type)
	case e.ReleasedMs < 0 || e.PaidMs < 0:
		return fmt.Errorf("%w: negative time", ErrMalformed)
	}
	if err := e.Order.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}
