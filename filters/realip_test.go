package filters

import (
	"bufio"
	"cmp"
	"flashgate/conf"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func newCtx(peer string, header string, values ...string) *fasthttp.RequestCtx {
	ctx := &fasthttp.RequestCtx{}
	var req fasthttp.Request
	req.SetRequestURI("/api/seckill/do")
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(peer), Port: 40000}, nil)
	for _, v := range values {
		ctx.Request.Header.Add(header, v)
	}
	return ctx
}

// edgeHeader is real_ip.header's default, which a test's "" stands for.
var edgeHeader = conf.Defaults().RealIP.Header

func mustRealIP(t testing.TB, header string, trusted ...string) *RealIP {
	t.Helper()
	ri, errs := NewRealIP(cmp.Or(header, edgeHeader), trusted)
	if errs != nil {
		t.Fatal(errs)
	}
	return ri
}

func TestRealIPResolve(t *testing.T) {
	ri := mustRealIP(t, "", "10.0.0.0/8", "192.168.1.1", "2001:db8::/32")
	for _, tc := range []struct {
		name   string
		peer   string
		values []string
		want   string
	}{
		{"untrusted peer, no header", "203.0.113.7", nil, "203.0.113.7"},
		{"untrusted peer, spoofed header ignored", "203.0.113.7", []string{"1.1.1.1"}, "203.0.113.7"},
		{"trusted peer, no header", "10.1.1.1", nil, "10.1.1.1"},
		{"trusted peer, one client", "10.1.1.1", []string{"198.51.100.1"}, "198.51.100.1"},
		{"rightmost untrusted wins", "10.1.1.1", []string{"6.6.6.6, 198.51.100.1, 10.2.2.2"}, "198.51.100.1"},
		{"client spoofs left of the real entry", "10.1.1.1", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"all trusted: leftmost", "10.1.1.1", []string{"10.9.9.9, 192.168.1.1, 10.2.2.2"}, "10.9.9.9"},
		{"malformed stops the walk", "10.1.1.1", []string{"1.1.1.1, garbage, 10.2.2.2"}, "10.2.2.2"},
		{"malformed rightmost: peer", "10.1.1.1", []string{"1.1.1.1, unknown"}, "10.1.1.1"},
		{"spaces and empty entries", "10.1.1.1", []string{" 7.7.7.7 ,, 10.2.2.2 , "}, "7.7.7.7"},
		{"space separated like nginx", "10.1.1.1", []string{"5.5.5.5 10.2.2.2"}, "5.5.5.5"},
		{"ports", "10.1.1.1", []string{"[2001:db9::5]:1234, 10.2.2.2:80"}, "2001:db9::5"},
		{"mapped is unmapped", "10.1.1.1", []string{"::ffff:8.8.8.8"}, "8.8.8.8"},
		{"mapped trusted", "10.1.1.1", []string{"9.9.9.9, ::ffff:10.3.3.3"}, "9.9.9.9"},
		{"ipv6 peer trusted", "2001:db8::1", []string{"4.4.4.4"}, "4.4.4.4"},
		{"mapped peer unmapped", "::ffff:10.1.1.1", []string{"4.4.4.4"}, "4.4.4.4"},
		{"several lines are one list", "10.1.1.1", []string{"3.3.3.3", "10.2.2.2, 10.3.3.3"}, "3.3.3.3"},
		{"several lines, untrusted in the last", "10.1.1.1", []string{"3.3.3.3", "4.4.4.4"}, "4.4.4.4"},
		{"several lines, garbage in the first", "10.1.1.1", []string{"x", "10.3.3.3"}, "10.3.3.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := newCtx(tc.peer, "X-Forwarded-For", tc.values...)
			if got := ri.Resolve(ctx); got.String() != tc.want {
				t.Fatalf("Resolve = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestRealIPNoTrusted(t *testing.T) {
	ri := mustRealIP(t, "X-Real-IP")
	ctx := newCtx("10.1.1.1", "X-Real-IP", "1.1.1.1")
	if got := ri.Resolve(ctx); got.String() != "10.1.1.1" {
		t.Fatalf("got %v", got)
	}
}

func TestRealIPOtherHeader(t *testing.T) {
	ri := mustRealIP(t, "x-real-ip", "127.0.0.1")
	ctx := newCtx("127.0.0.1", "X-Real-IP", "2.2.2.2")
	if got := ri.Resolve(ctx); got.String() != "2.2.2.2" {
		t.Fatalf("got %v", got)
	}
}

// A client behind a trusted proxy must not be able to append its own entry
// after the proxy's by sending the header as a trailer of a chunked body.
// fasthttp refuses X-Forwarded-* and X-Real-IP trailers itself; other client
// address headers (here X-Client-IP) are ours to guard.
func TestRealIPIgnoresTrailer(t *testing.T) {
	ri := mustRealIP(t, "X-Client-IP", "10.0.0.0/8")
	raw := "POST /api/seckill/do HTTP/1.1\r\nHost: x\r\nX-Client-IP: 198.51.100.1\r\n" +
		"Transfer-Encoding: chunked\r\nTrailer: X-Client-IP\r\n\r\n" +
		"2\r\nhi\r\n0\r\nX-Client-IP: 6.6.6.6\r\n\r\n"
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.ParseIP("10.0.0.1")}, nil)
	if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	if all := ctx.Request.Header.PeekAll("X-Client-IP"); len(all) != 2 {
		t.Fatalf("fixture: want the header in both sections, PeekAll = %q", all)
	}
	if got := ri.Resolve(ctx); got.String() != "198.51.100.1" {
		t.Fatalf("Resolve = %v, want 198.51.100.1 (the trailer must be ignored)", got)
	}
}

func TestNewRealIPErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  string
		trusted []string
		want    string
	}{
		{"bad cidr", "", []string{"10.0.0.0/8", "10.0.0.0/33"}, "trusted_proxies[1]: invalid CIDR"},
		{"host bits", "", []string{"10.1.0.0/8"}, `trusted_proxies[0]: CIDR "10.1.0.0/8" has host bits set (did you mean 10.0.0.0/8?)`},
		{"bad address", "", []string{"nope"}, "trusted_proxies[0]: invalid address"},
		{"bad header", "X Forwarded", nil, "header:"},
		{"forwarded", "forwarded", nil, "header: the Forwarded header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := NewRealIP(cmp.Or(tc.header, edgeHeader), tc.trusted)
			if errs == nil || !strings.Contains(errs.Error(), tc.want) {
				t.Fatalf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestRealIPResolveAllocs(t *testing.T) {
	ri := mustRealIP(t, "", "10.0.0.0/8")
	ctx := newCtx("10.0.0.1", "X-Forwarded-For", "1.2.3.4, 2001:db8::1, 10.2.3.4", "10.9.9.9")
	if got := ri.Resolve(ctx); got.String() != "2001:db8::1" {
		t.Fatalf("Resolve = %v", got)
	}
	if n := testing.AllocsPerRun(1000, func() { ri.Resolve(ctx) }); n != 0 {
		t.Fatalf("Resolve allocates %v times per run", n)
	}
}

// refResolve is the obvious, allocating implementation of the same rules.
func refResolve(trusted []netip.Prefix, peer netip.Addr, lines []string) netip.Addr {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	addr := peer
	if !isTrusted(addr) {
		return addr
	}
	var entries []string
	for _, l := range lines {
		entries = append(entries, strings.FieldsFunc(l, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })...)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		a, ok := refHostPort(entries[i])
		if !ok {
			return addr
		}
		if addr = a.Unmap(); !isTrusted(addr) {
			return addr
		}
	}
	return addr
}

func refHostPort(s string) (netip.Addr, bool) {
	switch {
	case strings.Contains(s, "%"):
		return netip.Addr{}, false
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		return a, err == nil && a.Is6()
	case strings.HasPrefix(s, "["), strings.Count(s, ":") == 1:
		ap, err := netip.ParseAddrPort(s)
		return ap.Addr(), err == nil
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

// FuzzRealIPHeader feeds arbitrary header lines (split at newlines) through
// the walk and compares with refResolve.
func FuzzRealIPHeader(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4, 10.0.0.2", "x, 10.0.0.2", "[2001:db8::1]:80 , 10.0.0.3\n5.5.5.5", ",,, ", "10.0.0.1\n10.0.0.2"} {
		f.Add(s)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	ri := mustRealIP(f, "", "10.0.0.0/8", "2001:db8::/32")
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, v string) {
		lines := strings.Split(v, "\n")
		bl := make([][]byte, len(lines))
		for i, l := range lines {
			bl[i] = []byte(l)
		}
		got := ri.fromLines(peer, bl)
		if want := refResolve(trusted, peer, lines); got != want {
			t.Fatalf("fromLines(%q) = %v, want %v", v, got, want)
		}
	})
}

func BenchmarkRealIPResolve(b *testing.B) {
	ri := mustRealIP(b, "", "10.0.0.0/8", "172.16.0.0/12")
	ctx := newCtx("10.0.0.1", "X-Forwarded-For", "198.51.100.23, 10.1.2.3")
	b.ReportAllocs()
	for b.Loop() {
		ri.Resolve(ctx)
	}
}
