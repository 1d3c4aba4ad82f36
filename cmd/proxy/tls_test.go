package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flashgate/internal/tlstest"
)

// TestConfigTestFlagTLS: `proxy -t` reads the certificate files and names
// the field, its line, the file and why for each bad one; a good set is
// described, with a warning when it is due for renewal.
func TestConfigTestFlagTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	shop, shopKey := ca.Issue(t, tlstest.Leaf{Name: "shop", DNSNames: []string{"shop.example.com"}, NotAfter: time.Now().Add(90 * 24 * time.Hour)})
	soon, soonKey := ca.Issue(t, tlstest.Leaf{Name: "soon", DNSNames: []string{"soon.example.com"}, NotAfter: time.Now().Add(3 * 24 * time.Hour)})
	_, otherKey := ca.Issue(t, tlstest.Leaf{Name: "other", DNSNames: []string{"shop.example.com"}})
	old, oldKey := ca.Issue(t, tlstest.Leaf{Name: "old", DNSNames: []string{"shop.example.com"},
		NotBefore: time.Now().Add(-100 * 24 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	config := func(cert, key, names string) string {
		p := filepath.Join(dir, fmt.Sprintf("edge-%d.yaml", time.Now().UnixNano()))
		body := fmt.Sprintf("listen:\n  addr: \"127.0.0.1:0\"\n  tls:\n    certificates:\n      - cert_file: %q\n        key_file: %q\n        names: [%s]\n", cert, key, names)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name           string
		cert, key      string
		names          string
		wantCode       int
		stdout, stderr []string
	}{
		{"good", shop, shopKey, "shop.example.com", 0, []string{"is ok", "tls, 1 certificate: shop.example.com until"}, nil},
		{"due for renewal", soon, soonKey, "", 0, []string{"is ok"}, []string{"warning: the certificate in " + soon + " expires at", "renew"}},
		{"missing file", missing, shopKey, "", 1, nil, []string{"listen.tls.certificates[0].cert_file (line 5): cannot read " + missing + ": no such file or directory"}},
		{"unreadable (a directory)", shop, dir, "", 1, nil, []string{"listen.tls.certificates[0].key_file (line 6): cannot read " + dir + ": is a directory"}},
		{"key that does not match", shop, otherKey, "", 1, nil, []string{"listen.tls.certificates[0].key_file (line 6): " + otherKey + " does not match the certificate in " + shop}},
		{"wrong name", shop, shopKey, "shop.example.com, www.example.com", 1, nil, []string{`listen.tls.certificates[0].names[1] (line 7): "www.example.com" is not covered by the certificate in ` + shop + ", which is for shop.example.com"}},
		{"expired", old, oldKey, "", 1, nil, []string{"listen.tls.certificates[0].cert_file (line 5): " + old + " expired at"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run([]string{"-t", "-c", config(tc.cert, tc.key, tc.names)}, &out, &errb)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out.String(), errb.String())
			}
			for _, w := range tc.stdout {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q: %s", w, out.String())
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q: %s", w, errb.String())
				}
			}
			if tc.name == "good" && errb.Len() > 0 {
				t.Errorf("warnings for a certificate 90 days from expiry: %s", errb.String())
			}
		})
	}
}
