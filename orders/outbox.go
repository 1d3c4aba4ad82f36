package orders

import (
	"fmt"
	"strconv"

	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// OrderEvent is the order event of a successful deduction, as the edge
// publishes it directly. It is the same event the relay builds from the
// attempt's outbox entry (EventFromOutbox), so a re-send is a true
// duplicate that the consumer can drop by order id.
func OrderEvent(o *order.Order) Event {
	return Event{V: Version, Type: TypeOrder, Order: *o}
}

// EventFromOutbox builds the order event from an outbox entry's fields (the
// stock.Field* names the deduction script writes). An error wraps
// ErrMalformed: such an entry goes to the dead-letter topic.
func EventFromOutbox(f map[string]string) (Event, error) {
	num := func(name string) int64 {
		n, err := strconv.ParseInt(f[name], 10, 64)
		if err != nil {
			return -1 // fails Validate below
		}
		return n
	}
	e := Event{V: Version, Type: TypeOrder, Order: order.Order{
		ID:         num(stock.FieldOrder),
		ProductID:  f[stock.FieldProduct],
		UserID:     f[stock.FieldUser],
		Qty:        int(num(stock.FieldQty)),
		PriceCents: num(stock.FieldPrice),
		CreatedMs:  num(stock.FieldCreated),
		Edge:       int(num(stock.FieldNode)),
	}}
	if err := e.Validate(); err != nil {
		return Event{}, fmt.Errorf("outbox entry %v: %w", f, err)
	}
	return e, nil
}
