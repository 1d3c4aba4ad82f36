package conf

import (
	"strings"

	"flashgate/conf/field"
)

// validateDemoLogin refuses auth.demo_login beside a real Redis, Kafka or
// ClickHouse. Demo login signs anyone in as any user they name; with the
// embedded stand-ins nothing real can be bought, but a real Redis means a
// sale shoppers can reach, and an edge that boots the shipped edge.yaml with
// only redis.addr changed must not open it to everyone. auth.demo_login_force
// keeps it for a test rig on real servers (browser and e2e tests sign in
// through the page).
func (c *Config) validateDemoLogin(errs *field.Errors) {
	if !c.Auth.DemoLogin || c.Auth.DemoLoginForce {
		return
	}
	if real := c.RealServers(); len(real) > 0 {
		errs.Add("auth.demo_login", "signs anyone in as any user; it is refused with real servers (%s): set auth.demo_login: false, or auth.demo_login_force: true on a test rig", strings.Join(real, ", "))
	}
}

// RealServers names the backing services configured as real servers
// rather than the embedded stand-ins: "redis", "kafka", "clickhouse". It
// names sections, never addresses (a URL may hold a password).
func (c *Config) RealServers() []string {
	var real []string
	if !c.Redis.Embedded() {
		real = append(real, "redis")
	}
	if len(c.Kafka.Brokers) > 0 {
		real = append(real, "kafka")
	}
	if c.ClickHouse.Addr != "" {
		real = append(real, "clickhouse")
	}
	return real
}
