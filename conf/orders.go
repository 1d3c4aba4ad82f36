package conf

import (
	"time"

	"flashgate/conf/field"
)

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

// fill gives the settings left out or written as zero their defaults.
func (o *OrdersConfig) fill() {
	orDefault(&o.RelayInterval, 500*time.Millisecond)
	orDefault(&o.RelayMinAge, 5*time.Second)
	orDefault(&o.Group, "flashgate-orders")
	orDefault(&o.BatchSize, 500)
	orDefault(&o.BatchTime, 50*time.Millisecond)
	orDefault(&o.BatchTimeMax, max(400*time.Millisecond, o.BatchTime))
}

// WithDefaults returns c with the defaults Parse gives the `orders:`
// section: constructors fill their zero settings from it (doc.go).
func (c OrdersConfig) WithDefaults() OrdersConfig {
	c.fill()
	return c
}

func (c *Config) validateOrders(errs *field.Errors) {
	k := c.Kafka
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
