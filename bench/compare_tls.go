package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"flashgate/internal/tlstest"
	"flashgate/internal/yamlmerge"
)

// nginxTLSPeerConf is the nginx peer of the HTTPS targets.
var nginxTLSPeerConf = filepath.Join("bench", "peers", "nginx-tls.conf")

// startTLS gives flashgate and nginx one throwaway certificate (ECDSA
// P-256 for 127.0.0.1 and localhost, made for the run): a second edge, the
// main edge's config plus listen.tls, on the same Redis and Kafka (its
// listener is the only thing measured; it consumes no orders), and nginx
// with peers/nginx-tls.conf serving the page nginx serves. Neither resumes
// sessions (session_tickets: false, ssl_session_tickets off): wrk offers
// the session of a connection it reconnects, and the handshake target
// counts full handshakes. Both are checked to send the same page over TLS
// 1.3 with ALPN http/1.1 before anything is measured.
func (c *comparer) startTLS(ctx context.Context, root string, spec EdgeSpec) error {
	env := c.env
	dir := filepath.Join(c.dir, "tls")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca, err := tlstest.MakeCA(dir)
	if err != nil {
		return err
	}
	leaf, err := ca.Make(tlstest.Leaf{Name: "edge", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return err
	}
	c.tlsCA = ca.Pool()
	extra := map[string]any{}
	if spec.Extra != nil {
		yamlmerge.Into(extra, spec.Extra)
	}
	yamlmerge.Into(extra, map[string]any{"listen": map[string]any{"tls": map[string]any{
		"certificates":    []any{map[string]any{"cert_file": leaf.CertFile, "key_file": leaf.KeyFile}},
		"session_tickets": false,
	}}})
	spec.Extra = extra
	path, addr, admin, err := env.writeConfig(spec, "edge-tls", 3, false)
	if err != nil {
		return err
	}
	var penv []string
	if env.opt.GoMaxProcs > 0 {
		penv = append(penv, "GOMAXPROCS="+strconv.Itoa(env.opt.GoMaxProcs))
	}
	if c.tlsEdge, err = env.procs.Start("edge-tls", env.cpu(env.opt.ServerCPU), penv, env.bins["proxy"], "-c", path); err != nil {
		return err
	}
	if err := env.waitEdge(ctx, c.tlsEdge, admin, "", ""); err != nil {
		return err
	}
	c.tlsAddr, c.tlsAdmin = addr, admin

	if c.tlsNgAddr, err = freeAddr(); err != nil {
		return err
	}
	for _, d := range []string{"tmp-tls", "www"} {
		os.MkdirAll(filepath.Join(c.dir, d), 0o755)
	}
	tmpl, err := os.ReadFile(filepath.Join(root, nginxTLSPeerConf))
	if err != nil {
		return err
	}
	conf := strings.NewReplacer("__DIR__", c.dir, "__ROOT__", filepath.Join(c.dir, "www"), "__LISTEN__", c.tlsNgAddr,
		"__CERT__", leaf.CertFile, "__KEY__", leaf.KeyFile, "__CSP__", c.pageCSP, "__PAGE_CACHE_CONTROL__", c.pageCC).Replace(string(tmpl))
	ngPath := filepath.Join(c.dir, "nginx-tls.conf")
	if err := os.WriteFile(ngPath, []byte(conf), 0o644); err != nil {
		return err
	}
	if c.tlsNginx, err = c.startNginxConf(ctx, "nginx-tls", ngPath, c.tlsNgAddr); err != nil {
		return err
	}

	var seen []string
	for _, chk := range []struct{ name, addr string }{{"flashgate", c.tlsAddr}, {"nginx", c.tlsNgAddr}} {
		// Offering h2 too: both must choose http/1.1.
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.tlsCA, NextProtos: []string{"h2", "http/1.1"}}}}
		r, err := cl.Get("https://" + chk.addr + "/seckill/p1")
		if err != nil {
			return fmt.Errorf("%s over HTTPS: %v", chk.name, err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		cl.CloseIdleConnections()
		if r.StatusCode != 200 || string(b) != string(c.page) {
			return fmt.Errorf("%s: /seckill/p1 over HTTPS answered %d with a different body", chk.name, r.StatusCode)
		}
		if r.TLS.Version != tls.VersionTLS13 || r.TLS.NegotiatedProtocol != "http/1.1" {
			return fmt.Errorf("%s: %s, ALPN %q; want TLS 1.3 and http/1.1 on both", chk.name, tls.VersionName(r.TLS.Version), r.TLS.NegotiatedProtocol)
		}
		seen = append(seen, chk.name+" "+tls.CipherSuiteName(r.TLS.CipherSuite))
	}
	c.setup = append(c.setup, "tls: flashgate (a second cmd/proxy, GOMAXPROCS=1, the main edge's config plus listen.tls) and nginx (bench/peers/nginx-tls.conf, 1 worker) with the same ECDSA P-256 certificate made for the run, TLS 1.3, ALPN http/1.1, no session resumption on either (session_tickets: false, ssl_session_tickets off); a Go client negotiated "+strings.Join(seen, ", "))
	return nil
}

func (c *comparer) tlsEdgePids() []int { return []int{c.tlsEdge.Pid()} }
func (c *comparer) tlsNgPids() []int   { return procTree(c.tlsNginx) }

// tlsHandshakes measures full handshakes: wrk sends Connection: close, so
// each request is a new connection, and neither server resumes the session
// wrk offers again, so each is a full handshake; the edge's own counters
// say whether that held.
func (c *comparer) tlsHandshakes(cmp *Comparison) error {
	script := filepath.Join(c.dir, "close.lua")
	if err := os.WriteFile(script, []byte("wrk.headers[\"Connection\"] = \"close\"\n"), 0o644); err != nil {
		return err
	}
	full0, resumed0 := tlsHandshakeCounts(c.tlsAdmin)
	err := c.wrkPairURLs(cmp, "https://"+c.tlsAddr+"/seckill/p1", "https://"+c.tlsNgAddr+"/seckill/p1", script, 200, c.tlsEdgePids, c.tlsNgPids, false)
	full1, resumed1 := tlsHandshakeCounts(c.tlsAdmin)
	line := fmt.Sprintf("tls-handshake: the edge counted %.0f full handshakes and %.0f resumed ones over its rounds", full1-full0, resumed1-resumed0)
	// On two cores one wrk thread cannot keep a server busy with full
	// handshakes (its half of each costs about as much as the server's):
	// what a server could do with a whole CPU is the figure to compare.
	var a, b []float64
	for _, r := range cmp.Rounds {
		if r[0].CPUPerReq > 0 && r[1].CPUPerReq > 0 {
			a, b = append(a, 1e6/r[0].CPUPerReq), append(b, 1e6/r[1].CPUPerReq)
		}
	}
	if len(a) > 0 {
		line += fmt.Sprintf("; full handshakes per server CPU-second (median): flashgate %.0f, nginx %.0f, ratio %.2f", median(a), median(b), median(a)/median(b))
	}
	c.logf("   (%s)", line)
	c.setup = append(c.setup, line)
	return err
}

// tlsHandshakeCounts reads flashgate_tls_handshakes_total from an edge.
func tlsHandshakeCounts(admin string) (full, resumed float64) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		switch k {
		case `flashgate_tls_handshakes_total{result="full"}`:
			full = n
		case `flashgate_tls_handshakes_total{result="resumed"}`:
			resumed = n
		}
	}
	return full, resumed
}
