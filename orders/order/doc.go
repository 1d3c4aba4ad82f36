// Package order is the one model of a purchase once the edge accepted it:
// the order the deduction records, the outbox entry carries, the event
// says and the ledger stores. Every shape of it (stock.Attempt,
// order.Event, orderstore.Row, stock.OrderInfo) embeds Order and checks it
// with Order.Validate, adding only what is its own; the shopper API's limits
// on ids and quantities are defined here once, for the edge's request parser
// as for the ledger.
package order
