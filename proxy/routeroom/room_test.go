package routeroom

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
)

var testSecrets = DeriveSecrets([]byte(strings.Repeat("s", 32)))

func testRoom(t testing.TB, c conf.RouteRoomConfig) *Room {
	t.Helper()
	if c.Name == "" {
		c.Name = "shop"
	}
	if c.MaxActive == 0 && c.AdmitPerMinute == 0 {
		c.MaxActive = 10
	}
	rm, err := New(c.WithDefaults(), Options{Secrets: testSecrets})
	if err != nil {
		t.Fatal(err)
	}
	return rm
}

func reqCtx(path string, hdr ...string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI(path)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}, nil)
	return ctx
}

// passCookie is the pass the room gives an admitted visitor.
func passCookie(rm *Room, nowMs, untilMs, checkMs int64) string {
	ctx := reqCtx("/")
	v := Visit{passTo: untilMs, checkAt: checkMs}
	v.id[0] = 7
	rm.setPass(ctx, &v)
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(CookiePrefix + rm.Name())
	ctx.Response.Header.Cookie(c)
	return string(c.Value())
}

// TestPassFromMemoryAllocs: an admitted visitor whose pass needs no check
// is let through from memory: no Redis (the room has no store here: a
// call would panic), no allocation.
func TestPassFromMemoryAllocs(t *testing.T) {
	rm := testRoom(t, conf.RouteRoomConfig{})
	now := int64(1_000_000)
	cookie := passCookie(rm, now, now+60_000, now+30_000)
	ctx := reqCtx("/shop/x", "Cookie", CookiePrefix+"shop="+cookie)
	ip := netip.MustParseAddr("10.1.2.3")
	if _, ok := rm.Gate(ctx, ip, now+1); !ok {
		t.Fatal("a valid pass is not let through")
	}
	if n := testing.AllocsPerRun(200, func() {
		v, ok := rm.Gate(ctx, ip, now+1)
		if !ok {
			t.Fatal("refused")
		}
		rm.Finish(ctx, &v)
	}); n != 0 {
		t.Fatalf("Gate+Finish allocate %.1f times for an admitted visitor", n)
	}
}

// TestPassForgedOrOtherRoom: a pass of another room, or a tampered one, is
// not a pass: the visitor queues (here: the room's missing store is
// reached, which the test sees as a panic).
func TestPassForgedOrOtherRoom(t *testing.T) {
	rm := testRoom(t, conf.RouteRoomConfig{})
	other := testRoom(t, conf.RouteRoomConfig{Name: "other"})
	now := int64(1_000_000)
	good := passCookie(rm, now, now+60_000, now+30_000)
	tampered := []byte(good)
	tampered[5] ^= 1
	for name, c := range map[string]string{"other room's": passCookie(other, now, now+60_000, now+30_000), "tampered": string(tampered),
		"expired": passCookie(rm, now, now+10, now+10)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s pass let through without Redis", name)
				}
			}()
			rm.Gate(reqCtx("/shop/x", "Cookie", CookiePrefix+"shop="+c), netip.Addr{}, now+20)
		}()
	}
}

// TestBypass: a path prefix, a client CIDR and a minted token (header or
// cookie, this room's, unexpired) walk past; nothing else does.
func TestBypass(t *testing.T) {
	rm := testRoom(t, conf.RouteRoomConfig{Bypass: conf.RoomBypassConfig{CIDRs: []string{"192.0.2.0/24", "2001:db8::1"}, Paths: []string{"/shop/static/"}}})
	other := testRoom(t, conf.RouteRoomConfig{Name: "other"})
	now := int64(5_000_000)
	tok := rm.MintBypass(now + 1000)
	for _, c := range []struct {
		name string
		ctx  *fasthttp.RequestCtx
		ip   string
		want bool
	}{
		{"static path", reqCtx("/shop/static/app.css"), "10.0.0.1", true},
		{"cidr", reqCtx("/shop/"), "192.0.2.77", true},
		{"single v6", reqCtx("/shop/"), "2001:db8::1", true},
		{"v4-mapped", reqCtx("/shop/"), "::ffff:192.0.2.1", true},
		{"header token", reqCtx("/shop/", BypassHeader, tok), "10.0.0.1", true},
		{"cookie token", reqCtx("/shop/", "Cookie", BypassCookie+"="+tok), "10.0.0.1", true},
		{"other room's token", reqCtx("/shop/", BypassHeader, other.MintBypass(now+1000)), "10.0.0.1", false},
		{"expired token", reqCtx("/shop/", BypassHeader, rm.MintBypass(now)), "10.0.0.1", false},
		{"nothing", reqCtx("/shop/"), "10.0.0.1", false},
	} {
		if got := rm.bypassed(c.ctx, netip.MustParseAddr(c.ip), now); got != c.want {
			t.Errorf("%s: bypassed %v, want %v", c.name, got, c.want)
		}
	}
	// The origin never sees an operator's token, good or bad.
	for _, tk := range []string{tok, "forged"} {
		ctx := reqCtx("/shop/", BypassHeader, tk)
		rm.bypassed(ctx, netip.MustParseAddr("10.0.0.1"), now)
		if len(ctx.Request.Header.Peek(BypassHeader)) != 0 {
			t.Errorf("the bypass header %q reaches the origin", tk)
		}
	}
}

// TestRejectAnswersClosedPage: the reject method answers the closed page
// (503) from memory, JSON for apps.
func TestRejectAnswersClosedPage(t *testing.T) {
	rm := testRoom(t, conf.RouteRoomConfig{Method: conf.RoomReject})
	ctx := reqCtx("/shop/", "Accept-Language", "zh-CN,zh;q=0.9,en;q=0.8")
	if _, ok := rm.Gate(ctx, netip.Addr{}, 1); ok || ctx.Response.StatusCode() != 503 || !bytes.Contains(ctx.Response.Body(), []byte("暂未开放")) {
		t.Fatalf("reject: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	ctx = reqCtx("/shop/", "Accept", "application/json")
	rm.Gate(ctx, netip.Addr{}, 1)
	if ctx.Response.StatusCode() != 503 || string(ctx.Response.Body()) != `{"room":"shop","status":"closed"}` {
		t.Fatalf("reject JSON: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

func TestLang(t *testing.T) {
	for in, want := range map[string]string{
		"": "en", "zh-CN,zh;q=0.9,en;q=0.8": "zh", "en-US,en;q=0.9,zh;q=0.8": "en", "fr-FR,zh-TW;q=0.5": "zh",
		"de,fr": "en", "en;q=0.2, zh-Hans;q=0.3": "zh", "ZH": "zh",
	} {
		if got := Lang([]byte(in)); got != want {
			t.Errorf("Lang(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestOperatorPage: an operator's template gets the fields; a template
// that does not parse or execute is refused when the config is compiled.
func TestOperatorPage(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.html")
	os.WriteFile(good, []byte(`<p>{{.Room}} #{{.Place}} ahead {{.Ahead}} eta {{.ETA}} {{.Progress}}%</p>{{.Script}}`), 0o644)
	p, err := LoadPage(good)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := p.render(&out, PageData{Room: "Launch <b>", Place: 4, Ahead: 3, ETA: "2 min", Progress: 50, PollMs: 5000}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "Launch &lt;b&gt; #4 ahead 3 eta 2 min 50%") || !strings.Contains(s, "Flashgate-Room-Poll") {
		t.Fatalf("rendered %s", s)
	}
	for name, body := range map[string]string{"parse": "{{.Room", "exec": "{{.NoSuchField}}"} {
		f := filepath.Join(dir, name+".html")
		os.WriteFile(f, []byte(body), 0o644)
		if _, err := LoadPage(f); err == nil {
			t.Errorf("%s error not caught", name)
		}
	}
	if _, err := LoadPage(filepath.Join(dir, "missing.html")); err == nil {
		t.Error("a missing file is accepted")
	}
}

func TestETAWords(t *testing.T) {
	for _, c := range []struct {
		lang string
		ms   int64
		want string
	}{{"en", -1, "being worked out"}, {"en", 1, "1 s"}, {"en", 59_000, "59 s"}, {"en", 61_000, "2 min"}, {"en", 3_700_000, "1 h 2 min"},
		{"zh", 30_000, "30 秒"}, {"zh", 120_000, "2 分钟"}} {
		if got := etaWords(c.lang, c.ms); got != c.want {
			t.Errorf("etaWords(%s, %d) = %q, want %q", c.lang, c.ms, got, c.want)
		}
	}
	_ = time.Second
}

// BenchmarkGatePass is an admitted visitor's request through the room:
// the pass verified from memory.
func BenchmarkGatePass(b *testing.B) {
	rm := testRoom(b, conf.RouteRoomConfig{})
	now := int64(1_000_000)
	cookie := passCookie(rm, now, now+60_000, now+30_000)
	ctx := reqCtx("/shop/x", "Cookie", CookiePrefix+"shop="+cookie)
	ip := netip.MustParseAddr("10.1.2.3")
	b.ReportAllocs()
	for b.Loop() {
		v, ok := rm.Gate(ctx, ip, now+1)
		if !ok {
			b.Fatal("refused")
		}
		rm.Finish(ctx, &v)
	}
}
