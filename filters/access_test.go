package filters

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"flashgate/sale/api"
)

func TestAccess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules string
		allow []string
		deny  []string
	}{
		{
			name:  "whitelist",
			rules: `["allow 10.0.0.0/8", "allow 2001:db8::/32", "deny all"]`,
			allow: []string{"10.0.0.1", "10.255.255.255", "2001:db8::1", "::ffff:10.1.2.3"},
			deny:  []string{"11.0.0.1", "9.255.255.255", "2001:db9::1", "::1", "invalid"},
		},
		{
			name:  "blacklist, no match allows",
			rules: `["deny 192.0.2.0/24", "deny 2001:db8::1"]`,
			allow: []string{"192.0.3.1", "2001:db8::2", "invalid"},
			deny:  []string{"192.0.2.0", "192.0.2.255", "2001:db8::1"},
		},
		{
			name:  "first match wins (nginx order)",
			rules: `["deny 192.168.1.1", "allow 192.168.1.0/24", "deny 192.168.0.0/16", "allow all"]`,
			allow: []string{"192.168.1.2", "192.169.0.1", "8.8.8.8"},
			deny:  []string{"192.168.1.1", "192.168.2.1"},
		},
		{
			name:  "a broad rule first hides later ones",
			rules: `["deny all", "allow 10.0.0.1"]`,
			deny:  []string{"10.0.0.1", "::1", "invalid"},
		},
		{
			name:  "edges of the address space",
			rules: `["deny 0.0.0.0/32", "deny 255.255.255.255", "deny ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "deny ::/128"]`,
			allow: []string{"0.0.0.1", "255.255.255.254", "::1"},
			deny:  []string{"0.0.0.0", "255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::"},
		},
		{
			name:  "an IPv6 /0 covers IPv4 too (mapped)",
			rules: `["allow ::/0", "deny all"]`,
			allow: []string{"1.1.1.1", "::1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, clk := newEnv()
			c := mustBuild(t, env, "type: access\nrules: "+tc.rules+"\n")
			check := func(addr string, allowed bool) {
				r := Request{Call: api.Call{NowNano: clk.now}}
				if addr != "invalid" {
					r.ClientIP = netip.MustParseAddr(addr)
				}
				v := c.Run(&r)
				if (v.Reject == nil) != allowed {
					t.Errorf("%s: allowed=%v, want %v", addr, v.Reject == nil, allowed)
				}
				if v.Reject != nil && (v.Reject.Status != 403 || v.Reject.Code != "FORBIDDEN" || v.Reject.Message != "access denied") {
					t.Errorf("%s: rejection %+v", addr, v.Reject)
				}
			}
			for _, a := range tc.allow {
				check(a, true)
			}
			for _, a := range tc.deny {
				check(a, false)
			}
		})
	}
}

// The flattened ranges must agree with a first-match scan for any address.
func TestAccessMatchesLinearScan(t *testing.T) {
	var rules []string
	var prefixes []netip.Prefix
	var allow []bool
	for i := range 300 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i * 7), byte(i * 13), 0}), 8+i%17).Masked()
		verb := "deny"
		if i%3 == 0 {
			verb = "allow"
		}
		rules = append(rules, fmt.Sprintf("%q", verb+" "+p.String()))
		prefixes = append(prefixes, p)
		allow = append(allow, verb == "allow")
	}
	env, clk := newEnv()
	c := mustBuild(t, env, "type: access\nrules: ["+strings.Join(rules, ",")+"]\n")
	for i := range 200000 {
		a := netip.AddrFrom4([4]byte{10, byte(i * 31), byte(i >> 3), byte(i)})
		want := true
		for j, p := range prefixes {
			if p.Contains(a) {
				want = allow[j]
				break
			}
		}
		r := Request{Call: api.Call{ClientIP: a, NowNano: clk.now}}
		if got := c.Run(&r).Reject == nil; got != want {
			t.Fatalf("%v: allowed=%v, want %v", a, got, want)
		}
	}
}

func TestAccessErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"type: access\n", "[0].rules: at least one rule is required"},
		{"type: access\nrules: [\"allow 10.0.0.0/8\", \"permit 1.2.3.4\"]\n", `[0].rules[1]: must start with "allow" or "deny"`},
		{"type: access\nrules: [\"deny\"]\n", `[0].rules[0]: want "allow <address|CIDR|all>"`},
		{"type: access\nrules: [\"deny 10.0.0.0/8 extra\"]\n", `[0].rules[0]: want`},
		{"type: access\nrules: [\"deny 10.1.0.0/8\"]\n", `[0].rules[0]: CIDR "10.1.0.0/8" has host bits set (did you mean 10.0.0.0/8?)`},
		{"type: access\nrules: [\"deny 300.1.1.1\"]\n", `[0].rules[0]: invalid address or CIDR "300.1.1.1"`},
		{"type: access\nrules: [\"deny fe80::1%eth0\"]\n", `[0].rules[0]: invalid address`},
		{"type: access\nrules: \"deny all\"\n", `[0].rules (line 2): expected a list`},
		{"type: access\nallow: [\"10.0.0.0/8\"]\nrules: [\"deny all\"]\n", `[0].allow (line 2): unknown key`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, errs := Build(specsOf(t, tc.yaml), nil)
			if errs == nil || !strings.Contains(errs.Error(), tc.want) {
				t.Fatalf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

func BenchmarkAccess500Rules(b *testing.B) {
	var rules []string
	for i := range 500 {
		rules = append(rules, fmt.Sprintf(`"deny 10.%d.%d.0/24"`, i/256, i%256))
	}
	env, clk := newEnv()
	c := mustBuild(b, env, "type: access\nrules: ["+strings.Join(rules, ",")+", \"allow 2001:db8::/32\", \"deny all\"]\n")
	ips := make([]netip.Addr, 4096)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{10, byte(i % 3), byte(i >> 4), byte(i)})
	}
	var r Request
	r.NowNano = clk.now
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r.ClientIP = ips[i&4095]
		c.Run(&r)
	}
}
