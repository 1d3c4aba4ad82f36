package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Files are the PEM files of one CA and two certificates it signed: one
// for a server on 127.0.0.1 / localhost, one for a client.
type Files struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// New makes a fresh CA and its certificates in a directory of the test's.
// Two calls make two CAs that do not trust each other's certificates.
func New(t testing.TB) Files {
	t.Helper()
	ca := NewCA(t)
	f := Files{CA: ca.File}
	f.ServerCert, f.ServerKey = ca.Issue(t, Leaf{Name: "server", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	f.ClientCert, f.ClientKey = ca.Issue(t, Leaf{Name: "client", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Usage: x509.ExtKeyUsageClientAuth})
	return f
}

// CA is a throwaway certificate authority. Its certificate is File, and
// every certificate it issues is written beside it in Dir.
type CA struct {
	Dir  string
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey

	mu     sync.Mutex
	serial int64
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// Name is the subject's common name and the files' base name
	// (NAME.pem, NAME-key.pem); issuing the same name again overwrites them.
	Name     string
	DNSNames []string
	IPs      []net.IP
	// NotBefore and NotAfter default to an hour ago and a day from now:
	// set them in the past to make an expired certificate.
	NotBefore, NotAfter time.Time
	// Usage defaults to server authentication.
	Usage x509.ExtKeyUsage
}

// Issued is a certificate the CA made, with its serial number so that a
// test can tell which one a server presented.
type Issued struct {
	CertFile, KeyFile string
	Serial            *big.Int
}

// NewCA makes a CA in a directory of the test's.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := MakeCA(t.TempDir())
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return ca
}

// MakeCA makes a CA whose files live in dir; for programs that are not
// tests (bench gives the edge and nginx the same certificate).
func MakeCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "flashgate test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	ca := &CA{Dir: dir, File: filepath.Join(dir, "ca.pem"), cert: cert, key: key, serial: 1}
	if err := writePEM(ca.File, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Pool is a certificate pool holding only this CA, for clients.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Issue makes a certificate and its key (ECDSA P-256, PKCS #8) and returns
// their files.
func (ca *CA) Issue(t testing.TB, l Leaf) (certFile, keyFile string) {
	t.Helper()
	is, err := ca.Make(l)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return is.CertFile, is.KeyFile
}

// Make is Issue for programs that are not tests; it reports the serial.
func (ca *CA) Make(l Leaf) (Issued, error) {
	if l.Name == "" {
		return Issued{}, errors.New("a leaf needs a name")
	}
	now := time.Now()
	if l.NotBefore.IsZero() {
		l.NotBefore = now.Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = now.Add(24 * time.Hour)
	}
	if l.Usage == 0 {
		l.Usage = x509.ExtKeyUsageServerAuth
	}
	ca.mu.Lock()
	ca.serial++
	serial := big.NewInt(ca.serial)
	ca.mu.Unlock()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, fmt.Errorf("%s key: %w", l.Name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.Name},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{l.Usage},
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Issued{}, fmt.Errorf("%s certificate: %w", l.Name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Issued{}, fmt.Errorf("%s key: %w", l.Name, err)
	}
	is := Issued{CertFile: filepath.Join(ca.Dir, l.Name+".pem"), KeyFile: filepath.Join(ca.Dir, l.Name+"-key.pem"), Serial: serial}
	if err := writePEM(is.CertFile, "CERTIFICATE", der); err != nil {
		return Issued{}, err
	}
	if err := writePEM(is.KeyFile, "PRIVATE KEY", keyDER); err != nil {
		return Issued{}, err
	}
	return is, nil
}

func writePEM(path, kind string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("tlstest: %w", err)
	}
	return nil
}
