package conf

import (
	"strings"
	"testing"
	"time"
)

func TestUpstreamsDefaults(t *testing.T) {
	c := UpstreamsConfig{
		Pools: []PoolConfig{
			{Name: "a", Servers: []string{"127.0.0.1:1"}},
			{Name: "b", Servers: []string{"127.0.0.1:2"}, Health: HealthConfig{Path: "/h"},
				MaxRetries: intPtr(0), Passive: PassiveConfig{MaxFails: intPtr(0)}, ReadTimeout: 3 * time.Second},
		},
		Routes: []RouteConfig{{Pool: "a"}},
	}
	c.fill()
	a, b := c.Pools[0], c.Pools[1]
	checks := []struct {
		name      string
		got, want any
	}{
		{"balance", a.Balance, RoundRobin},
		{"connect_timeout", a.ConnectTimeout, time.Second},
		{"read_timeout", a.ReadTimeout, 10 * time.Second},
		{"write_timeout", a.WriteTimeout, 10 * time.Second},
		{"max_conns", a.MaxConns, 512},
		{"max_retries", *a.MaxRetries, 1},
		{"no health path, no health defaults", a.Health, HealthConfig{}},
		{"max_fails", *a.Passive.MaxFails, 3},
		{"fail_timeout", a.Passive.FailTimeout, 10 * time.Second},
		{"health", b.Health, HealthConfig{Path: "/h", Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}},
		{"explicit max_retries 0 kept", *b.MaxRetries, 0},
		{"explicit max_fails 0 kept", *b.Passive.MaxFails, 0},
		{"explicit read_timeout kept", b.ReadTimeout, 3 * time.Second},
		{"route prefix", c.Routes[0].Prefix, "/"},
		{"route host stays any", c.Routes[0].Host, ""},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

func TestUpstreamsValidate(t *testing.T) {
	valid := func() UpstreamsConfig {
		return UpstreamsConfig{
			Pools: []PoolConfig{
				{Name: "web", Servers: []string{"10.0.0.1:80", "origin.internal:8080"}},
				{Name: "api", Servers: []string{"[::1]:9000"}, Balance: LeastPending, Health: HealthConfig{Path: "/healthz"}},
			},
			Routes: []RouteConfig{{Prefix: "/", Pool: "web"}, {Prefix: "/api/", Host: "Shop.Example", Pool: "api"}},
		}
	}
	tests := []struct {
		name   string
		mutate func(*UpstreamsConfig)
		want   []string // "path: message fragment"
	}{
		{"valid", func(*UpstreamsConfig) {}, nil},
		{"duplicate pool", func(c *UpstreamsConfig) { c.Pools[1].Name = "web" },
			[]string{"pools[1].name: duplicate pool name", "routes[1].pool: unknown pool \"api\""}},
		{"missing name", func(c *UpstreamsConfig) { c.Pools[0].Name = "" },
			[]string{"pools[0].name: required", "routes[0].pool: unknown pool"}},
		{"no servers", func(c *UpstreamsConfig) { c.Pools[0].Servers = nil },
			[]string{"pools[0].servers: at least one"}},
		{"server without port", func(c *UpstreamsConfig) { c.Pools[0].Servers[1] = "origin.internal" },
			[]string{"pools[0].servers[1]: want host:port"}},
		{"server bad port", func(c *UpstreamsConfig) { c.Pools[0].Servers[0] = "10.0.0.1:99999" },
			[]string{"pools[0].servers[0]: port"}},
		{"server url", func(c *UpstreamsConfig) { c.Pools[0].Servers[0] = "http://10.0.0.1:80" },
			[]string{"pools[0].servers[0]:"}},
		{"duplicate server", func(c *UpstreamsConfig) { c.Pools[0].Servers[1] = "10.0.0.1:80" },
			[]string{"pools[0].servers[1]: duplicate server"}},
		{"unknown balance", func(c *UpstreamsConfig) { c.Pools[0].Balance = "random" },
			[]string{"pools[0].balance: unknown balance"}},
		{"negative timeouts", func(c *UpstreamsConfig) {
			c.Pools[0].ConnectTimeout, c.Pools[0].ReadTimeout, c.Pools[0].WriteTimeout = -1, -1, -1
		}, []string{"pools[0].connect_timeout: must be positive", "pools[0].read_timeout:", "pools[0].write_timeout:"}},
		{"retries out of range", func(c *UpstreamsConfig) { c.Pools[0].MaxRetries = intPtr(99) },
			[]string{"pools[0].max_retries:"}},
		{"health path", func(c *UpstreamsConfig) { c.Pools[1].Health.Path = "healthz" },
			[]string{"pools[1].health.path: must start"}},
		{"health fall", func(c *UpstreamsConfig) { c.Pools[1].Health.Fall = -1 },
			[]string{"pools[1].health.fall:"}},
		{"passive", func(c *UpstreamsConfig) {
			c.Pools[0].Passive.MaxFails = intPtr(-1)
			c.Pools[0].Passive.FailTimeout = -1
		},
			[]string{"pools[0].passive.max_fails:", "pools[0].passive.fail_timeout:"}},
		{"route to unknown pool", func(c *UpstreamsConfig) { c.Routes[1].Pool = "nope" },
			[]string{"routes[1].pool: unknown pool \"nope\""}},
		{"route prefix", func(c *UpstreamsConfig) { c.Routes[0].Prefix = "api" },
			[]string{"routes[0].prefix: must start"}},
		{"route host with port", func(c *UpstreamsConfig) { c.Routes[1].Host = "shop.example:443" },
			[]string{"routes[1].host: must not include a port"}},
		{"duplicate route, host compared case-insensitively", func(c *UpstreamsConfig) {
			c.Routes = append(c.Routes, RouteConfig{Prefix: "/api/", Host: "shop.example", Pool: "web"})
		}, []string{"routes[2]: duplicate route"}},
		{"same prefix on another host is fine", func(c *UpstreamsConfig) {
			c.Routes = append(c.Routes, RouteConfig{Prefix: "/api/", Pool: "web"})
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			c.fill()
			errs := c.Validate()
			var got []string
			for _, e := range errs {
				got = append(got, e.Path+": "+e.Msg)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d errors %q, want %d like %q", len(got), got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("error %d = %q, want prefix %q", i, got[i], w)
				}
			}
		})
	}
}
