package tlsterm

import (
	"crypto/tls"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/internal/tlstest"
)

// serve runs a Terminator on a loopback listener: each connection shakes
// hands, then echoes one byte (so that a TLS 1.3 client reads the session
// tickets sent after the handshake) until the client closes.
func serve(t *testing.T, term *Terminator) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := term.Listener(ln)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		tln.Close()
		wg.Wait()
		term.Close()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if c.(interface{ Handshake() error }).Handshake() != nil {
					return
				}
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
					if _, err := c.Write(b); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial shakes hands, exchanges a byte and closes; it returns the state.
func dial(t *testing.T, addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		return tls.ConnectionState{}, err
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return tls.ConnectionState{}, err
	}
	return c.ConnectionState(), nil
}

func serial(st tls.ConnectionState) *big.Int { return st.PeerCertificates[0].SerialNumber }

func spec(certs ...conf.TLSCertificate) conf.ListenTLSConfig {
	return conf.ListenTLSConfig{Certificates: certs, SessionTickets: true, TicketRotation: time.Hour, TicketLifetime: 12 * time.Hour}
}

func mustLoad(t *testing.T, s conf.ListenTLSConfig) *Certs {
	t.Helper()
	cs, errs := Load(&s, time.Now())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return cs
}

var quiet = slog.New(slog.DiscardHandler)

// issue makes a certificate for names and returns its config entry and
// serial.
func issue(t *testing.T, ca *tlstest.CA, name string, names ...string) (conf.TLSCertificate, *big.Int) {
	t.Helper()
	is, err := ca.Make(tlstest.Leaf{Name: name, DNSNames: names})
	if err != nil {
		t.Fatal(err)
	}
	return conf.TLSCertificate{CertFile: is.CertFile, KeyFile: is.KeyFile}, is.Serial
}

// hasError reports whether errs has one at path whose message holds every
// part.
func hasError(errs field.Errors, path string, parts ...string) bool {
	for _, e := range errs {
		if e.Path != path {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(e.Msg, p)
		}
		if all {
			return true
		}
	}
	return false
}
