package orders

import (
	"fmt"

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

// EventFromOutbox builds the order event from an outbox entry. An error
// wraps ErrMalformed: such an entry goes to the dead-letter topic.
func EventFromOutbox(e *stock.OutboxEntry) (Event, error) {
	o, err := e.Order()
	if err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return OrderEvent(&o), nil
}
