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

// EventsFromOutbox builds the events an outbox entry records, whatever its
// type: the order event of a deduction (every order of a batch entry's
// script call, ledger "b"), or the release or paid event of a settlement
// (stock.OutboxEntry.Events), the same events their writers publish. An
// error wraps order.ErrMalformed: such an entry goes to the dead-letter
// topic whole.
func EventsFromOutbox(e *stock.OutboxEntry) ([]order.Event, error) {
	evs, err := e.Events()
	if err != nil && !errors.Is(err, order.ErrMalformed) {
		err = fmt.Errorf("%w: %w", order.ErrMalformed, err)
	}
	return evs, err
}
