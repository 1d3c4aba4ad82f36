package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/await"
	"flashgate/internal/syncbuf"
	"flashgate/internal/tlstest"
)

// tlsEdgeConfig is an edge with listen.tls; %s: the certificates (YAML list
// items), hsts, the origin.
const tlsEdgeConfig = `
node_id: 1
listen:
  addr: "127.0.0.1:0"
  tls:
    certificates:
%s
    hsts: %s
admin:
  addr: "127.0.0.1:0"
log:
  access_sample: 0
auth:
  demo_login: true
filters:
  - type: access
    scope: all
    rules: ["allow all"]
upstreams:
  pools:
    - name: origin
      servers: ["%s"]
  routes:
    - prefix: /
      pool: origin
reload:
  watch: true
  debounce: 20ms
`

func certItem(certFile, keyFile string, names ...string) string {
	s := fmt.Sprintf("      - cert_file: %q\n        key_file: %q\n", certFile, keyFile)
	if len(names) > 0 {
		s += fmt.Sprintf("        names: [%s]\n", strings.Join(names, ", "))
	}
	return s
}

// tlsEdge is a Server with TLS on loopback; its log is kept.
type tlsEdge struct {
	srv     *Server
	addr    string // host:port of the shopper listener
	admin   string // http://host:port
	cfgPath string
	log     *syncbuf.Buffer
}

func startTLSEdge(t *testing.T, body string) *tlsEdge {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	writeConfig(t, path, body)
	doc, err := conf.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	srv, err := New(doc, Options{ConfigPath: path, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, aln := listen(t), listen(t)
	go srv.Serve(ln, aln)
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.WatchConfig(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		srv.Shutdown(sctx)
	})
	return &tlsEdge{srv: srv, addr: ln.Addr().String(), admin: "http://" + aln.Addr().String(), cfgPath: path, log: logs}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// httpsClient verifies the edge against ca under the server name sni.
func httpsClient(ca *tlstest.CA, sni string, keepAlive bool) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), ServerName: sni},
		DisableKeepAlives: !keepAlive,
	}}
}

// presented is the serial of the certificate a new handshake for sni gets.
func presented(t *testing.T, addr, sni string, ca *tlstest.CA) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: sni})
	if err != nil {
		t.Fatalf("handshake for %s: %v", sni, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// tlsOrigin echoes the scheme the edge says the client used, and sends its
// own HSTS on /own-hsts.
func tlsOrigin(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/own-hsts" {
			ctx.Response.Header.Set("Strict-Transport-Security", "max-age=5")
		}
		fmt.Fprintf(ctx, "proto=%s", ctx.Request.Header.Peek("X-Forwarded-Proto"))
	}}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String()
}

func TestTLSServesHTTPSWithHSTSAndSecureCookie(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key := ca.Issue(t, tlstest.Leaf{Name: "shop", DNSNames: []string{"shop.example.com"}})
	e := startTLSEdge(t, fmt.Sprintf(tlsEdgeConfig, certItem(cert, key), "600", tlsOrigin(t)))
	c := httpsClient(ca, "shop.example.com", true)
	base := "https://" + e.addr
	do := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, _ := do("GET", "/seckill/p1", "")
	if resp.StatusCode != 200 || resp.Proto != "HTTP/1.1" || resp.Header.Get("Strict-Transport-Security") != "max-age=600" {
		t.Fatalf("sale page: %d %s HSTS %q", resp.StatusCode, resp.Proto, resp.Header.Get("Strict-Transport-Security"))
	}
	resp, body := do("GET", "/items/1", "")
	if resp.StatusCode != 200 || body != "proto=https" || resp.Header.Get("Strict-Transport-Security") != "max-age=600" {
		t.Fatalf("proxied: %d %q HSTS %q (the origin must hear https)", resp.StatusCode, body, resp.Header.Get("Strict-Transport-Security"))
	}
	resp, _ = do("GET", "/own-hsts", "")
	if got := resp.Header.Values("Strict-Transport-Security"); len(got) != 1 || got[0] != "max-age=5" {
		t.Fatalf("the origin's own HSTS must win, alone: %q", got)
	}
	resp, _ = do("GET", "/api/seckill/status?productId=nosuch", "")
	if resp.StatusCode != 404 || resp.Header.Get("Strict-Transport-Security") == "" {
		t.Fatalf("an edge rejection: %d HSTS %q", resp.StatusCode, resp.Header.Get("Strict-Transport-Security"))
	}
	resp, _ = do("POST", "/api/login", `{"userId":"alice-in-wonderland"}`)
	if sc := resp.Header.Get("Set-Cookie"); resp.StatusCode != 200 || !strings.Contains(strings.ToLower(sc), "secure") {
		t.Fatalf("demo login over TLS: %d, cookie %q must be Secure", resp.StatusCode, sc)
	}

	// The listener speaks TLS only.
	if r, err := http.Get("http://" + e.addr + "/seckill/p1"); err == nil {
		r.Body.Close()
		t.Fatalf("plain HTTP answered %d on the TLS listener", r.StatusCode)
	}
	_, _, metrics := get(t, e.admin+"/metrics")
	for _, want := range []string{`flashgate_tls_handshakes_total{result="full"} 1`, `flashgate_tls_handshakes_total{result="failed"} 1`, "flashgate_tls_certificate_expiry_timestamp_seconds{cert_file="} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestTLSWithCurl: curl (OpenSSL) verifies each name's certificate against
// the CA, which only the right certificate passes, and gets HTTP/1.1 though
// it offers h2.
func TestTLSWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is not installed (Debian: apt-get install -y curl; scripts/test.sh installs it)")
	}
	ca := tlstest.NewCA(t)
	shop, shopKey := ca.Issue(t, tlstest.Leaf{Name: "shop", DNSNames: []string{"shop.example.com"}})
	api, apiKey := ca.Issue(t, tlstest.Leaf{Name: "api", DNSNames: []string{"api.example.com"}})
	e := startTLSEdge(t, fmt.Sprintf(tlsEdgeConfig, certItem(shop, shopKey)+certItem(api, apiKey), "31536000", tlsOrigin(t)))
	_, port, _ := net.SplitHostPort(e.addr)
	for _, name := range []string{"shop.example.com", "api.example.com"} {
		out, err := exec.Command(curl, "-sS", "--cacert", ca.File, "--resolve", name+":"+port+":127.0.0.1",
			"-D", "-", "-o", "/dev/null", "-w", "version=%{http_version} verify=%{ssl_verify_result}",
			"https://"+name+":"+port+"/seckill/p1").CombinedOutput()
		s := strings.ToLower(string(out))
		if err != nil || !strings.HasPrefix(s, "http/1.1 200") || !strings.Contains(s, "strict-transport-security: max-age=31536000") ||
			!strings.Contains(s, "version=1.1 verify=0") {
			t.Fatalf("curl %s: %v\n%s", name, err, out)
		}
	}
	// A name no certificate covers gets the default, which curl refuses.
	out, err := exec.Command(curl, "-sS", "--cacert", ca.File, "--resolve", "other.example.com:"+port+":127.0.0.1",
		"-o", "/dev/null", "https://other.example.com:"+port+"/").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "other.example.com") {
		t.Fatalf("curl for an uncovered name: %v %s", err, out)
	}
}

func TestTLSSessionResumptionOverHTTP(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key := ca.Issue(t, tlstest.Leaf{Name: "shop", DNSNames: []string{"shop.example.com"}})
	e := startTLSEdge(t, fmt.Sprintf(tlsEdgeConfig, certItem(cert, key), "0", tlsOrigin(t)))
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "shop.example.com", MaxVersion: v,
				ClientSessionCache: tls.NewLRUClientSessionCache(4)}}}
		var resumed []bool
		for range 3 {
			resp, err := c.Get("https://" + e.addr + "/seckill/p1")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.TLS.Version != v || resp.Header.Get("Strict-Transport-Security") != "" {
				t.Fatalf("version %x, HSTS %q with hsts 0", resp.TLS.Version, resp.Header.Get("Strict-Transport-Security"))
			}
			resumed = append(resumed, resp.TLS.DidResume)
		}
		if fmt.Sprint(resumed) != "[false true true]" {
			t.Errorf("%s: resumed %v, want a full handshake then resumptions", tls.VersionName(v), resumed)
		}
	}
	_, _, metrics := get(t, e.admin+"/metrics")
	if !strings.Contains(metrics, `flashgate_tls_handshakes_total{result="resumed"} 4`) {
		t.Errorf("resumptions not counted:\n%s", metrics)
	}
}

// swapDir replaces the certificate and key behind dir/cert.pem and
// dir/key.pem in one rename, as Kubernetes updates a mounted secret: the
// files are symlinks into ..data, a symlink to a versioned directory.
func swapDir(t *testing.T, dir, version, cert, key string) {
	t.Helper()
	vdir := filepath.Join(dir, version)
	if err := os.Mkdir(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{cert: "cert.pem", key: "key.pem"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vdir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, dst)); err != nil {
			if err := os.Symlink(filepath.Join("..data", dst), filepath.Join(dir, dst)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestTLSCertificateRotationUnderLoad replaces the certificate three
// times while clients keep requests going on kept-alive connections and on
// a new connection each: no request fails, each new handshake after a swap
// gets the new certificate, and the kept-alive connections are never
// re-established (they keep the certificate they shook hands with).
func TestTLSCertificateRotationUnderLoad(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	issue := func(version string) *big.Int {
		is, err := ca.Make(tlstest.Leaf{Name: "shop-" + version, DNSNames: []string{"shop.example.com"}})
		if err != nil {
			t.Fatal(err)
		}
		swapDir(t, dir, version, is.CertFile, is.KeyFile)
		return is.Serial
	}
	first := issue("v1")
	e := startTLSEdge(t, fmt.Sprintf(tlsEdgeConfig,
		certItem(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), "shop.example.com"), "0", tlsOrigin(t)))
	url := "https://" + e.addr + "/seckill/p1"

	type stats struct {
		ok, failed atomic.Int64
		dials      atomic.Int64
		mu         sync.Mutex
		serials    map[string]bool
		errs       []string
	}
	var keep, fresh stats
	keep.serials, fresh.serials = map[string]bool{}, map[string]bool{}
	var lastFresh atomic.Pointer[big.Int]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	worker := func(s *stats, keepAlive bool) {
		defer wg.Done()
		tr := &http.Transport{DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 1,
			DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				s.dials.Add(1)
				d := &tls.Dialer{Config: &tls.Config{RootCAs: ca.Pool(), ServerName: "shop.example.com"}}
				return d.DialContext(ctx, network, addr)
			}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Timeout: 5 * time.Second, Transport: tr}
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := c.Get(url)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				s.failed.Add(1)
				s.mu.Lock()
				s.errs = append(s.errs, err.Error())
				s.mu.Unlock()
				continue
			}
			s.ok.Add(1)
			sn := resp.TLS.PeerCertificates[0].SerialNumber
			s.mu.Lock()
			s.serials[sn.String()] = true
			s.mu.Unlock()
			if !keepAlive {
				lastFresh.Store(sn)
			}
		}
	}
	for range 2 {
		wg.Add(2)
		go worker(&keep, true)
		go worker(&fresh, false)
	}
	await.Until(t, 5*time.Second, "load on both kinds of connection", func() bool { return keep.ok.Load() > 20 && fresh.ok.Load() > 20 })

	for _, v := range []string{"v2", "v3", "v4"} {
		want := issue(v)
		await.Until(t, 5*time.Second, "new handshakes to present the "+v+" certificate", func() bool {
			return presented(t, e.addr, "shop.example.com", ca).Cmp(want) == 0
		})
		await.Until(t, 5*time.Second, "the load's new connections to get the "+v+" certificate", func() bool {
			s := lastFresh.Load()
			return s != nil && s.Cmp(want) == 0
		})
	}
	before := keep.ok.Load()
	await.Until(t, 5*time.Second, "kept-alive connections to go on after the swaps", func() bool { return keep.ok.Load() > before+20 })
	close(stop)
	wg.Wait()

	if n := keep.failed.Load() + fresh.failed.Load(); n != 0 {
		t.Fatalf("%d requests failed during the rotations: %q %q", n, keep.errs, fresh.errs)
	}
	if d := keep.dials.Load(); d != 2 {
		t.Errorf("kept-alive clients dialled %d times, want 2 (one connection each, never dropped)", d)
	}
	if len(keep.serials) != 1 || !keep.serials[first.String()] {
		t.Errorf("kept-alive connections saw certificates %v, want only the first (%s)", keep.serials, first)
	}
	if len(fresh.serials) != 4 {
		t.Errorf("new connections saw %d certificates, want 4", len(fresh.serials))
	}
	t.Logf("requests: %d kept-alive, %d on new connections", keep.ok.Load(), fresh.ok.Load())
}

// TestTLSBadReloadKeepsCertificates breaks the files and the config in
// turn: each failure names the field, the file and why, and the
// certificates in force stay until a good set replaces them.
func TestTLSBadReloadKeepsCertificates(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	put := func(src, dst string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dst+".tmp", dst); err != nil {
			t.Fatal(err)
		}
	}
	v1, err := ca.Make(tlstest.Leaf{Name: "v1", DNSNames: []string{"shop.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	put(v1.CertFile, certPath)
	put(v1.KeyFile, keyPath)
	origin := tlsOrigin(t)
	good := fmt.Sprintf(tlsEdgeConfig, certItem(certPath, keyPath), "0", origin)
	e := startTLSEdge(t, good)
	serving := func(want *big.Int) {
		t.Helper()
		if got := presented(t, e.addr, "shop.example.com", ca); got.Cmp(want) != 0 {
			t.Fatalf("serving certificate %s, want %s", got, want)
		}
	}
	serving(v1.Serial)

	// A key that is not the certificate's: the watcher's reload fails.
	other, err := ca.Make(tlstest.Leaf{Name: "other", DNSNames: []string{"shop.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	put(other.KeyFile, keyPath)
	await.Until(t, 5*time.Second, "the failed certificate reload to be counted", func() bool {
		_, _, m := get(t, e.admin+"/metrics")
		return strings.Contains(m, `flashgate_tls_certificate_reloads_total{result="failed"} 1`)
	})
	if l := e.log.String(); !strings.Contains(l, "listen.tls.certificates[0].key_file: "+keyPath+" does not match the certificate in "+certPath) ||
		!strings.Contains(l, "keeping the certificates in force") {
		t.Fatalf("the log does not say which file and why:\n%s", l)
	}
	serving(v1.Serial)

	// A config naming a file that does not exist: the config reload fails
	// and says where.
	missing := filepath.Join(dir, "renewed.pem")
	writeConfig(t, e.cfgPath, fmt.Sprintf(tlsEdgeConfig, certItem(missing, keyPath), "0", origin))
	await.Until(t, 5*time.Second, "the config reload to fail", func() bool { return e.srv.LastReload().Error != "" })
	if msg := e.srv.LastReload().Error; !strings.Contains(msg, "listen.tls.certificates[0].cert_file (line 7): cannot read "+missing+": no such file or directory") {
		t.Fatalf("config reload error: %s", msg)
	}
	serving(v1.Serial)

	// A good pair on disk and a good config: both reloads put it in force,
	// and a second certificate in the config serves its own name.
	v2, err := ca.Make(tlstest.Leaf{Name: "v2", DNSNames: []string{"shop.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	put(v2.CertFile, certPath)
	put(v2.KeyFile, keyPath)
	await.Until(t, 5*time.Second, "the renewed certificate to be served", func() bool {
		return presented(t, e.addr, "shop.example.com", ca).Cmp(v2.Serial) == 0
	})
	api, err := ca.Make(tlstest.Leaf{Name: "api", DNSNames: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	version := e.srv.Snapshot().Version
	writeConfig(t, e.cfgPath, fmt.Sprintf(tlsEdgeConfig, certItem(certPath, keyPath)+certItem(api.CertFile, api.KeyFile), "0", origin))
	await.Until(t, 5*time.Second, "the config reload", func() bool { return e.srv.Snapshot().Version != version })
	if got := presented(t, e.addr, "api.example.com", ca); got.Cmp(api.Serial) != 0 {
		t.Fatalf("api.example.com got %s after the reload, want %s", got, api.Serial)
	}
	serving(v2.Serial)
}

// TestWriteHSTSAllocs: the header is written on every HTTPS
// answer, purchases included.
func TestWriteHSTSAllocs(t *testing.T) {
	var h fasthttp.ResponseHeader
	v := []byte("max-age=600")
	writeHSTS(&h, v)
	if n := testing.AllocsPerRun(100, func() {
		h.Reset()
		writeHSTS(&h, v)
		writeHSTS(&h, v) // present: left alone
	}); n != 0 {
		t.Fatalf("%v allocations per response", n)
	}
	if got := h.Peek("Strict-Transport-Security"); string(got) != "max-age=600" {
		t.Fatalf("header %q", got)
	}
}
