package upstream

import "time"

// Config is the `upstreams:` section: named origin pools and the routes that
// map requests to them.
type Config struct {
	Pools  []PoolConfig  `yaml:"pools"`
	Routes []RouteConfig `yaml:"routes"`
}

// PoolConfig is one named origin pool.
type PoolConfig struct {
	Name           string        `yaml:"name"`
	Balance        string        `yaml:"balance"` // round_robin | least_pending
	Servers        []string      `yaml:"servers"`
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	ReadTimeout    time.Duration `yaml:"read_timeout"`
	WriteTimeout   time.Duration `yaml:"write_timeout"`
	MaxConns       int           `yaml:"max_conns"`
	MaxRetries     int           `yaml:"max_retries"`
	Health         HealthConfig  `yaml:"health"`
	Passive        PassiveConfig `yaml:"passive"`
}

// HealthConfig is an active health check.
type HealthConfig struct {
	Path     string        `yaml:"path"`
	Interval time.Duration `yaml:"interval"`
	Timeout  time.Duration `yaml:"timeout"`
	Rise     int           `yaml:"rise"`
	Fall     int           `yaml:"fall"`
}

// PassiveConfig ejects a server after MaxFails failures within FailTimeout,
// for FailTimeout (nginx max_fails/fail_timeout).
type PassiveConfig struct {
	MaxFails    int           `yaml:"max_fails"`
	FailTimeout time.Duration `yaml:"fail_timeout"`
}

// RouteConfig maps a path prefix (and optionally a host) to a pool.
type RouteConfig struct {
	Prefix string `yaml:"prefix"`
	Host   string `yaml:"host"`
	Pool   string `yaml:"pool"`
}
