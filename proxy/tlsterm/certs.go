package tlsterm

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
)

// Cert is one loaded certificate of the set.
type Cert struct {
	CertFile, KeyFile string
	// Names are the server names it is served for (the configured names,
	// or the certificate's DNS names), lower case.
	Names    []string
	NotAfter time.Time
	tls      *tls.Certificate
}

// Certs is a loaded set of certificates; nothing in it changes once Load
// returned it.
type Certs struct {
	list []*Cert // in config order; list[0] is the default
	// exact maps a server name to its certificates, wild the parent of a
	// "*.parent" wildcard to its. Several per name (an RSA and an ECDSA
	// one) are offered in config order to what the client supports.
	exact, wild map[string][]*tls.Certificate
	digest      [sha256.Size]byte
}

// maxFileSize bounds what is read from a certificate or key file: a path
// that points at a log or a disk image by mistake must not be read whole.
const maxFileSize = 1 << 20

// Load reads and checks every certificate of the section. Errors name the
// field (relative to `listen.tls`), the file and what is wrong with it: a
// file that is missing or unreadable, holds no certificate or key, a key
// that is not the certificate's, a certificate that has expired or is not
// valid yet, that is not for servers, or that does not cover a configured
// name.
//
// An expired certificate is refused, not just warned about: every browser
// rejects it, so an edge serving it is down for shoppers while looking up
// to its operators; refused, a reload keeps the certificate in force and a
// start fails with the file named, where it is seen at once.
func Load(spec *conf.ListenTLSConfig, now time.Time) (*Certs, field.Errors) {
	files, errs := readFiles(spec)
	if len(errs) > 0 {
		return nil, errs
	}
	return parse(spec, files, now)
}

// pemFiles are the bytes of a section's files, in certificate order.
type pemFiles struct {
	cert, key [][]byte
	digest    [sha256.Size]byte
}

func readFiles(spec *conf.ListenTLSConfig) (*pemFiles, field.Errors) {
	var errs field.Errors
	f := &pemFiles{}
	h := sha256.New()
	for i, c := range spec.Certificates {
		p := field.Index("certificates", i)
		cb, err := readPEMFile(c.CertFile)
		if err != nil {
			errs.Add(p+".cert_file", "%v", err)
		}
		kb, err := readPEMFile(c.KeyFile)
		if err != nil {
			errs.Add(p+".key_file", "%v", err)
		}
		f.cert, f.key = append(f.cert, cb), append(f.key, kb)
		// Names are part of what the digest covers: the same files under
		// other names are another set.
		fmt.Fprintf(h, "%d:%d:%q\n", len(cb), len(kb), c.Names)
		h.Write(cb)
		h.Write(kb)
	}
	h.Sum(f.digest[:0])
	return f, errs
}

func readPEMFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", path, pathErr(err))
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", path, pathErr(err))
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a PEM certificate or key", path, maxFileSize)
	}
	return b, nil
}

// pathErr drops the path an *fs.PathError repeats.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func parse(spec *conf.ListenTLSConfig, files *pemFiles, now time.Time) (*Certs, field.Errors) {
	var errs field.Errors
	cs := &Certs{exact: map[string][]*tls.Certificate{}, wild: map[string][]*tls.Certificate{}, digest: files.digest}
	for i, c := range spec.Certificates {
		p := field.Index("certificates", i)
		cert := parseOne(c, p, files.cert[i], files.key[i], now, &errs)
		if cert == nil {
			continue
		}
		cs.list = append(cs.list, cert)
		for _, n := range cert.Names {
			if parent, ok := strings.CutPrefix(n, "*."); ok {
				cs.wild[parent] = append(cs.wild[parent], cert.tls)
			} else {
				cs.exact[n] = append(cs.exact[n], cert.tls)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if len(cs.list) == 0 {
		errs.Add("certificates", "none given")
		return nil, errs
	}
	return cs, nil
}

func parseOne(c conf.TLSCertificate, p string, certPEM, keyPEM []byte, now time.Time, errs *field.Errors) *Cert {
	var chain [][]byte
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			chain = append(chain, b.Bytes)
		}
	}
	if len(chain) == 0 {
		what := "holds no PEM certificate"
		if findKey(certPEM) != nil {
			what = "holds a private key, not a certificate (cert_file and key_file swapped?)"
		}
		errs.Add(p+".cert_file", "%s %s", c.CertFile, what)
		return nil
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		errs.Add(p+".cert_file", "%s: the first certificate does not parse: %v", c.CertFile, err)
		return nil
	}
	ok := true
	switch {
	case now.After(leaf.NotAfter):
		errs.Add(p+".cert_file", "%s expired at %s (%s ago); a reload keeps the certificates in force until a valid one replaces it",
			c.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339), now.Sub(leaf.NotAfter).Round(time.Second))
		ok = false
	case now.Before(leaf.NotBefore):
		errs.Add(p+".cert_file", "%s is not valid before %s (in %s): is the clock right?",
			c.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotBefore.Sub(now).Round(time.Second))
		ok = false
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		errs.Add(p+".cert_file", "%s is not a server certificate (its extended key usage leaves out server authentication)", c.CertFile)
		ok = false
	}

	key, kerr := parseKey(keyPEM)
	switch {
	case kerr != nil:
		errs.Add(p+".key_file", "%s %v", c.KeyFile, kerr)
		ok = false
	case !samePublicKey(leaf.PublicKey, key.Public()):
		errs.Add(p+".key_file", "%s does not match the certificate in %s", c.KeyFile, c.CertFile)
		ok = false
	}

	names := c.Names
	if len(names) == 0 {
		for _, n := range leaf.DNSNames {
			names = append(names, strings.ToLower(n))
		}
	}
	for j, n := range c.Names {
		if !covers(leaf, n) {
			errs.Add(field.Index(p+".names", j), "%q is not covered by the certificate in %s, which is for %s", n, c.CertFile, certNames(leaf))
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return &Cert{CertFile: c.CertFile, KeyFile: c.KeyFile, Names: names, NotAfter: leaf.NotAfter,
		tls: &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}}
}

// findKey returns the first private key block of a PEM file.
func findKey(b []byte) *pem.Block {
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil
		}
		if strings.HasSuffix(blk.Type, "PRIVATE KEY") {
			return blk
		}
	}
}

// parseKey reads the key of a PEM file: PKCS #8, PKCS #1 (RSA) or SEC 1
// (EC), unencrypted. The error reads after the file's name.
func parseKey(b []byte) (crypto.Signer, error) {
	blk := findKey(b)
	switch {
	case blk == nil:
		var c *pem.Block
		if c, _ = pem.Decode(b); c != nil && c.Type == "CERTIFICATE" {
			return nil, errors.New("holds a certificate, not a private key (cert_file and key_file swapped?)")
		}
		return nil, errors.New("holds no PEM private key")
	case blk.Type == "ENCRYPTED PRIVATE KEY" || blk.Headers["Proc-Type"] != "":
		return nil, errors.New("holds an encrypted private key: the edge reads keys unencrypted (protect the file's permissions instead)")
	}
	var k any
	var err error
	switch blk.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("holds a private key that does not parse: %v", err)
	}
	switch k := k.(type) {
	case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
		return k.(crypto.Signer), nil
	}
	return nil, fmt.Errorf("holds a %T key, which TLS cannot sign with", k)
}

func samePublicKey(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// covers reports whether the certificate is valid for a configured name:
// a DNS name by the usual matching (wildcards included), a wildcard name
// only by the same wildcard among its names.
func covers(leaf *x509.Certificate, name string) bool {
	if strings.HasPrefix(name, "*.") {
		for _, n := range leaf.DNSNames {
			if strings.EqualFold(n, name) {
				return true
			}
		}
		return false
	}
	return leaf.VerifyHostname(name) == nil
}

func certNames(leaf *x509.Certificate) string {
	var names []string
	names = append(names, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no name (its subject is " + leaf.Subject.String() + ")"
	}
	return strings.Join(names, ", ")
}

// certificate chooses what to present: a certificate for the exact name
// the client asked for, else one whose wildcard covers it, else the
// default. Among several for a name, the first the client can verify (an
// RSA one for a client without ECDSA).
func (cs *Certs) certificate(hello *tls.ClientHelloInfo) *tls.Certificate {
	if name := hello.ServerName; name != "" {
		name = strings.ToLower(strings.TrimSuffix(name, "."))
		if c := pick(cs.exact[name], hello); c != nil {
			return c
		}
		if i := strings.IndexByte(name, '.'); i > 0 {
			if c := pick(cs.wild[name[i+1:]], hello); c != nil {
				return c
			}
		}
	}
	return cs.list[0].tls
}

func pick(cands []*tls.Certificate, hello *tls.ClientHelloInfo) *tls.Certificate {
	if len(cands) > 1 {
		for _, c := range cands {
			if hello.SupportsCertificate(c) == nil {
				return c
			}
		}
	}
	if len(cands) > 0 {
		return cands[0]
	}
	return nil
}

// List is the set's certificates, the default first.
func (cs *Certs) List() []Cert {
	out := make([]Cert, len(cs.list))
	for i, c := range cs.list {
		out[i] = *c
		out[i].Names = slices.Clone(c.Names)
	}
	return out
}

// Expiring names the certificates that expire within d of now, soonest
// first: a warning for logs and `proxy -t`.
func (cs *Certs) Expiring(now time.Time, d time.Duration) []string {
	list := slices.Clone(cs.list)
	slices.SortStableFunc(list, func(a, b *Cert) int { return a.NotAfter.Compare(b.NotAfter) })
	var out []string
	for _, c := range list {
		if left := c.NotAfter.Sub(now); left < d {
			out = append(out, fmt.Sprintf("the certificate in %s expires at %s (in %s): renew it", c.CertFile,
				c.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Minute)))
		}
	}
	return out
}

// String describes the set in one line (`proxy -t`, logs).
func (cs *Certs) String() string {
	var parts []string
	for _, c := range cs.list {
		names := strings.Join(c.Names, " ")
		if names == "" {
			names = "(no name)"
		}
		parts = append(parts, fmt.Sprintf("%s until %s", names, c.NotAfter.UTC().Format("2006-01-02")))
	}
	n := "certificate"
	if len(cs.list) > 1 {
		n += "s"
	}
	return fmt.Sprintf("%d %s: %s", len(cs.list), n, strings.Join(parts, "; "))
}
