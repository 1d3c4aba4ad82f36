// Package deadline releases the orders nobody paid for in time: the sweep
// every edge runs, so that a unit a shopper reserved and never paid for
// goes back on sale.
//
// A Sweeper asks Redis, for each product, for the orders whose pay
// deadline passed (stock.Store.ExpireDue: the due set sk:{p}:due, settled
// by the one state-guarded script that also pays and cancels) and for each
// order released:
//
//  1. publishes its release event (reason expired) to Kafka and removes its
//     outbox entry once Kafka acknowledged it — the script wrote the entry,
//     so if this edge dies first the outbox relay sends it;
//  2. tells every edge that the orders expired (stock.Store.PublishChange,
//     which ends their shoppers' event streams) and that the product has
//     stock again (PublishSoldOut false);
//  3. hands the releases to OnReleased (the edge clears its sold-out flag
//     and its "bought" cache there, as for a cancel).
//
// Steps 2 and 3 happen whether Kafka took the events or not: the units are
// back in Redis either way, and the relay delivers the events later.
//
// Every edge runs one, on the same due sets: the script checks each order
// against Redis' clock and its state, so an order expires exactly once
// whichever edge gets there, and a payment that arrives as the deadline
// fires either wins (paid, kept) or loses (expired) — never both. Edges need
// no coordination and none is special: an edge that dies leaves the others
// sweeping. A batch that came back full is followed by another at once; the
// pause between sweeps is jittered so that the edges' sweeps spread out.
//
// The deadline is Redis' clock, never an edge's. How late a release
// happens after its deadline is the sweep interval (plus its jitter) and a
// round trip, and the script call itself; Stats.Lateness records it (Redis
// time of the release minus the deadline). An edge whose clock is off by d
// from the Redis master sets its orders' deadlines d off (the deadline is
// the edge's creation time plus the pay timeout), but the sweep reads the
// due set by Redis' clock as the store estimates it, so it does not add d
// again.
//
// The sweep counts as a flight on the Publisher (broker.Flights) from the
// script call until its publishes returned, like a purchase and a relay
// sweep: a ledger rebuild waits for it, so no release it made before a
// fence can reach Kafka after the rebuild read the ledger.
package deadline
