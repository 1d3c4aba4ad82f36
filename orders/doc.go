// Package orders carries purchases from the Redis deduction to durable
// storage: the versioned order event, the Kafka publisher the edge waits on
// before answering "pending", the outbox relay that re-sends what a crash
// left behind, and the embedded Kafka-protocol broker of the zero-setup demo.
package orders
