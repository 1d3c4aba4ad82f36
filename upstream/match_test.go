package upstream

import (
	"flashgate/conf"
	"testing"
)

func routingConfig() conf.UpstreamsConfig {
	pool := func(name string) conf.PoolConfig {
		return conf.PoolConfig{Name: name, Servers: []string{"127.0.0.1:1"}}
	}
	return conf.UpstreamsConfig{
		Pools: []conf.PoolConfig{pool("web"), pool("api"), pool("api-v2"), pool("shop"), pool("shop-img"), pool("v6")},
		Routes: []conf.RouteConfig{
			{Prefix: "/", Pool: "web"},
			{Prefix: "/api/", Pool: "api"},
			{Prefix: "/api/v2/", Pool: "api-v2"},
			{Prefix: "/", Host: "shop.example", Pool: "shop"},
			{Prefix: "/img/", Host: "Shop.Example", Pool: "shop-img"},
			{Prefix: "/", Host: "[::1]", Pool: "v6"},
		},
	}
}

func TestMatch(t *testing.T) {
	m := NewManager(nil)
	defer m.Close()
	s, err := m.Build(routingConfig().WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, host, path, want string
	}{
		{"catch-all", "other.example", "/index.html", "web"},
		{"prefix", "other.example", "/api/orders", "api"},
		{"longest prefix wins", "other.example", "/api/v2/orders", "api-v2"},
		{"prefix needs its slash", "other.example", "/api", "web"},
		{"no host header", "", "/api/x", "api"},
		{"host route beats host-less longer prefix", "shop.example", "/api/orders", "shop"},
		{"host route longest prefix", "shop.example", "/img/a.png", "shop-img"},
		{"host case-insensitive", "SHOP.example", "/img/a.png", "shop-img"},
		{"port ignored", "shop.example:8080", "/img/a.png", "shop-img"},
		{"trailing dot", "shop.example.", "/", "shop"},
		{"subdomain is another host", "www.shop.example", "/", "web"},
		{"ipv6 literal with port", "[::1]:443", "/", "v6"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := s.Match([]byte(tc.host), []byte(tc.path))
			if p == nil || p.Name() != tc.want {
				t.Fatalf("Match(%q, %q) = %v, want %s", tc.host, tc.path, p, tc.want)
			}
		})
	}

	t.Run("nothing matches", func(t *testing.T) {
		c := routingConfig()
		c.Routes = []conf.RouteConfig{{Prefix: "/api/", Pool: "api"}, {Prefix: "/", Host: "shop.example", Pool: "shop"}}
		s, err := m.Build(c.WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		if p := s.Match([]byte("other.example"), []byte("/index.html")); p != nil {
			t.Fatalf("got %s, want nil", p.Name())
		}
		if p := (*Set)(nil).Match([]byte("x"), []byte("/")); p != nil {
			t.Fatal("nil set matched")
		}
	})
	t.Run("lookup by name", func(t *testing.T) {
		if s.Pool("api").Name() != "api" || s.Pool("none") != nil || len(s.Pools()) != 6 {
			t.Fatal("Pool/Pools disagree with the config")
		}
	})
}

func TestMatchAllocs(t *testing.T) {
	m := NewManager(nil)
	defer m.Close()
	s, err := m.Build(routingConfig().WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	host, path := []byte("Shop.Example:8080"), []byte("/img/logo.png")
	if n := testing.AllocsPerRun(1000, func() { s.Match(host, path) }); n != 0 {
		t.Fatalf("Match allocates %v times", n)
	}
}

func BenchmarkMatch(b *testing.B) {
	m := NewManager(nil)
	defer m.Close()
	s, err := m.Build(routingConfig().WithDefaults())
	if err != nil {
		b.Fatal(err)
	}
	host, path := []byte("Shop.Example:8080"), []byte("/img/logo.png")
	b.ReportAllocs()
	for b.Loop() {
		s.Match(host, path)
	}
}
