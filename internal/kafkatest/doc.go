// Package kafkatest runs an in-process Kafka-protocol broker
// (github.com/twmb/franz-go/pkg/kfake) on 127.0.0.1 for tests: kafka-go
// writers, readers, consumer groups and CreateTopics work against it, and the
// returned *kfake.Cluster injects faults (Fault, ControlKey) and moves
// partitions. Nothing to install; each test gets its own cluster.
//
// Start is one broker. StartCluster is several (a three-broker cluster for
// topics with replication factor 3) whose brokers stop and start again like
// broker processes: a stopped broker drops its clients' connections, and
// kfake moves its partitions' leadership to the others. kfake does not
// replicate (its brokers share one log): see Cluster for what that means
// for a test.
//
// StartProcess is one broker in a process of its own (the test binary run
// again; its TestMain calls ServeChild first), for a test that kills the
// broker the way a machine loses it and starts it again with its data.
package kafkatest
