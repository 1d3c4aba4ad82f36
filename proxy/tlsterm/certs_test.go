package tlsterm

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/internal/tlstest"
)

func TestLoadRefusesBadInputNamingFieldFileAndWhy(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	good, _ := issue(t, ca, "shop", "shop.example.com")
	other, _ := issue(t, ca, "other", "other.example.com")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(l tlstest.Leaf) conf.TLSCertificate {
		is, err := ca.Make(l)
		if err != nil {
			t.Fatal(err)
		}
		return conf.TLSCertificate{CertFile: is.CertFile, KeyFile: is.KeyFile}
	}
	now := time.Now()
	expired := leaf(tlstest.Leaf{Name: "expired", DNSNames: []string{"shop.example.com"}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})
	early := leaf(tlstest.Leaf{Name: "early", DNSNames: []string{"shop.example.com"}, NotBefore: now.Add(time.Hour), NotAfter: now.Add(48 * time.Hour)})
	client := leaf(tlstest.Leaf{Name: "clientcert", DNSNames: []string{"shop.example.com"}, Usage: x509.ExtKeyUsageClientAuth})
	big := write("big.pem", strings.Repeat("A", maxFileSize+1))
	junk := write("junk.pem", "not a certificate\n")
	encrypted := write("enc-key.pem", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")
	missing := filepath.Join(dir, "nope.pem")

	with := func(c conf.TLSCertificate, edit func(*conf.TLSCertificate)) conf.TLSCertificate {
		edit(&c)
		return c
	}
	const c0 = "certificates[0]"
	cases := []struct {
		name  string
		certs []conf.TLSCertificate
		path  string
		parts []string
	}{
		{"missing certificate file", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.CertFile = missing })}, c0 + ".cert_file", []string{missing, "no such file"}},
		{"missing key file", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.KeyFile = missing })}, c0 + ".key_file", []string{missing, "no such file"}},
		{"a directory, not a file", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.CertFile = dir })}, c0 + ".cert_file", []string{dir, "is a directory"}},
		{"not PEM", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.CertFile = junk })}, c0 + ".cert_file", []string{junk, "no PEM certificate"}},
		{"huge file", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.KeyFile = big })}, c0 + ".key_file", []string{big, "larger than"}},
		{"files swapped", []conf.TLSCertificate{{CertFile: good.KeyFile, KeyFile: good.CertFile}}, c0 + ".cert_file", []string{good.KeyFile, "swapped"}},
		{"key of another certificate", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.KeyFile = other.KeyFile })}, c0 + ".key_file", []string{other.KeyFile, "does not match the certificate in " + good.CertFile}},
		{"encrypted key", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.KeyFile = encrypted })}, c0 + ".key_file", []string{encrypted, "encrypted"}},
		{"key file without a key", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.KeyFile = junk })}, c0 + ".key_file", []string{junk, "no PEM private key"}},
		{"name not covered", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.Names = []string{"shop.example.com", "www.example.com"} })}, c0 + ".names[1]", []string{`"www.example.com" is not covered`, good.CertFile, "shop.example.com"}},
		{"wildcard name needs the wildcard", []conf.TLSCertificate{with(good, func(c *conf.TLSCertificate) { c.Names = []string{"*.example.com"} })}, c0 + ".names[0]", []string{"*.example.com", "not covered"}},
		{"expired", []conf.TLSCertificate{expired}, c0 + ".cert_file", []string{expired.CertFile, "expired at", "keeps the certificates in force"}},
		{"not valid yet", []conf.TLSCertificate{early}, c0 + ".cert_file", []string{early.CertFile, "not valid before"}},
		{"a client certificate", []conf.TLSCertificate{client}, c0 + ".cert_file", []string{client.CertFile, "not a server certificate"}},
		{"the second one bad", []conf.TLSCertificate{good, with(other, func(c *conf.TLSCertificate) { c.KeyFile = good.KeyFile })}, "certificates[1].key_file", []string{good.KeyFile, "does not match"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := spec(tc.certs...)
			cs, errs := Load(&s, now)
			if cs != nil {
				t.Fatal("a bad set loaded")
			}
			if !hasError(errs, tc.path, tc.parts...) {
				t.Fatalf("no error at %s with %q in: %v", tc.path, tc.parts, errs)
			}
		})
	}
}

func TestLoadNamesAndExpiry(t *testing.T) {
	ca := tlstest.NewCA(t)
	w30, err := ca.Make(tlstest.Leaf{Name: "wild", DNSNames: []string{"*.Example.com", "example.com"}, NotAfter: time.Now().Add(30 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	wild := conf.TLSCertificate{CertFile: w30.CertFile, KeyFile: w30.KeyFile}
	wild.Names = []string{"a.example.com", "*.example.com"}
	soon, err := ca.Make(tlstest.Leaf{Name: "soon", DNSNames: []string{"Soon.example.org"}, NotAfter: time.Now().Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cs := mustLoad(t, spec(wild, conf.TLSCertificate{CertFile: soon.CertFile, KeyFile: soon.KeyFile}))
	list := cs.List()
	if got := strings.Join(list[0].Names, ","); got != "a.example.com,*.example.com" {
		t.Errorf("configured names: %s", got)
	}
	if got := strings.Join(list[1].Names, ","); got != "soon.example.org" {
		t.Errorf("names from the certificate (lower case): %s", got)
	}
	w := cs.Expiring(time.Now(), ExpiryWarning)
	if len(w) != 1 || !strings.Contains(w[0], soon.CertFile) || !strings.Contains(w[0], "renew") {
		t.Errorf("expiry warnings: %q", w)
	}
	if !strings.Contains(cs.String(), "2 certificates") {
		t.Errorf("describe: %s", cs)
	}
}

// TestSNIChoosesTheCertificate shakes hands with a real TLS client for
// each server name a client may send.
func TestSNIChoosesTheCertificate(t *testing.T) {
	ca := tlstest.NewCA(t)
	shop, shopSerial := issue(t, ca, "shop", "shop.example.com")
	cdn, cdnSerial := issue(t, ca, "cdn", "*.cdn.example.com")
	api, apiSerial := issue(t, ca, "api", "api.example.com")
	term := New(spec(shop, cdn, api), mustLoad(t, spec(shop, cdn, api)), Options{Log: quiet})
	addr := serve(t, term)
	for _, tc := range []struct {
		sni    string
		verify bool
		want   string
	}{
		{"shop.example.com", true, "shop"},
		{"img.cdn.example.com", true, "cdn"},
		{"API.Example.com", true, "api"},
		{"api.example.com.", false, "api"},
		{"a.b.cdn.example.com", false, "shop"}, // a wildcard covers one label
		{"cdn.example.com", false, "shop"},
		{"unknown.example.org", false, "shop"},
		{"", false, "shop"}, // no SNI (dialled by address): the default
	} {
		t.Run(tc.sni, func(t *testing.T) {
			cfg := &tls.Config{ServerName: tc.sni, RootCAs: ca.Pool(), InsecureSkipVerify: !tc.verify}
			st, err := dial(t, addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{shopSerial.String(): "shop", cdnSerial.String(): "cdn", apiSerial.String(): "api"}[serial(st).String()]
			if got != tc.want {
				t.Fatalf("SNI %q got the %q certificate, want %q", tc.sni, got, tc.want)
			}
		})
	}
}

func TestVersionsAndALPN(t *testing.T) {
	ca := tlstest.NewCA(t)
	shop, _ := issue(t, ca, "shop", "shop.example.com")
	term := New(spec(shop), mustLoad(t, spec(shop)), Options{Log: quiet})
	addr := serve(t, term)
	base := func() *tls.Config { return &tls.Config{ServerName: "shop.example.com", RootCAs: ca.Pool()} }

	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		cfg := base()
		cfg.MinVersion, cfg.MaxVersion = v, v
		_, err := dial(t, addr, cfg)
		if err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("%s: %v, want the server's protocol version alert", tls.VersionName(v), err)
		}
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cfg := base()
		cfg.MinVersion, cfg.MaxVersion = v, v
		if st, err := dial(t, addr, cfg); err != nil || st.Version != v {
			t.Errorf("%s: %v", tls.VersionName(v), err)
		}
	}

	cfg := base()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	if st, err := dial(t, addr, cfg); err != nil || st.NegotiatedProtocol != "http/1.1" {
		t.Errorf("h2 and http/1.1 offered: %q, %v; want http/1.1", st.NegotiatedProtocol, err)
	}
	cfg.NextProtos = []string{"h2"}
	if _, err := dial(t, addr, cfg); err == nil || !strings.Contains(err.Error(), "no application protocol") {
		t.Errorf("only h2 offered: %v, want no_application_protocol", err)
	}
	cfg.NextProtos = nil
	if st, err := dial(t, addr, cfg); err != nil || st.NegotiatedProtocol != "" {
		t.Errorf("no ALPN: %q, %v", st.NegotiatedProtocol, err)
	}
	if f := term.failed.Value(); f != 3 {
		t.Errorf("failed handshakes counted %d, want 3", f)
	}
}
