package conf

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/conf/field"
)

// ListenTLSConfig is `listen.tls`: HTTPS on the shopper listener, for an
// edge with nothing in front of it. Any certificate turns it on; the
// listener then speaks TLS only (1.2 and 1.3, ALPN http/1.1).
//
// The certificates and hsts are reloaded with the rest of the file, and the
// certificate files are watched on their own (reload.watch): a renewed
// certificate is served to new handshakes without dropping a connection.
// Turning TLS on or off and the session ticket settings take effect on
// restart.
type ListenTLSConfig struct {
	// Certificates are chosen by the name the client asks for (SNI); the
	// first is the default, for clients that send no name or one no
	// certificate covers.
	Certificates []TLSCertificate `yaml:"certificates"`
	// HSTS is the max-age of the Strict-Transport-Security header the edge
	// writes on every HTTPS response (proxied ones too, unless the origin
	// sent its own); 0 writes none.
	HSTS MaxAge `yaml:"hsts"`
	// SessionTickets resumes sessions by tickets (default true); false
	// makes every new connection a full handshake, for strict forward
	// secrecy (nginx ssl_session_tickets off).
	SessionTickets bool `yaml:"session_tickets"`
	// TicketRotation is how often a fresh session ticket key starts
	// encrypting new tickets; TicketLifetime how long a key still
	// decrypts (resumes sessions) after that. A stolen key opens at most
	// rotation + lifetime of sessions.
	TicketRotation time.Duration `yaml:"ticket_rotation"`
	TicketLifetime time.Duration `yaml:"ticket_lifetime"`
}

// TLSCertificate is one certificate of `listen.tls.certificates`.
type TLSCertificate struct {
	// CertFile is PEM: the certificate, then the intermediates that chain
	// it to a root; KeyFile its private key (PEM, PKCS #8, PKCS #1 or EC).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Names are the server names it is served for; each must be covered by
	// the certificate (a "*.example.com" name by the same wildcard). Empty:
	// the certificate's own DNS names.
	Names []string `yaml:"names"`
}

// Enabled reports whether the listener speaks TLS.
func (t *ListenTLSConfig) Enabled() bool { return len(t.Certificates) > 0 }

// The bounds of the ticket settings. Go's TLS stack itself refuses a
// ticket older than seven days.
const (
	minTicketRotation = time.Minute
	maxTicketRotation = 24 * time.Hour
	maxTicketLifetime = 7 * 24 * time.Hour
)

func (t *ListenTLSConfig) fill() {
	orDefault(&t.TicketRotation, time.Hour)
	orDefault(&t.TicketLifetime, 12*time.Hour)
	for i := range t.Certificates {
		for j, n := range t.Certificates[i].Names {
			t.Certificates[i].Names[j] = strings.ToLower(strings.TrimSuffix(n, "."))
		}
	}
}

// Validate checks what the document alone can; paths are relative to
// `listen.tls`. The files themselves are read and checked when the
// configuration is compiled (proxy/tlsterm.Load), so `proxy -t` and a
// reload report a missing, unreadable, mismatched, expired or misnamed
// certificate with its field.
func (t *ListenTLSConfig) Validate() field.Errors {
	var errs field.Errors
	for i, c := range t.Certificates {
		p := field.Index("certificates", i)
		if c.CertFile == "" {
			errs.Add(p+".cert_file", "is required")
		}
		if c.KeyFile == "" {
			errs.Add(p+".key_file", "is required")
		}
		for j, n := range c.Names {
			if err := checkServerName(n); err != nil {
				errs.Add(field.Index(p+".names", j), "%v", err)
			}
		}
	}
	if t.HSTS < 0 {
		errs.Add("hsts", "must not be negative, got %v", time.Duration(t.HSTS))
	}
	if t.HSTS > 0 && t.HSTS < MaxAge(time.Second) {
		errs.Add("hsts", "counts whole seconds: 0 (off) or at least 1s, got %v", time.Duration(t.HSTS))
	}
	if t.HSTS > 0 && !t.Enabled() {
		errs.Add("hsts", "needs certificates: Strict-Transport-Security is only sent over HTTPS")
	}
	if t.TicketRotation < minTicketRotation || t.TicketRotation > maxTicketRotation {
		errs.Add("ticket_rotation", "must be between %v and %v, got %v", minTicketRotation, maxTicketRotation, t.TicketRotation)
	}
	if t.TicketLifetime < t.TicketRotation || t.TicketLifetime > maxTicketLifetime {
		errs.Add("ticket_lifetime", "must be between ticket_rotation (%v) and %v, got %v", t.TicketRotation, maxTicketLifetime, t.TicketLifetime)
	}
	return errs
}

// checkServerName accepts a DNS name or a wildcard of one label
// ("*.example.com"): what a client may send as SNI, and what a
// certificate's names look like. IP addresses are not names (clients send
// no SNI for them: they get the default certificate).
func checkServerName(n string) error {
	host := strings.TrimPrefix(n, "*.")
	if host == "" || len(n) > 253 {
		return fmt.Errorf("%q is not a server name", n)
	}
	if strings.Contains(host, "*") {
		return fmt.Errorf("%q: a wildcard is allowed only as the whole first label (*.example.com)", n)
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q is not a server name", n)
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%q is not a server name (letters, digits, '-' and '.')", n)
			}
		}
	}
	if !strings.ContainsAny(host, "abcdefghijklmnopqrstuvwxyz") {
		return fmt.Errorf("%q is an address, not a name: clients send no SNI for an address (they get the first certificate)", n)
	}
	return nil
}

// RestartEqual reports whether the settings of the listener that take
// effect on restart only are the same: all but the certificates and hsts,
// which a reload applies (TLS on or off is a restart: the listener
// changes).
func (l ListenConfig) RestartEqual(o ListenConfig) bool {
	if l.TLS.Enabled() != o.TLS.Enabled() {
		return false
	}
	l.TLS.Certificates, o.TLS.Certificates = nil, nil
	l.TLS.HSTS, o.TLS.HSTS = 0, 0
	return reflect.DeepEqual(l, o)
}

// MaxAge is a max-age in whole seconds, written as a number of seconds
// (31536000) or a duration (8760h), as the header it ends up in counts
// seconds and operators copy the number from elsewhere.
type MaxAge time.Duration

// Seconds is the value for the header.
func (m MaxAge) Seconds() int64 { return int64(time.Duration(m) / time.Second) }

// UnmarshalYAML takes a number of seconds or a Go duration.
func (m *MaxAge) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a number of seconds or a duration such as 8760h")
	}
	if n, err := strconv.ParseInt(node.Value, 10, 64); err == nil {
		if n > int64(maxMaxAge/time.Second) {
			return fmt.Errorf("%d seconds is more than %v", n, maxMaxAge)
		}
		*m = MaxAge(time.Duration(n) * time.Second)
		return nil
	}
	d, err := time.ParseDuration(node.Value)
	if err != nil {
		return fmt.Errorf("must be a number of seconds or a duration such as 8760h, got %q", node.Value)
	}
	if d > maxMaxAge {
		return fmt.Errorf("%v is more than %v", d, maxMaxAge)
	}
	*m = MaxAge(d)
	return nil
}

// MarshalYAML writes seconds, the header's unit (/admin/config).
func (m MaxAge) MarshalYAML() (any, error) { return m.Seconds(), nil }

// maxMaxAge bounds hsts at ten years: beyond is a typo.
const maxMaxAge = 10 * 365 * 24 * time.Hour
