// Package orders carries purchases from the Redis deduction to durable
// storage through Kafka: the publisher the edge waits on before answering
// "pending", the outbox relay that re-sends what a crash left behind, the
// topics and the dead-letter headers, and the embedded Kafka-protocol broker
// of the zero-setup demo. The event itself is order.Event, the order model's
// wire form.
//
// # The direct path (promise 2 of docs/architecture.md: "queued" is durable)
//
// After stock.Store.Deduct returned OK, the edge calls
//
//	err := pub.PublishAndAck(ctx, broker.OrderEvent(&attempt.Order), outcome.OutboxID)
//
// which returns once Kafka acknowledged the event (acks=all) — only then may
// the edge answer 200 pending. Concurrent calls share produce requests
// through a group commit per partition (producer.go, on kafka-go's
// Client.Produce rather than its Writer): while a partition's request is in
// flight, its events queue; when it returns, everything queued goes as the
// next request. No timer, so a lone publish costs one produce round trip
// (the Writer added its 2ms BatchTimeout) and under load batches grow to
// what queued during one round trip. One request in flight per partition
// keeps one order's events in order; keys map to partitions exactly as
// kafka.Hash did (FNV-1a, not murmur2), so existing topics keep their
// layout. Retriable errors are retried with backoff (20ms..500ms) while the
// caller still waits; Timeout bounds the caller's wait. BenchmarkPublish's
// doc has the measurements against the Writer. After the acknowledgement the
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
// Relay.Close, then Publisher.Close (sends queued events, then flushes
// queued outbox removals), then
// the stock.Store, then the embedded broker's stop.
//
// # The embedded broker
//
// StartEmbeddedWith runs github.com/twmb/franz-go/pkg/kfake in the process on
// 127.0.0.1, with topics, messages and committed group offsets kept under a
// locked data directory across restarts. One node, for a first run only.
package broker
