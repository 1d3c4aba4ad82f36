package conf

import (
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the YAML document as written by ops, after defaults. It is never
// used on the request path: the proxy compiles it into a snapshot.
type Config struct {
	// NodeID tells edges apart (order ids, logs). 0..1023.
	NodeID int `yaml:"node_id"`

	Listen    ListenConfig    `yaml:"listen"`
	Admin     AdminConfig     `yaml:"admin"`
	Log       LogConfig       `yaml:"log"`
	RealIP    RealIPConfig    `yaml:"real_ip"`
	Filters   []FilterConfig  `yaml:"filters"`
	Static    StaticConfig    `yaml:"static"`
	Upstreams UpstreamsConfig `yaml:"upstreams"`
	Reload    ReloadConfig    `yaml:"reload"`

	// DataDir is where the embedded stand-ins (Redis, Kafka, the order
	// store) keep their state across restarts; "" keeps it in memory.
	DataDir    string           `yaml:"data_dir"`
	Redis      RedisConfig      `yaml:"redis"`
	Kafka      KafkaConfig      `yaml:"kafka"`
	Orders     OrdersConfig     `yaml:"orders"`
	ClickHouse ClickHouseConfig `yaml:"clickhouse"`
	Auth       AuthConfig       `yaml:"auth"`
	Sale       SaleConfig       `yaml:"sale"`
	Events     EventsConfig     `yaml:"events"`
	Payments   PaymentsConfig   `yaml:"payments"`
	Activities []ActivityConfig `yaml:"activities"`
}

// ListenConfig is the shopper-facing listener.
type ListenConfig struct {
	Addr               string        `yaml:"addr"`
	ReadTimeout        time.Duration `yaml:"read_timeout"`
	WriteTimeout       time.Duration `yaml:"write_timeout"`
	IdleTimeout        time.Duration `yaml:"idle_timeout"`
	MaxRequestBodySize int           `yaml:"max_request_body_size"`
	ReadBufferSize     int           `yaml:"read_buffer_size"`
	Concurrency        int           `yaml:"concurrency"`
	MaxConnsPerIP      int           `yaml:"max_conns_per_ip"`
	ShutdownTimeout    time.Duration `yaml:"shutdown_timeout"`
	// TLS makes the listener speak HTTPS (conf/tls.go).
	TLS ListenTLSConfig `yaml:"tls"`
}

// LogConfig controls the structured logs.
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
	// AccessSample is the fraction of requests written to the access log
	// (0 = none, 1 = all). Errors (5xx) are always logged.
	AccessSample float64 `yaml:"access_sample"`
}

// RealIPConfig resolves the client address like nginx's realip module with
// real_ip_recursive on.
type RealIPConfig struct {
	Header         string   `yaml:"header"`
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// ReloadConfig controls how edits of the config file reach the running edge.
type ReloadConfig struct {
	Watch    bool          `yaml:"watch"`
	Debounce time.Duration `yaml:"debounce"`
}

// FilterConfig is one entry of the chain. Its own settings stay as a YAML
// node until the filter's constructor decodes them.
type FilterConfig struct {
	Type    string `yaml:"type"`
	Name    string `yaml:"name"`
	Enabled *bool  `yaml:"enabled"`
	DryRun  bool   `yaml:"dry_run"`
	// Scope is "api" (the sale API only, the default) or "all" (every request,
	// pages and proxied paths too).
	Scope string `yaml:"scope"`

	Node *yaml.Node `yaml:"-"`
}

// commonFilterKeys are decoded by FilterConfig; filter constructors skip them.
var commonFilterKeys = []string{"type", "name", "enabled", "dry_run", "scope"}

// UnmarshalYAML keeps the node for the filter constructor and decodes only the
// common keys here.
func (f *FilterConfig) UnmarshalYAML(node *yaml.Node) error {
	f.Node = node
	var common struct {
		Type    string `yaml:"type"`
		Name    string `yaml:"name"`
		Enabled *bool  `yaml:"enabled"`
		DryRun  bool   `yaml:"dry_run"`
		Scope   string `yaml:"scope"`
	}
	if err := node.Decode(&common); err != nil {
		return err
	}
	f.Type, f.Name, f.Enabled, f.DryRun, f.Scope = common.Type, common.Name, common.Enabled, common.DryRun, common.Scope
	return nil
}
