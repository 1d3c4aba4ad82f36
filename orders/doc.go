// Package orders carries purchases from the Redis deduction to durable
// storage: the versioned order event, the Kafka publisher the edge waits on
// before answering "pending", the outbox relay that re-sends what a crash
// left behind, and the embedded Kafka-protocol broker of the zero-setup demo.
//
// # The direct path (DESIGN.md promise 2: "queued" means durable)
//
// After stock.Store.Deduct returned OK, the edge calls
//
//	err := pub.PublishAndAck(ctx, orders.OrderEvent(&attempt), outcome.OutboxID)
//
// which returns once Kafka acknowledged the event (acks=all) — only then may
// the edge answer 200 pending. Concurrent calls share kafka-go's
// per-partition batches (BatchTimeout 2ms, not kafka-go's 1s default), so a
// synchronous publish costs about BatchTimeout plus one produce round trip,
// and the rate is bounded by concurrent publishers / that latency
// (BenchmarkPublish64, BenchmarkPublish256). After the acknowledgement the
// order's outbox entry is handed to a background acker that removes it
// (stock.Store.AckOutbox: XDEL + XACK, batched per product); that removal is
// cleanup, not part of the promise. On error the edge answers 503 with the
// order id and leaves the entry to the relay.
//
// # The relay
//
// Every edge runs a Relay over every product's outbox (consumer group
// stock.RelayGroup). It takes new entries into its pending list without
// publishing them, and re-sends entries that sat pending for MinAge (5s) —
// from any consumer, so a dead edge's entries are claimed by the living —
// then removes them. Delivery is at least once; consumers drop duplicates by
// order id (kafka-go has no idempotent producer either: an ambiguous produce
// timeout is retried into a duplicate).
//
// # Shutdown order
//
// Relay.Close, then Publisher.Close (flushes queued outbox removals), then
// the stock.Store, then the embedded broker's stop.
//
// # The embedded broker
//
// StartEmbedded runs github.com/twmb/franz-go/pkg/kfake in the process on
// 127.0.0.1, with topics, messages and committed group offsets kept under a
// locked data directory across restarts. One node, for a first run only.
package orders
