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

func TestRouteCacheDefaults(t *testing.T) {
	c := UpstreamsConfig{
		Pools: []PoolConfig{{Name: "a", Servers: []string{"127.0.0.1:1"}}},
		Routes: []RouteConfig{
			{Pool: "a", Cache: &CacheConfig{TTL: time.Second}},
			{Prefix: "/x/", Pool: "a", Cache: &CacheConfig{TTL: time.Second, Key: []string{"path"}, XCache: boolPtr(false)}},
			{Prefix: "/y/", Pool: "a"},
		},
	}
	d := c.WithDefaults()
	if c.Routes[0].Cache.MaxBytes != 0 {
		t.Fatal("WithDefaults changed the caller's cache config")
	}
	a, b := d.Routes[0].Cache, d.Routes[1].Cache
	if a.MaxBytes != 64<<20 || a.LockTimeout != 5*time.Second || !*a.XCache ||
		strings.Join(a.Key, ",") != "method,host,path,query" || a.StaleIfError != 0 || a.StaleWhileRevalidate != 0 {
		t.Errorf("defaults: %+v", *a)
	}
	if strings.Join(b.Key, ",") != "path" || *b.XCache {
		t.Errorf("explicit key and x_cache not kept: %+v", *b)
	}
	if d.Routes[2].Cache != nil {
		t.Error("a route without cache got one")
	}
	if errs := d.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
}

func TestRouteCacheValidate(t *testing.T) {
	tests := []struct {
		name string
		c    CacheConfig
		want []string
	}{
		{"no ttl", CacheConfig{}, []string{"routes[0].cache.ttl: must be positive"}},
		{"negative windows", CacheConfig{TTL: time.Second, StaleWhileRevalidate: -1, StaleIfError: -1},
			[]string{"routes[0].cache.stale_while_revalidate: must not be negative", "routes[0].cache.stale_if_error: must not be negative"}},
		{"tiny max_bytes", CacheConfig{TTL: time.Second, MaxBytes: 100}, []string{"routes[0].cache.max_bytes: must be at least"}},
		{"unknown key part", CacheConfig{TTL: time.Second, Key: []string{"path", "scheme"}}, []string{`routes[0].cache.key[1]: unknown part "scheme"`}},
		{"header without name", CacheConfig{TTL: time.Second, Key: []string{"header:"}}, []string{"routes[0].cache.key[0]: a name is required"}},
		{"cookie with a bad name", CacheConfig{TTL: time.Second, Key: []string{"cookie:a b"}}, []string{`routes[0].cache.key[0]: name "a b"`}},
		{"duplicate part", CacheConfig{TTL: time.Second, Key: []string{"path", "header:X-A", "header:x-a"}},
			[]string{`routes[0].cache.key[2]: duplicate part "header:x-a" (also key[1])`}},
		{"named parts are fine", CacheConfig{TTL: time.Second, Key: []string{"method", "host", "path", "query", "header:Accept-Language", "cookie:currency"}}, nil},
		// One user's answer served to another: refused unless the key
		// names Authorization or the route says it is public on purpose.
		{"with_authorization on the default key", CacheConfig{TTL: time.Second, WithAuthorization: true},
			[]string{`routes[0].cache.with_authorization: serves one user's answer to another: add "header:Authorization" to key, or say public: true`}},
		{"with_authorization, a key without it", CacheConfig{TTL: time.Second, WithAuthorization: true, Key: []string{"path", "cookie:sid"}},
			[]string{"routes[0].cache.with_authorization: serves one user's answer to another"}},
		{"with_authorization keyed by it", CacheConfig{TTL: time.Second, WithAuthorization: true, Key: []string{"path", "header:authorization"}}, nil},
		{"with_authorization, public", CacheConfig{TTL: time.Second, WithAuthorization: true, Public: true}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cc := tc.c
			c := UpstreamsConfig{
				Pools:  []PoolConfig{{Name: "a", Servers: []string{"127.0.0.1:1"}}},
				Routes: []RouteConfig{{Pool: "a", Cache: &cc}},
			}
			c.fill()
			var got []string
			for _, e := range c.Validate() {
				got = append(got, e.Path+": "+e.Msg)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("error %d = %q, want prefix %q", i, got[i], w)
				}
			}
		})
	}
}

// TestRouteCacheParse: the YAML form, and the strict decoder naming an
// unknown cache field.
func TestRouteCacheParse(t *testing.T) {
	const doc = "upstreams:\n  pools:\n    - name: web\n      servers: [\"127.0.0.1:9000\"]\n  routes:\n" +
		"    - prefix: /products/\n      pool: web\n      cache:\n        ttl: 1s\n        stale_while_revalidate: 10s\n" +
		"        stale_if_error: 5m\n        max_bytes: 1048576\n        key: [method, host, path, query, \"header:Accept-Language\"]\n"
	d, err := Parse([]byte(doc), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cc := d.Config.Upstreams.Routes[0].Cache
	if cc == nil || cc.TTL != time.Second || cc.StaleWhileRevalidate != 10*time.Second || cc.StaleIfError != 5*time.Minute ||
		cc.MaxBytes != 1<<20 || len(cc.Key) != 5 || cc.Key[4] != "header:Accept-Language" || cc.LockTimeout != 5*time.Second {
		t.Fatalf("parsed %+v", cc)
	}
	_, err = Parse([]byte(strings.Replace(doc, "ttl: 1s", "ttl: 1s\n        tll: 2s", 1)), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "tll") {
		t.Fatalf("an unknown field: %v", err)
	}
}
