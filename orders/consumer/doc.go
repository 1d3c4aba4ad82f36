// Package consumer moves order events from Kafka into the order store and
// tells Redis (and, through a hook, the shoppers) that the orders are safe.
//
// One batch at a time, in this order — each step only after the previous
// one succeeded, so that a crash or an outage anywhere loses nothing:
//
//  1. fetch up to BatchSize messages, or what arrived within BatchTime of
//     the first one (the fetches wait in the broker for 64 KiB or the batch
//     time, and that wait counts in the batch's time: source.go, fillTime);
//  2. decode them (an order.Decoder per consumer); a malformed event, or one whose row the
//     store cannot hold, goes to the dead-letter topic with its original
//     bytes and a "reason" header (orders.HeaderReason), is logged and counted, and the group
//     moves on past it;
//  3. keep one row per (product, order id): the newest, by the store's rule
//     (a settlement — paid or release — beats its order, whatever the
//     delivery order), since kafka-go has no idempotent producer and
//     re-sends arrive;
//  4. insert the rows into the store, retrying with exponential backoff
//     (capped, default 2 s) for as long as it fails — nothing is committed
//     meanwhile, so ClickHouse being down only delays the batch;
//  5. mark the orders of the order events "success" in Redis (stock.Store.MarkSuccess,
//     per product; only pending -> success, so marking twice is harmless);
//     a failure is logged and retried with the next batch — it only delays
//     the shopper's answer;
//  6. commit the offsets (a failed commit is only redelivery: the store is
//     idempotent), then call OnStored. Marking before committing means a
//     process killed between the two leaves no order stored but pending.
//
// Besides, every consumer watches the group's committed offsets (stall.go):
// a partition whose lag stands still for StallAfter (3× the session) while
// this consumer's own inserts succeed is held by a member that does not
// consume it, and the consumer leaves and rejoins the group so that the
// rebalance drops that member.
//
// Drained and GroupLag tell whether everything published is stored (the
// group's committed offsets reached the end of every partition): reconcile
// waits for it before it counts. Tail is what is not stored yet (the events
// above the committed offsets): warm-up counts it beside the ledger rather
// than wait for the drain, which a dead member's partitions hold up until
// the group rebalances (orderstore.Ledger.Tail).
package consumer
