package conf

import (
	"regexp"
	"strings"

	"flashgate/conf/field"
)

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
