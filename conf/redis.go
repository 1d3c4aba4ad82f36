package conf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"flashgate/conf/field"
)

// RedisSentinelConfig is `redis.sentinel`: the master is whichever server
// the sentinels say it is, so a failover moves the edge with it.
type RedisSentinelConfig struct {
	// MasterSet is the name the sentinels monitor the master under
	// (`sentinel monitor NAME host port quorum`).
	MasterSet string `yaml:"master_set"`
	// Addrs are sentinels' host:port; the client learns the others from
	// the first that answers.
	Addrs []string `yaml:"addrs"`
	// Username and Password authenticate to the sentinels themselves (their
	// requirepass or ACL user); redis.username and redis.password
	// authenticate to the master. "env:NAME" allowed.
	Username string `yaml:"username"`
	Password string `yaml:"password" secret:"true"`
}

func (s *RedisSentinelConfig) set() bool { return s.MasterSet != "" || len(s.Addrs) > 0 }

// RedisTLSConfig is `redis.tls`: TLS with a private CA and a client
// certificate. Any setting turns TLS on; certificates are always verified.
type RedisTLSConfig struct {
	// CAFile is a PEM bundle of the CAs that sign the servers'
	// certificates ("": the system's roots).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and its key (PEM), for
	// a server with tls-auth-clients; both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the servers' certificates must carry ("": the
	// host of each address dialled).
	ServerName string `yaml:"server_name"`
}

// Enabled reports whether the section asks for TLS.
func (t *RedisTLSConfig) Enabled() bool { return *t != RedisTLSConfig{} }

// Config loads the section's files into a client configuration: nil when
// the section is empty. Errors name the field, relative to `tls`.
func (t *RedisTLSConfig) Config() (*tls.Config, field.Errors) {
	if !t.Enabled() {
		return nil, nil
	}
	var errs field.Errors
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			errs.Add("ca_file", "%v", err)
		case !pool.AppendCertsFromPEM(b):
			errs.Add("ca_file", "%s holds no PEM certificate", t.CAFile)
		default:
			cfg.RootCAs = pool
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		errs.Add("key_file", "is required with tls.cert_file")
	case t.CertFile == "" && t.KeyFile != "":
		errs.Add("cert_file", "is required with tls.key_file")
	case t.CertFile != "":
		certPEM, cerr := os.ReadFile(t.CertFile)
		keyPEM, kerr := os.ReadFile(t.KeyFile)
		if cerr != nil {
			errs.Add("cert_file", "%v", cerr)
		} else if b, _ := pem.Decode(certPEM); b == nil || b.Type != "CERTIFICATE" {
			errs.Add("cert_file", "%s holds no PEM certificate", t.CertFile)
			cerr = errors.New("no certificate")
		}
		if kerr != nil {
			errs.Add("key_file", "%v", kerr)
		}
		if cerr == nil && kerr == nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				errs.Add("key_file", "with cert_file %s: %v", t.CertFile, err)
			} else {
				cfg.Certificates = []tls.Certificate{pair}
			}
		}
	}
	return cfg, errs
}

// Equal reports whether two sections would connect the same way (a reload
// tells the operator when redis changed: it takes effect on restart).
func (c RedisConfig) Equal(o RedisConfig) bool {
	if !slices.Equal(c.Sentinel.Addrs, o.Sentinel.Addrs) {
		return false
	}
	c.Sentinel.Addrs, o.Sentinel.Addrs = nil, nil
	return reflect.DeepEqual(c, o)
}

// urlParams are the redis:// URL parameters the edge honours; rueidis
// knows more, which would be accepted and then silently dropped.
var urlParams = map[string]bool{"addr": true, "db": true, "master_set": true}

// validateConn checks how the section reaches Redis: credentials, a URL,
// Sentinel and TLS, and the combinations that cannot work together.
// Messages never quote a password or a URL (which may hold one).
func (c *RedisConfig) validateConn(errs *field.Errors) {
	s := &c.Sentinel
	for _, v := range []struct{ path, value string }{
		{"username", c.Username}, {"sentinel.username", s.Username}, {"sentinel.password", s.Password},
	} {
		if _, err := field.ResolveEnv(v.value); err != nil {
			errs.Add(v.path, "%v", err)
		}
	}

	urlMasterSet := ""
	if strings.Contains(c.Addr, "://") {
		urlMasterSet = c.validateURL(errs)
	}

	if s.set() {
		if c.Addr != "" {
			errs.Add("addr", "must be empty with redis.sentinel: the sentinels name the master (a host, a cluster seed list or a URL does not combine with it)")
		}
		if s.MasterSet == "" {
			errs.Add("sentinel.master_set", "is required with sentinel.addrs: the name the sentinels monitor the master under")
		}
		if len(s.Addrs) == 0 {
			errs.Add("sentinel.addrs", "is required with sentinel.master_set: the sentinels' host:port")
		}
		for i, a := range s.Addrs {
			checkAddr(errs, field.Index("sentinel.addrs", i), a)
		}
	} else if urlMasterSet == "" {
		if s.Username != "" {
			errs.Add("sentinel.username", "is set but no Sentinel is configured (sentinel.master_set, or master_set in redis.addr's URL)")
		}
		if s.Password != "" {
			errs.Add("sentinel.password", "is set but no Sentinel is configured (sentinel.master_set, or master_set in redis.addr's URL)")
		}
	}

	if c.Embedded() {
		if c.Username != "" {
			errs.Add("username", "the embedded stand-in has no ACL users: set redis.addr")
		}
		if c.TLS.Enabled() {
			errs.Add("tls", "the embedded stand-in has no TLS: set redis.addr")
		}
		return
	}
	_, tlsErrs := c.TLS.Config()
	errs.Nest("tls", tlsErrs)
}

// validateURL checks a redis://, rediss:// or unix:// addr and returns the
// master set it names ("" for none).
func (c *RedisConfig) validateURL(errs *field.Errors) string {
	u, err := url.Parse(c.Addr)
	if err != nil {
		// url.Error quotes the whole URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		errs.Add("addr", "is not a valid URL: %v", err)
		return ""
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" {
		errs.Add("addr", "URL scheme must be redis, rediss or unix, got %q", u.Scheme)
		return ""
	}
	q := u.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case k == "skip_verify":
			errs.Add("addr", "URL parameter skip_verify is not supported: certificates are always verified; trust a private CA with redis.tls.ca_file")
		case !urlParams[k]:
			errs.Add("addr", "URL parameter %q is not supported (only addr, db and master_set)", k)
		}
	}
	if u.User != nil {
		if u.User.Username() != "" && c.Username != "" {
			errs.Add("username", "is also in redis.addr's URL: give it in one place")
		}
		if _, ok := u.User.Password(); ok && c.Password != "" {
			errs.Add("password", "is also in redis.addr's URL: give it in one place")
		}
	}
	masterSet := q.Get("master_set")
	switch u.Scheme {
	case "unix":
		if masterSet != "" {
			errs.Add("addr", "a unix:// URL cannot name sentinels (master_set)")
		}
		if c.TLS.Enabled() {
			errs.Add("tls", "does not apply to a unix:// socket")
		}
	case "redis":
		if c.TLS.Enabled() {
			errs.Add("tls", "redis.addr is a redis:// URL (plain TCP): write rediss:// to use TLS")
		}
	}
	return masterSet
}
