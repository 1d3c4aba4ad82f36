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
	Password string `yaml:"password"`
}

func (c *Config) setOrderDefaults() {
	k := &c.Kafka
	if k.Topic == "" {
		k.Topic = "seckill.orders"
	}
	if k.DLQTopic == "" {
		k.DLQTopic = "seckill.orders.dlq"
	}
	if k.Partitions == 0 {
		k.Partitions = 6
	}
	if k.BatchTimeout == 0 {
		k.BatchTimeout = 2 * time.Millisecond
	}
	if k.Timeout == 0 {
		k.Timeout = 3 * time.Second
	}
	o := &c.Orders
	if o.RelayInterval == 0 {
		o.RelayInterval = 500 * time.Millisecond
	}
	if o.RelayMinAge == 0 {
		o.RelayMinAge = 5 * time.Second
	}
	if o.Group == "" {
		o.Group = "flashgate-orders"
	}
	if o.BatchSize == 0 {
		o.BatchSize = 500
	}
	if o.BatchTime == 0 {
		o.BatchTime = 50 * time.Millisecond
	}
	if c.ClickHouse.Database == "" {
		c.ClickHouse.Database = "flashgate"
	}
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
