package broker

import (
	"errors"
	"fmt"

	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// OrderEvent is the order event of a successful deduction, as the edge
// publishes it directly. It is the same event the relay builds from the
// attempt's outbox entry (EventFromOutbox), so a re-send is a true
// duplicate that the consumer can drop by order id.
func OrderEvent(o *order.Order) order.Event {
	return order.Event{V: order.Version, Type: order.TypeOrder, Order: *o}
}

// EventFromOutbox builds the event an outbox entry records, whatever its
// type: the order event of a deduction, or the release or paid event of a
// settlement (stock.OutboxEntry.Event), the same event its writer
// publishes. An error wraps order.ErrMalformed: such an entry goes to the
// dead-letter topic.
func EventFromOutbox(e *stock.OutboxEntry) (order.Event, error) {
	ev, err := e.Event()
	if err != nil && !errors.Is(err, order.ErrMalformed) {
		err = fmt.Errorf("%w: %w", order.ErrMalformed, err)
	}
	return ev, err
}
