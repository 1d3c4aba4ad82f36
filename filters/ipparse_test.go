package filters

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseIP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" = invalid
	}{
		{"1.2.3.4", "1.2.3.4"},
		{"0.0.0.0", "0.0.0.0"},
		{"255.255.255.255", "255.255.255.255"},
		{"256.1.1.1", ""},
		{"01.2.3.4", ""},
		{"1.2.3", ""},
		{"1.2.3.4.5", ""},
		{"1..2.3", ""},
		{"1.2.3.4 ", ""},
		{"", ""},
		{"::", "::"},
		{"::1", "::1"},
		{"1::", "1::"},
		{"2001:db8::1", "2001:db8::1"},
		{"2001:DB8:0:0:0:0:0:1", "2001:db8::1"},
		{"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"},
		{"1:2:3:4:5:6:7:8:9", ""},
		{"1:2:3:4:5:6:7::8", ""},
		{"1::2::3", ""},
		{":1", ""},
		{"1:", ""},
		{"12345::", ""},
		{"::ffff:1.2.3.4", "::ffff:1.2.3.4"},
		{"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"},
		{"1:2:3:4:5:1.2.3.4", ""},
		{"::1.2.3.4", "::102:304"},
		{"fe80::1%eth0", ""},
		{"g::", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := parseIP([]byte(tc.in))
			if tc.want == "" {
				if ok {
					t.Fatalf("parseIP(%q) = %v, want invalid", tc.in, got)
				}
				return
			}
			if !ok || got.String() != tc.want {
				t.Fatalf("parseIP(%q) = %v %v, want %s", tc.in, got, ok, tc.want)
			}
		})
	}
}

func TestParseHostPort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"1.2.3.4", "1.2.3.4"},
		{"1.2.3.4:80", "1.2.3.4"},
		{"1.2.3.4:", ""},
		{"1.2.3.4:65536", ""},
		{"1.2.3.4:x", ""},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]443", ""},
		{"[1.2.3.4]", ""},
		{"2001:db8::1", "2001:db8::1"},
		{"[::1", ""},
		{"unknown", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := parseHostPort([]byte(tc.in))
			if ok != (tc.want != "") || ok && got.String() != tc.want {
				t.Fatalf("parseHostPort(%q) = %v %v, want %q", tc.in, got, ok, tc.want)
			}
		})
	}
}

// FuzzParseIP checks the allocation-free parser against netip.ParseAddr.
func FuzzParseIP(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "::", "::ffff:1.2.3.4", "1:2:3:4:5:6:7:8", "2001:db8::1", "1::2:3.4.5.6", "01.1.1.1", "::1:2:3:4:5:6:7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseIP([]byte(s))
		want, err := netip.ParseAddr(s)
		if strings.Contains(s, "%") {
			if ok {
				t.Fatalf("parseIP(%q) accepted a zone", s)
			}
			return
		}
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("parseIP(%q) = %v %v; netip: %v %v", s, got, ok, want, err)
		}
	})
}

// FuzzParseHostPort checks forwarded entries against netip's parsers.
func FuzzParseHostPort(f *testing.F) {
	for _, s := range []string{"1.2.3.4:80", "[::1]:443", "[::1]", "::1", "1.2.3.4", "[1.2.3.4]:1", "1.2.3.4:0080"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseHostPort([]byte(s))
		var want netip.Addr
		var wok bool
		switch {
		case strings.Contains(s, "%"):
		case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
			a, err := netip.ParseAddr(s[1 : len(s)-1])
			want, wok = a, err == nil && a.Is6()
		case strings.HasPrefix(s, "["), strings.Count(s, ":") == 1:
			ap, err := netip.ParseAddrPort(s)
			want, wok = ap.Addr(), err == nil
		default:
			a, err := netip.ParseAddr(s)
			want, wok = a, err == nil
		}
		if ok != wok || ok && got != want {
			t.Fatalf("parseHostPort(%q) = %v %v; netip: %v %v", s, got, ok, want, wok)
		}
	})
}
