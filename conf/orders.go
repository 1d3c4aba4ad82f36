package conf

import (
	"regexp"
	"strings"
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
	// BatchTimeMax is how long the batch time may grow under a steady
	// stream of events (it doubles per batch from batch_time, and returns
	// to batch_time when the stream pauses): fewer, larger inserts, so
	// that ClickHouse's merges stay cheap. batch_time keeps it fixed.
	BatchTimeMax time.Duration `yaml:"batch_time_max"`
	// PayTimeout is how long a shopper has to pay for an order (from its
	// deduction); past it the order is released and its units go back on
	// sale. 0 = no deadline (the order stays until cancelled). An
	// activity's own pay_timeout overrides it.
	PayTimeout time.Duration `yaml:"pay_timeout"`
}

// PaymentsConfig is the `payments:` section: how the payment system tells
// the edge that an order was paid, besides POST /admin/orders/paid.
type PaymentsConfig struct {
	// WebhookSecret signs the payment provider's calls of
	// POST /api/payments/webhook (HMAC-SHA256; >= 32 bytes, "env:NAME"
	// allowed). Empty: the webhook is off (404).
	WebhookSecret string `yaml:"webhook_secret" secret:"true"`
	// WebhookTolerance is how far a call's timestamp may be from the
	// edge's clock; its event ids are remembered (replays refused) for
	// twice as long.
	WebhookTolerance time.Duration `yaml:"webhook_tolerance"`
}

// fill gives the settings left out or written as zero their defaults.
func (p *PaymentsConfig) fill() {
	orDefault(&p.WebhookTolerance, 5*time.Minute)
}

// WebhookSecretBytes resolves the webhook secret; nil when the webhook is
// off.
func (p *PaymentsConfig) WebhookSecretBytes() ([]byte, error) {
	return secret(p.WebhookSecret)
}

// Validate checks the section; paths are relative to `payments`.
func (p *PaymentsConfig) Validate() field.Errors {
	var errs field.Errors
	if _, err := p.WebhookSecretBytes(); err != nil {
		errs.Add("webhook_secret", "%v", err)
	}
	if p.WebhookTolerance < time.Second || p.WebhookTolerance > time.Hour {
		errs.Add("webhook_tolerance", "must be between 1s and 1h, got %v", p.WebhookTolerance)
	}
	return errs
}

// checkPayTimeout checks a pay timeout (the global or an activity's):
// 0 is off; otherwise at least 1s (the deadlines are swept every 100ms,
// and a shorter one is no time to pay) and below the order states' life
// in Redis, which must outlive the deadline it guards.
func checkPayTimeout(errs *field.Errors, path string, d, orderTTL time.Duration) {
	switch {
	case d < 0:
		errs.Add(path, "must not be negative (0 = no deadline), got %v", d)
	case d > 0 && d < time.Second:
		errs.Add(path, "must be 0 (no deadline) or at least 1s, got %v", d)
	case d > 0 && d >= orderTTL:
		errs.Add(path, "must be below sale.order_ttl (%v): the order's state must outlive its deadline, got %v", orderTTL, d)
	}
}

// ClickHouseConfig is the `clickhouse:` section: the order store.
type ClickHouseConfig struct {
	// Addr of the native protocol (host:9000, several comma-separated
	// for failover); empty uses the embedded order store, a file under
	// data_dir/orders (demo only).
	Addr     string `yaml:"addr"`
	Database string `yaml:"database"`
	Username string `yaml:"username"`
	Password string `yaml:"password" secret:"true"`
	// Cluster names a cluster of the servers' remote_servers: the tables
	// are created ON CLUSTER as ReplicatedReplacingMergeTree tables
	// (*_local) on every member and Distributed tables over them, sharded
	// by a hash of user_id. "" keeps the single-node layout.
	Cluster string `yaml:"cluster"`
	// ZooKeeperPath and Replica are the replicated tables' path and
	// replica name: {shard} and {replica} are the servers' macros,
	// {database} and {table} the edge fills in.
	ZooKeeperPath string `yaml:"zookeeper_path"`
	Replica       string `yaml:"replica"`
	// RetentionMonths, if positive, drops whole months of orders older
	// than that many months, unless a product in them is still in use
	// (orderstore.DropExpired); 0 keeps every order.
	RetentionMonths int `yaml:"retention_months"`
	// TLS to the servers' secure native port (tcp_port_secure, 9440): the
	// same section as kafka.tls.
	TLS KafkaTLSConfig `yaml:"tls"`
}

// The defaults of clickhouse.zookeeper_path and clickhouse.replica (the
// order store has the same).
const (
	DefaultZooKeeperPath = "/clickhouse/tables/{shard}/{database}/{table}"
	DefaultReplica       = "{replica}"
)

// maxRetentionMonths bounds clickhouse.retention_months at a century.
const maxRetentionMonths = 1200

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
	orDefault(&o.BatchTimeMax, max(400*time.Millisecond, o.BatchTime))
}

// fill gives the settings left out or written as zero their defaults.
func (c *ClickHouseConfig) fill() {
	orDefault(&c.Database, "flashgate")
	orDefault(&c.ZooKeeperPath, DefaultZooKeeperPath)
	orDefault(&c.Replica, DefaultReplica)
}

var (
	chIdentRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	chZKPathRE = regexp.MustCompile(`^/[A-Za-z0-9_{}./-]{1,255}$`)
)

// validate checks the section offline (proxy -t): names, the path, the
// retention and the TLS files. Whether the cluster exists, every member
// answers and the tables have the layout is checked at start.
func (c *ClickHouseConfig) validate(errs *field.Errors) {
	if _, err := field.ResolveEnv(c.Password); err != nil {
		errs.Add("clickhouse.password", "%v", err)
	}
	if !chIdentRE.MatchString(c.Database) {
		errs.Add("clickhouse.database", "letters, digits and _ only (starting with a letter or _), got %q", c.Database)
	}
	embedded := c.Addr == ""
	if c.Cluster != "" {
		if !chIdentRE.MatchString(c.Cluster) {
			errs.Add("clickhouse.cluster", "letters, digits and _ only (a name of remote_servers), got %q", c.Cluster)
		}
		if embedded {
			errs.Add("clickhouse.cluster", "the embedded order store is one file: set clickhouse.addr")
		}
		// Without {shard} every shard's replicas would share one path
		// and copy each other's rows; without {table} the ledger and the
		// catalogue would.
		if !chZKPathRE.MatchString(c.ZooKeeperPath) {
			errs.Add("clickhouse.zookeeper_path", "an absolute path of letters, digits, _ - . / and {macros}, got %q", c.ZooKeeperPath)
		} else if !strings.Contains(c.ZooKeeperPath, "{shard}") || !strings.Contains(c.ZooKeeperPath, "{table}") {
			errs.Add("clickhouse.zookeeper_path", "must contain {shard} and {table} (each shard and table replicates on its own path), got %q", c.ZooKeeperPath)
		}
		if !chZKPathRE.MatchString("/" + c.Replica) {
			errs.Add("clickhouse.replica", "letters, digits, _ - . and {macros}, got %q", c.Replica)
		}
	}
	switch {
	case c.RetentionMonths < 0 || c.RetentionMonths > maxRetentionMonths:
		errs.Add("clickhouse.retention_months", "must be between 0 (keep every order) and %d, got %d", maxRetentionMonths, c.RetentionMonths)
	case c.RetentionMonths > 0 && embedded:
		errs.Add("clickhouse.retention_months", "the embedded order store keeps every order: set clickhouse.addr")
	}
	if c.TLS.On() && embedded {
		errs.Add("clickhouse.tls", "the embedded order store has no TLS: set clickhouse.addr")
	}
	_, tlsErrs := c.TLS.Config()
	errs.Nest("clickhouse.tls", tlsErrs)
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
	if o.BatchTimeMax < o.BatchTime || o.BatchTimeMax > time.Minute {
		errs.Add("orders.batch_time_max", "must be between orders.batch_time (%v) and 1m, got %v", o.BatchTime, o.BatchTimeMax)
	}
	checkPayTimeout(errs, "orders.pay_timeout", o.PayTimeout, c.Sale.OrderTTL)
	c.ClickHouse.validate(errs)
}
