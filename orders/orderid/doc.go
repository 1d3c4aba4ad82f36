// Package orderid issues order ids that are unique across all edges without
// coordination, in the style of Twitter's snowflake.
//
// An id is a positive int64:
//
//	0 | 41 bits: ms since 2026-01-01T00:00:00Z | 10 bits: node | 12 bits: sequence
//
// which lasts until 2095 and allows 4096 ids per millisecond per node. Ids
// from one generator strictly increase, so ClickHouse's (product_id,
// order_id) order is also roughly time order.
//
// Uniqueness rests on two things outside this package:
//
//   - every edge has its own node id (0..1023) in its config; two edges with
//     the same node id will collide;
//   - a restarted edge must not reuse ids it gave out before the restart. The
//     generator never waits: when the clock goes backwards it keeps counting
//     from the last timestamp, and when more than 4096 ids are wanted in one
//     millisecond it borrows the next one, so it may run ahead of the clock.
//     Across processes the edge keeps it so (sale.Service.reserveIDs): each
//     process reserves in Redis the times its ids may carry, a few seconds
//     ahead, and the next process of the node starts its ids after that
//     reservation (Floor), however far behind its clock reads (nemesis seed
//     557: an edge restarted 2 s behind had answered one id to two
//     purchases). Until it has read it, TryNext refuses (Bound).
package orderid
