package static

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"flashgate/conf"
	"flashgate/orders/order"
)

// section is the `static:` section as conf loads it, with edit applied.
func section(edit func(c *conf.StaticConfig)) conf.StaticConfig {
	c := conf.Defaults().Static
	edit(&c)
	return c
}

func newHandler(t testing.TB, c conf.StaticConfig) *Handler {
	t.Helper()
	h, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// request builds a RequestCtx the way the server hands one to a handler.
func request(method, uri string, headers ...string) *fasthttp.RequestCtx {
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	for i := 0; i+1 < len(headers); i += 2 {
		ctx.Request.Header.Set(headers[i], headers[i+1])
	}
	return ctx
}

func header(ctx *fasthttp.RequestCtx, k string) string { return string(ctx.Response.Header.Peek(k)) }

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestServePage(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	ctx := request("GET", "/seckill/p1")
	h.ServePage(ctx)

	if got := ctx.Response.StatusCode(); got != 200 {
		t.Fatalf("status = %d", got)
	}
	want := map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-cache",
		"Vary":                   "Accept-Encoding",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "same-origin",
		"Content-Encoding":       "",
	}
	for k, v := range want {
		if got := header(ctx, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if etag := header(ctx, "ETag"); !regexp.MustCompile(`^"[0-9a-f]{24}"$`).MatchString(etag) {
		t.Errorf("ETag = %q, want a strong quoted hash", etag)
	}
	csp := header(ctx, "Content-Security-Policy")
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("CSP %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP allows something unsafe: %q", csp)
	}
	body := ctx.Response.Body()
	if !bytes.Contains(body, []byte(`id="buy"`)) {
		t.Errorf("page body is not the sale page: %.80q", body)
	}
}

func TestAssetHeaders(t *testing.T) {
	tests := []struct {
		name, ctype string
	}{
		{"app.js", "text/javascript; charset=utf-8"},
		{"app.css", "text/css; charset=utf-8"},
		{"favicon.svg", "image/svg+xml"},
	}
	h := newHandler(t, conf.Defaults().Static)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := request("GET", AssetPath+tt.name)
			h.ServeAsset(ctx, []byte(tt.name))
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("status = %d", ctx.Response.StatusCode())
			}
			if got := header(ctx, "Content-Type"); got != tt.ctype {
				t.Errorf("Content-Type = %q, want %q", got, tt.ctype)
			}
			if got := header(ctx, "Cache-Control"); got != "public, max-age=300" {
				t.Errorf("Cache-Control = %q", got)
			}
			if got := header(ctx, "Content-Security-Policy"); got != "" {
				t.Errorf("asset carries the page's CSP: %q", got)
			}
			if got := header(ctx, "X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options = %q", got)
			}
		})
	}
}

func TestCacheControlConfig(t *testing.T) {
	tests := []struct {
		name       string
		c          conf.StaticConfig
		page, asst string
	}{
		{"defaults", conf.Defaults().Static, "no-cache", "public, max-age=300"},
		{"max age", section(func(c *conf.StaticConfig) { c.MaxAge = time.Hour }), "no-cache", "public, max-age=3600"},
		{"explicit", section(func(c *conf.StaticConfig) {
			c.CacheControl, c.PageCacheControl = "public, max-age=31536000, immutable", "no-store"
		}), "no-store", "public, max-age=31536000, immutable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHandler(t, tt.c)
			ctx := request("GET", "/seckill/p1")
			h.ServePage(ctx)
			if got := header(ctx, "Cache-Control"); got != tt.page {
				t.Errorf("page Cache-Control = %q, want %q", got, tt.page)
			}
			ctx = request("GET", AssetPath+"app.js")
			h.ServeAsset(ctx, []byte("app.js"))
			if got := header(ctx, "Cache-Control"); got != tt.asst {
				t.Errorf("asset Cache-Control = %q, want %q", got, tt.asst)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := New(section(func(c *conf.StaticConfig) { c.CacheControl = "public\r\nSet-Cookie: a=1" })); err == nil {
		t.Fatal("New accepted a header value with a line break")
	}
}

func TestNames(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	if got := strings.Join(h.Names(), " "); got != "app.css app.js favicon.svg pow.js" {
		t.Fatalf("Names() = %q", got)
	}
}

func TestImageOriginsInCSP(t *testing.T) {
	h := newHandler(t, section(func(c *conf.StaticConfig) { c.ImageOrigins = []string{"https://img.example.com/"} }))
	ctx := request("GET", "/seckill/p1")
	h.ServePage(ctx)
	if csp := header(ctx, "Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data: https://img.example.com;") {
		t.Fatalf("CSP = %q", csp)
	}
}

func TestGzipNegotiation(t *testing.T) {
	tests := []struct {
		ae   string
		gzip bool
	}{
		{"", false},
		{"gzip", true},
		{"GZIP", true},
		{"x-gzip", true},
		{"gzip, deflate, br", true},
		{"br;q=1.0, gzip;q=0.8, *;q=0.1", true},
		{"deflate,gzip", true},
		{" gzip ; q=0.5 ", true},
		{"gzip;q=1", true},
		{"gzip;q=1.000", true},
		{"gzip;q=0.001", true},
		{"gzip;q=0", false},
		{"gzip; q=0", false},
		{"gzip;Q=0.0", false},
		{"gzip;q=0.000", false},
		{"gzip;q=0.", false},
		{"gzip;q=abc", false},
		{"gzip;q=2", false},
		{"gzip;level=1;q=0", false},
		{"gzip;q=0, *", false},
		{"*", true},
		{"*;q=0", false},
		{"br, *;q=0.5", true},
		{"identity", false},
		{"br", false},
		{"gzipx", false},
		{"deflate, br, zstd", false},
		{"gzip;q=0, x-gzip", true},
	}
	h := newHandler(t, conf.Defaults().Static)
	plainBody := h.page.body
	for _, tt := range tests {
		t.Run(tt.ae, func(t *testing.T) {
			if got := acceptsGzip([]byte(tt.ae)); got != tt.gzip {
				t.Fatalf("acceptsGzip(%q) = %v, want %v", tt.ae, got, tt.gzip)
			}
			ctx := request("GET", "/seckill/p1", "Accept-Encoding", tt.ae)
			h.ServePage(ctx)
			enc := header(ctx, "Content-Encoding")
			body := ctx.Response.Body()
			if tt.gzip {
				if enc != "gzip" {
					t.Fatalf("Content-Encoding = %q, want gzip", enc)
				}
				if !bytes.Equal(gunzip(t, body), plainBody) {
					t.Fatal("gzip body does not decode to the page")
				}
				if !strings.HasSuffix(header(ctx, "ETag"), `-gz"`) {
					t.Errorf("gzip ETag = %q, want the -gz variant", header(ctx, "ETag"))
				}
			} else {
				if enc != "" {
					t.Fatalf("Content-Encoding = %q, want none", enc)
				}
				if !bytes.Equal(body, plainBody) {
					t.Fatal("identity body differs from the page")
				}
			}
		})
	}
}

func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0", "*;q=0.5", "br, gzip;q=0.001", ";;,,q=", "gzip;q=0.0000"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := acceptsGzip(b)
		low := strings.ToLower(string(b))
		if got && !strings.Contains(low, "gzip") && !strings.Contains(low, "*") {
			t.Fatalf("acceptsGzip(%q) = true without gzip or *", b)
		}
	})
}

func TestConditional(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	etag := string(h.page.etag)
	gz := string(h.page.etagGz)
	bare := strings.Trim(etag, `"`)
	tests := []struct {
		name, inm string
		want      int
	}{
		{"none", "", 200},
		{"exact", etag, 304},
		{"weak", "W/" + etag, 304},
		{"gzip tag on identity request", gz, 304},
		{"list", `"abc", ` + etag, 304},
		{"list weak no spaces", `"abc",W/` + etag, 304},
		{"star", "*", 304},
		{"other", `"abc"`, 200},
		{"prefix of ours", `"` + bare[:10] + `"`, 200},
		{"unquoted", bare, 304},
		{"unterminated", `"` + bare, 200},
		{"tag with comma", `"a,` + bare + `"`, 200},
		{"empty list", " , ,", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := request("GET", "/seckill/p1")
			if tt.inm != "" {
				ctx.Request.Header.Set("If-None-Match", tt.inm)
			}
			h.ServePage(ctx)
			if got := ctx.Response.StatusCode(); got != tt.want {
				t.Fatalf("If-None-Match %q: status %d, want %d", tt.inm, got, tt.want)
			}
			if tt.want == 304 {
				if len(ctx.Response.Body()) != 0 {
					t.Error("304 carries a body")
				}
				if header(ctx, "ETag") != etag || header(ctx, "Cache-Control") == "" || header(ctx, "Vary") == "" {
					t.Errorf("304 lacks ETag/Cache-Control/Vary: %s", ctx.Response.Header.String())
				}
			}
		})
	}
}

func FuzzETagMatches(f *testing.F) {
	h := newHandler(f, conf.Defaults().Static)
	for _, s := range []string{"*", `"x"`, `W/"x", "y"`, string(h.page.etag), `"`, "W/", ",,", `W/"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := etagMatches(b, h.page)
		if got && !bytes.Contains(b, []byte("*")) && !bytes.Contains(b, h.page.etag[1:25]) {
			t.Fatalf("etagMatches(%q) = true without our tag or *", b)
		}
	})
}

func TestMethods(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "get"} {
		t.Run(m, func(t *testing.T) {
			for _, serve := range []func(*fasthttp.RequestCtx){h.ServePage, func(c *fasthttp.RequestCtx) { h.ServeAsset(c, []byte("app.js")) }} {
				ctx := request(m, "/seckill/p1")
				serve(ctx)
				if ctx.Response.StatusCode() != 405 {
					t.Fatalf("%s: status %d, want 405", m, ctx.Response.StatusCode())
				}
				if got := header(ctx, "Allow"); got != "GET, HEAD" {
					t.Fatalf("Allow = %q", got)
				}
			}
		})
	}
}

func TestHead(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	ctx := request("HEAD", "/seckill/p1")
	h.ServePage(ctx)
	if ctx.Response.StatusCode() != 200 || !ctx.Response.SkipBody {
		t.Fatalf("HEAD: status %d, SkipBody %v", ctx.Response.StatusCode(), ctx.Response.SkipBody)
	}
}

func TestTraversal(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	names := []string{
		"", ".", "..", "../handler.go", "../../go.mod", "..%2fhandler.go", "%2e%2e/handler.go", "%2e%2e%2fhandler.go",
		"/etc/passwd", "/app.js", "//app.js", `..\handler.go`, `\app.js`, `site\app.js`, "site/app.js", "./app.js",
		"app.js/", "app.js/.", "app.js%00", "app.js\x00", "APP.JS", "app.js ", "index.html", "app.js?v=1",
		".gitignore", "handler.go", "site",
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ctx := request("GET", "/x")
			h.ServeAsset(ctx, []byte(name))
			if ctx.Response.StatusCode() != 404 {
				t.Fatalf("ServeAsset(%q) = %d, want 404", name, ctx.Response.StatusCode())
			}
			if got := header(ctx, "Content-Type"); got != "text/plain; charset=utf-8" {
				t.Errorf("404 Content-Type = %q", got)
			}
		})
	}
}

// serveOnLoopback runs a real fasthttp server routing as the edge does
// (assets under AssetPath, the page under /seckill/{productId}, nothing
// else), so the wire (Content-Length, HEAD, path normalization) is tested
// too.
func serveOnLoopback(t *testing.T, h *Handler) *fasthttp.HostClient {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if name, ok := bytes.CutPrefix(ctx.Path(), []byte(AssetPath)); ok {
			h.ServeAsset(ctx, name)
		} else if id, ok := bytes.CutPrefix(ctx.Path(), []byte("/seckill/")); ok && order.ValidProductID(id) {
			h.ServePage(ctx)
		} else {
			ctx.SetStatusCode(404)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(); ln.Close() })
	return &fasthttp.HostClient{Addr: "edge", Dial: func(string) (net.Conn, error) { return ln.Dial() }}
}

func TestOverTheWire(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	c := serveOnLoopback(t, h)
	do := func(method, uri string, hdr ...string) *fasthttp.Response {
		req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod(method)
		req.SetRequestURI("http://edge" + uri)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if method == "HEAD" {
			resp.SkipBody = true
		}
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}

	t.Run("GET gzip", func(t *testing.T) {
		r := do("GET", "/seckill/p1", "Accept-Encoding", "gzip")
		if r.StatusCode() != 200 || string(r.Header.ContentEncoding()) != "gzip" || r.Header.ContentLength() != len(h.page.gz) {
			t.Fatalf("status %d, encoding %q, length %d (gz %d)", r.StatusCode(), r.Header.ContentEncoding(), r.Header.ContentLength(), len(h.page.gz))
		}
	})
	t.Run("HEAD", func(t *testing.T) {
		r := do("HEAD", "/seckill/p1")
		if r.StatusCode() != 200 || r.Header.ContentLength() != len(h.page.body) || len(r.Body()) != 0 {
			t.Fatalf("status %d, Content-Length %d (want %d), body %d bytes", r.StatusCode(), r.Header.ContentLength(), len(h.page.body), len(r.Body()))
		}
	})
	t.Run("304", func(t *testing.T) {
		r := do("GET", AssetPath+"app.js", "If-None-Match", string(h.assets["app.js"].etag))
		if r.StatusCode() != 304 || len(r.Body()) != 0 {
			t.Fatalf("status %d, body %d bytes", r.StatusCode(), len(r.Body()))
		}
	})
	// What arrives at the router after fasthttp decoded and normalized the
	// path: none of these may reach a file outside the set.
	for _, uri := range []string{
		"/seckill/_static/../handler.go", "/seckill/_static/%2e%2e/handler.go", "/seckill/_static/%2e%2e%2fhandler.go",
		"/seckill/_static/..%5chandler.go", "/seckill/_static/%2fetc%2fpasswd", "/seckill/_static//etc/passwd",
		"/seckill/_static/nope.js", "/seckill/_static/index.html", "/seckill/../static/handler.go", "/seckill/_static",
	} {
		t.Run(uri, func(t *testing.T) {
			if r := do("GET", uri); r.StatusCode() != 404 {
				t.Fatalf("GET %s = %d, want 404", uri, r.StatusCode())
			}
		})
	}
}

func TestDirOverride(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("index.html", `<link rel="stylesheet" href="/seckill/_static/x.css"><img src="/seckill/_static/img/logo.png">`)
	write("x.css", "body{color:red}")
	write("img/logo.png", "\x89PNG")
	write(".env", "SECRET=1")
	write(".git/config", "[core]")

	h := newHandler(t, section(func(c *conf.StaticConfig) { c.Dir = dir }))
	ctx := request("GET", "/seckill/p1")
	h.ServePage(ctx)
	page := string(ctx.Response.Body())
	if !regexp.MustCompile(`/seckill/_static/x\.css\?v=[0-9a-f]{10}"`).MatchString(page) ||
		!strings.Contains(page, "/seckill/_static/img/logo.png?v=") {
		t.Fatalf("links not versioned: %s", page)
	}
	for name, want := range map[string]int{"x.css": 200, "img/logo.png": 200, "app.js": 404, ".env": 404, ".git/config": 404} {
		ctx := request("GET", AssetPath+name)
		h.ServeAsset(ctx, []byte(name))
		if got := ctx.Response.StatusCode(); got != want {
			t.Errorf("%s: status %d, want %d", name, got, want)
		}
	}
	ctx = request("GET", AssetPath+"img/logo.png")
	h.ServeAsset(ctx, []byte("img/logo.png"))
	if header(ctx, "Content-Type") != "image/png" || header(ctx, "Content-Encoding") != "" {
		t.Errorf("png: %s", ctx.Response.Header.String())
	}

	t.Run("errors", func(t *testing.T) {
		noPage := t.TempDir()
		os.WriteFile(filepath.Join(noPage, "app.js"), nil, 0o644)
		for name, d := range map[string]string{
			"missing":    filepath.Join(dir, "nope"),
			"not a dir":  filepath.Join(dir, "x.css"),
			"no page":    noPage,
			"unreadable": unreadableDir(t),
		} {
			if d == "" {
				continue
			}
			if _, err := New(section(func(c *conf.StaticConfig) { c.Dir = d })); err == nil {
				t.Errorf("%s: New succeeded", name)
			}
		}
	})
}

// unreadableDir returns a directory whose page cannot be read, or "" when
// running as root (permissions do not stop root).
func unreadableDir(t *testing.T) string {
	if os.Geteuid() == 0 {
		return ""
	}
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "index.html"), []byte("x"), 0o000)
	return d
}

func TestPageLinksVersionedAssets(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	for _, name := range []string{"app.js", "app.css", "favicon.svg"} {
		f := h.assets[name]
		if f == nil {
			t.Fatalf("%s not embedded", name)
		}
		want := `"` + AssetPath + name + "?v=" + string(f.etag[1:11]) + `"`
		if !bytes.Contains(h.page.body, []byte(want)) {
			t.Errorf("page does not link %s", want)
		}
	}
}

// The browser tests and the page's own script rely on these ids.
func TestPageElementIDs(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	for _, id := range []string{"product-name", "price", "status", "countdown", "login-form", "user-id", "login-btn", "user", "qty", "buy", "message", "order-id"} {
		if !bytes.Contains(h.page.body, []byte(`id="`+id+`"`)) {
			t.Errorf("page lacks #%s", id)
		}
	}
	if !regexp.MustCompile(`id="message"[^>]*aria-live="polite"`).Match(h.page.body) {
		t.Error("#message is not aria-live")
	}
	for _, label := range []string{`for="user-id"`, `for="qty"`} {
		if !bytes.Contains(h.page.body, []byte(label)) {
			t.Errorf("page lacks label %s", label)
		}
	}
}

func TestGzippedSizeBudget(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	total, plain := 0, 0
	for _, f := range append([]*file{h.page}, values(h.assets)...) {
		n := len(f.body)
		if f.gz != nil {
			n = len(f.gz)
		}
		t.Logf("%-12s %6d bytes, %6d gzipped", f.name, len(f.body), n)
		total += n
		plain += len(f.body)
	}
	t.Logf("total        %6d bytes, %6d gzipped", plain, total)
	if total >= 50*1024 {
		t.Fatalf("page weighs %d bytes gzipped; the budget is 50 KB", total)
	}
}

func values(m map[string]*file) []*file {
	out := make([]*file, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	return out
}

// The page must not make a single request to anyone but the edge: scan
// every embedded file for absolute and protocol-relative URLs.
func TestNoThirdPartyURLs(t *testing.T) {
	// XML namespace names are identifiers, never fetched.
	allowed := map[string]bool{"http://www.w3.org/2000/svg": true}
	abs := regexp.MustCompile(`(?i)\b(?:https?|ftp|wss?):\/\/[^\s"'<>)]*`)
	protoRel := regexp.MustCompile(`(?i)(?:src|href|action)\s*=\s*["']?\/\/|url\(\s*["']?\/\/|@import`)
	err := fs.WalkDir(siteFS, "site", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := siteFS.ReadFile(p)
		if err != nil {
			return err
		}
		for _, u := range abs.FindAll(b, -1) {
			if !allowed[string(u)] {
				t.Errorf("%s references %s", p, u)
			}
		}
		if m := protoRel.Find(b); m != nil {
			t.Errorf("%s has a protocol-relative or imported reference: %s", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestZeroAllocs(t *testing.T) {
	h := newHandler(t, conf.Defaults().Static)
	tests := []struct {
		name  string
		ctx   *fasthttp.RequestCtx
		serve func(*fasthttp.RequestCtx)
		want  int
	}{
		{"page gzip", request("GET", "/seckill/p1", "Accept-Encoding", "gzip, deflate, br"), h.ServePage, 200},
		{"page identity", request("GET", "/seckill/p1"), h.ServePage, 200},
		{"page 304", request("GET", "/seckill/p1", "If-None-Match", `W/"x", `+string(h.page.etagGz)), h.ServePage, 304},
		{"page HEAD", request("HEAD", "/seckill/p1", "Accept-Encoding", "gzip"), h.ServePage, 200},
		{"asset", request("GET", AssetPath+"app.js", "Accept-Encoding", "gzip"), func(c *fasthttp.RequestCtx) { h.ServeAsset(c, []byte("app.js")) }, 200},
		{"asset 404", request("GET", AssetPath+"nope"), func(c *fasthttp.RequestCtx) { h.ServeAsset(c, []byte("nope")) }, 404},
		{"405", request("POST", "/seckill/p1"), h.ServePage, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The server resets the response between requests and keeps its
			// buffers; the first call sizes them.
			run := func() { tt.ctx.Response.Reset(); tt.serve(tt.ctx) }
			run()
			if got := tt.ctx.Response.StatusCode(); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
			if n := testing.AllocsPerRun(200, run); n != 0 {
				t.Fatalf("%v allocations per request", n)
			}
		})
	}
}

func BenchmarkServePage(b *testing.B) {
	h := newHandler(b, conf.Defaults().Static)
	for _, bc := range []struct{ name, ae, inm string }{
		{"gzip", "gzip, deflate, br", ""},
		{"identity", "", ""},
		{"304", "gzip", string(h.page.etagGz)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := request("GET", "/seckill/p1", "Accept-Encoding", bc.ae)
			if bc.inm != "" {
				ctx.Request.Header.Set("If-None-Match", bc.inm)
			}
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Reset()
				h.ServePage(ctx)
			}
		})
	}
}

func BenchmarkServeAsset(b *testing.B) {
	h := newHandler(b, conf.Defaults().Static)
	ctx := request("GET", AssetPath+"app.js", "Accept-Encoding", "gzip")
	name := []byte("app.js")
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h.ServeAsset(ctx, name)
	}
}
