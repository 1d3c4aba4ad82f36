// Package kafkatest runs an in-process Kafka-protocol broker
// (github.com/twmb/franz-go/pkg/kfake) on 127.0.0.1 for tests: kafka-go
// writers, readers, consumer groups and CreateTopics work against it, and the
// returned *kfake.Cluster injects faults (Fault, ControlKey) and moves
// partitions. Nothing to install; each test gets its own cluster.
package kafkatest
