package conf

import (
	"time"

	"flashgate/conf/field"
)

// KafkaConfig is the `kafka:` section: where order events go.
type KafkaConfig struct {
	// Brokers; empty starts the embedded Kafka-protocol broker (kfake) in
	// this process, with its state under data_dir/kafka (demo only).
	Brokers  []string `yaml:"brokers"`
	Topic    string   `yaml:"topic"`
	DLQTopic string   `yaml:"dlq_topic"`
	// Partitions of the orders topic when the edge creates it.
	Partitions int `yaml:"partitions"`
	// ReplicationFactor and MinInsyncReplicas of the topics the edge
	// creates; an existing topic with fewer is refused at start (see
	// conf/kafka.go).
	ReplicationFactor int `yaml:"replication_factor"`
	MinInsyncReplicas int `yaml:"min_insync_replicas"`
	// TLS and SASL are how every Kafka client of the edge connects.
	TLS  KafkaTLSConfig  `yaml:"tls"`
	SASL KafkaSASLConfig `yaml:"sasl"`
	// BatchTimeout is how long a dead-lettered message waits for others
	// to share its produce request. Order events wait for no timer: per
	// partition one request is in flight and what queued meanwhile goes
	// as the next one (orders/producer.go).
	BatchTimeout time.Duration `yaml:"batch_timeout"`
	// Timeout bounds one publish: past it the shopper gets 503 with the
	// order id, and the outbox relay delivers the event.
	Timeout time.Duration `yaml:"timeout"`
}

// OrdersConfig is the `orders:` section: the outbox relay and the consumer.
type OrdersConfig struct {
	// RelayInterval and RelayMinAge: every interval, outbox entries older
	// than min_age (never acknowledged by the direct path: a crash or a
	// Kafka failure) are sent again. min_age must exceed kafka.timeout.
	RelayInterval time.Duration `yaml:"relay_interval"`
	RelayMinAge   time.Duration `yaml:"relay_min_age"`
	// Consumer runs the order consumer (Kafka -> order store -> order state
	// "success") inside this edge; `proxy orders` runs it on its own.
	Consumer  bool          `yaml:"consumer"`
	Group     string        `yaml:"group"`
	BatchSize int           `yaml:"batch_size"`
	BatchTime time.Duration `yaml:"batch_time"`
}

// ClickHouseConfig is the `clickhouse:` section: the order store.
type ClickHouseConfig struct {
	// Addr of the native protocol (host:9000); empty uses the embedded
	// order store, a file under data_dir/orders (demo only).
	Addr     string `yaml:"addr"`
	Database string `yaml:"database"`
	Username string `yaml:"username"`
	Password string `yaml:"password" secret:"true"`
}

// fill gives the settings left out or written as zero their defaults.
func (k *KafkaConfig) fill() {
	orDefault(&k.Topic, "seckill.orders")
	orDefault(&k.DLQTopic, "seckill.orders.dlq")
	orDefault(&k.Partitions, 6)
	orDefault(&k.ReplicationFactor, 1)
	orDefault(&k.BatchTimeout, 2*time.Millisecond)
	orDefault(&k.Timeout, 3*time.Second)
}

// fill gives the settings left out or written as zero their defaults.
func (o *OrdersConfig) fill() {
	orDefault(&o.RelayInterval, 500*time.Millisecond)
	orDefault(&o.RelayMinAge, 5*time.Second)
	orDefault(&o.Group, "flashgate-orders")
	orDefault(&o.BatchSize, 500)
	orDefault(&o.BatchTime, 50*time.Millisecond)
}

// fill gives the settings left out or written as zero their defaults.
func (c *ClickHouseConfig) fill() {
	orDefault(&c.Database, "flashgate")
}

func (c *Config) validateOrders(errs *field.Errors) {
	k := c.Kafka
	if k.Partitions < 1 || k.Partitions > 1000 {
		errs.Add("kafka.partitions", "must be between 1 and 1000, got %d", k.Partitions)
	}
	if k.BatchTimeout < 0 || k.BatchTimeout > time.Second {
		errs.Add("kafka.batch_timeout", "must be between 0 and 1s, got %v", k.BatchTimeout)
	}
	if k.Timeout < 100*time.Millisecond || k.Timeout > time.Minute {
		errs.Add("kafka.timeout", "must be between 100ms and 1m, got %v", k.Timeout)
	}
	k.validate(errs)
	o := c.Orders
	if o.RelayInterval < 10*time.Millisecond || o.RelayInterval > time.Minute {
		errs.Add("orders.relay_interval", "must be between 10ms and 1m, got %v", o.RelayInterval)
	}
	if o.RelayMinAge <= k.Timeout {
		errs.Add("orders.relay_min_age", "must be longer than kafka.timeout (%v), or the relay re-sends events the edge is still waiting on", k.Timeout)
	}
	if o.BatchSize < 1 || o.BatchSize > 100000 {
		errs.Add("orders.batch_size", "must be between 1 and 100000, got %d", o.BatchSize)
	}
	if o.BatchTime < time.Millisecond || o.BatchTime > time.Minute {
		errs.Add("orders.batch_time", "must be between 1ms and 1m, got %v", o.BatchTime)
	}
	if _, err := field.ResolveEnv(c.ClickHouse.Password); err != nil {
		errs.Add("clickhouse.password", "%v", err)
	}
}
