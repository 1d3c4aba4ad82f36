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
	"time"

	"flashgate/conf/field"
)

// RedisConfig is the `redis:` section.
type RedisConfig struct {
	// Addr is host:port, a comma-separated cluster seed list, a redis://
	// URL, or "" / "embedded" for the in-process stand-in (demo only).
	Addr string `yaml:"addr"`
	// Timeout is the budget of every Redis call: slow or gone answers 503
	// DEGRADED within it, never a hang.
	Timeout time.Duration `yaml:"timeout"`
	// QueueTimeout is how long a purchase may wait for its product's
	// script call in flight (the group commit) before it is answered 503
	// unsent (default 1s, at least Timeout). See stock.Options.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// MaxBatch caps the purchase attempts of one product that one
	// deduction script call carries (the group commit; default 256).
	// Bigger batches cost Redis less per purchase, and block it longer
	// for every other product while the script runs. See stock.Options.
	MaxBatch      int           `yaml:"max_batch"`
	MaxFlushDelay time.Duration `yaml:"max_flush_delay"`
	Password      string        `yaml:"password" secret:"true"`
	// Username is the ACL user ("" the default user); Sentinel and TLS
	// say how to reach a production Redis. All three: redis.go.
	Username string              `yaml:"username"`
	Sentinel RedisSentinelConfig `yaml:"sentinel"`
	TLS      RedisTLSConfig      `yaml:"tls"`
	// WaitReplicas > 0: after each deduction script call, WAIT until that
	// many replicas have its writes (or WaitTimeout) before any of its
	// purchases is answered. See stock.Options.WaitReplicas.
	WaitReplicas int           `yaml:"wait_replicas"`
	WaitTimeout  time.Duration `yaml:"wait_timeout"`
}

// DefaultMaxBatch is redis.max_batch's default (and stock.Options'). At
// 128, under one hot product with 512 shoppers in flight, most calls were
// full; 512 gave 1.13x the purchases/s at 0.85x Redis' CPU per purchase
// (bench compare -edge-b, 4 rounds), with scripts of up to ~8 ms. 256 keeps
// a script under ~5 ms.
const DefaultMaxBatch = 256

// MaxBatchLimit bounds redis.max_batch: deduct.lua unpacks up to two
// arguments per attempt onto Lua's stack (8,000 slots) for one HSET.
const MaxBatchLimit = 2000

// fill gives the settings left out or written as zero their defaults;
// queue_timeout's depends on timeout.
func (c *RedisConfig) fill() {
	orDefault(&c.Timeout, 200*time.Millisecond)
	orDefault(&c.QueueTimeout, max(time.Second, c.Timeout))
	orDefault(&c.WaitTimeout, 50*time.Millisecond)
	orDefault(&c.MaxBatch, DefaultMaxBatch)
}

// WithDefaults returns c with the defaults Parse gives the `redis:`
// section: constructors fill their zero settings from it (doc.go).
func (c RedisConfig) WithDefaults() RedisConfig {
	c.fill()
	return c
}

// Embedded reports whether the in-process stand-in is configured.
func (c *RedisConfig) Embedded() bool {
	return (c.Addr == "" || c.Addr == "embedded") && !c.Sentinel.set()
}

// Validate checks the section; paths are relative to `redis`.
func (c *RedisConfig) Validate() field.Errors {
	var errs field.Errors
	if c.Timeout < time.Millisecond || c.Timeout > 10*time.Second {
		errs.Add("timeout", "must be between 1ms and 10s, got %v", c.Timeout)
	}
	if c.QueueTimeout < c.Timeout || c.QueueTimeout > 30*time.Second {
		errs.Add("queue_timeout", "must be between timeout (%v) and 30s, got %v", c.Timeout, c.QueueTimeout)
	}
	if c.MaxBatch < 1 || c.MaxBatch > MaxBatchLimit {
		errs.Add("max_batch", "must be between 1 and %d, got %d", MaxBatchLimit, c.MaxBatch)
	}
	if c.MaxFlushDelay < 0 || c.MaxFlushDelay > 10*time.Millisecond {
		errs.Add("max_flush_delay", "must be between 0 and 10ms, got %v", c.MaxFlushDelay)
	}
	if _, err := field.ResolveEnv(c.Password); err != nil {
		errs.Add("password", "%v", err)
	}
	if c.WaitReplicas < 0 || c.WaitReplicas > 16 {
		errs.Add("wait_replicas", "must be between 0 (off) and 16, got %d", c.WaitReplicas)
	}
	if c.WaitTimeout < time.Millisecond || c.WaitTimeout >= c.Timeout {
		errs.Add("wait_timeout", "must be at least 1ms and less than timeout (%v): the WAIT is part of the call's budget, got %v", c.Timeout, c.WaitTimeout)
	}
	if c.WaitReplicas > 0 && c.Embedded() {
		errs.Add("wait_replicas", "the embedded stand-in has no replicas")
	}
	c.validateConn(&errs)
	return errs
}

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
