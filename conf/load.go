package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/conf/field"
)

// Document is a parsed, defaulted and validated configuration together with
// the YAML tree it came from (for line numbers) and its source bytes.
type Document struct {
	Config *Config
	Root   *yaml.Node
	Source string
	Raw    []byte
}

// MaxFileSize bounds the config file: a runaway generator must not eat memory.
const MaxFileSize = 4 << 20

// LoadFile reads and parses path.
func LoadFile(path string) (*Document, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: %d bytes is larger than the %d-byte limit", path, st.Size(), MaxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse decodes data strictly, applies defaults and validates. The returned
// error is a field.Errors (with lines) when the document is well-formed YAML
// but wrong, so callers can print every problem at once.
func Parse(data []byte, source string) (*Document, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty document", source)
		}
		return nil, fmt.Errorf("%s: %v", source, err)
	}
	cfg := preset()
	errs := field.Decode(&root, cfg)
	if len(errs) == 0 {
		cfg.fill()
		errs = cfg.Validate()
	}
	for i := range errs {
		if errs[i].Line == 0 {
			errs[i].Line = field.Line(&root, errs[i].Path)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	cfg.Admin.Addr, _ = cfg.Admin.ResolveAddr() // validated above
	return &Document{Config: cfg, Root: &root, Source: source, Raw: data}, nil
}

// Defaults returns what a document that sets nothing loads as: every
// default. Code and tests that build a section by hand start from it.
func Defaults() *Config {
	c := preset()
	c.fill()
	return c
}

// preset holds the defaults of listen, admin, log, real_ip and reload. The document is decoded over them, so a zero written there stays
// and is validated: log.access_sample: 0 logs nothing, listen.read_timeout:
// 0 is an error.
func preset() *Config {
	return &Config{
		Listen: ListenConfig{
			Addr:               ":8080",
			ReadTimeout:        5 * time.Second,
			WriteTimeout:       5 * time.Second,
			IdleTimeout:        60 * time.Second,
			MaxRequestBodySize: 1 << 20,
			ReadBufferSize:     8 << 10,
			Concurrency:        256 * 1024,
			ShutdownTimeout:    10 * time.Second,
			TLS:                ListenTLSConfig{SessionTickets: true},
		},
		Admin:  AdminConfig{Addr: "127.0.0.1:9901"},
		Log:    LogConfig{Level: "info", Format: "json", AccessSample: 0.01},
		RealIP: RealIPConfig{Header: "X-Forwarded-For"},
		Reload: ReloadConfig{Watch: true, Debounce: 200 * time.Millisecond},
	}
}

// fill runs once the document is decoded and, with preset, is the only
// place that defaults a setting. In every other section a setting left out
// or written as zero takes its default (each section's fill, in its file);
// list items (filters, pools, routes) get theirs, which only a pass after
// decoding can give; a default derived from another field (a filter's
// name, redis.queue_timeout) is set after that field's.
func (c *Config) fill() {
	for i := range c.Filters {
		f := &c.Filters[i]
		orDefault(&f.Scope, "api")
		orDefault(&f.Name, f.Type)
	}
	c.Listen.TLS.fill()
	c.Static.fill()
	c.Upstreams.fill()
	c.Redis.fill()
	c.Auth.fill()
	c.Sale.fill()
	c.Events.fill()
	c.Kafka.fill()
	c.Orders.fill()
	c.ClickHouse.fill()
	c.Payments.fill()
}

// orDefault sets *v to def when *v is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate checks every field that the document alone can check. Filter
// settings are checked when the filters are built (the proxy's Compile),
// because only the filter knows its own parameters.
func (c *Config) Validate() field.Errors {
	var errs field.Errors
	if c.NodeID < 0 || c.NodeID > 1023 {
		errs.Add("node_id", "must be between 0 and 1023, got %d", c.NodeID)
	}
	l := c.Listen
	checkAddr(&errs, "listen.addr", l.Addr)
	positive(&errs, "listen.read_timeout", l.ReadTimeout)
	positive(&errs, "listen.write_timeout", l.WriteTimeout)
	positive(&errs, "listen.idle_timeout", l.IdleTimeout)
	positive(&errs, "listen.shutdown_timeout", l.ShutdownTimeout)
	if l.MaxRequestBodySize < 1024 {
		errs.Add("listen.max_request_body_size", "must be at least 1024 bytes, got %d", l.MaxRequestBodySize)
	}
	if l.ReadBufferSize < 1024 || l.ReadBufferSize > 1<<20 {
		errs.Add("listen.read_buffer_size", "must be between 1024 and 1048576 bytes (it bounds the request header size), got %d", l.ReadBufferSize)
	}
	if l.Concurrency < 1 {
		errs.Add("listen.concurrency", "must be at least 1, got %d", l.Concurrency)
	}
	if l.MaxConnsPerIP < 0 {
		errs.Add("listen.max_conns_per_ip", "must not be negative, got %d", l.MaxConnsPerIP)
	}
	errs.Nest("listen.tls", l.TLS.Validate())
	c.Admin.validate(&errs)
	c.Admin.validateHosts(&errs)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs.Add("log.level", "must be one of debug, info, warn, error; got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		errs.Add("log.format", "must be json or text; got %q", c.Log.Format)
	}
	if c.Log.AccessSample < 0 || c.Log.AccessSample > 1 {
		errs.Add("log.access_sample", "must be between 0 and 1, got %v", c.Log.AccessSample)
	}
	if c.RealIP.Header == "" {
		errs.Add("real_ip.header", "must not be empty")
	}
	if c.Reload.Debounce < 0 || c.Reload.Debounce > 10*time.Second {
		errs.Add("reload.debounce", "must be between 0 and 10s, got %v", c.Reload.Debounce)
	}
	for i, f := range c.Filters {
		p := field.Index("filters", i)
		if f.Type == "" {
			errs.Add(p+".type", "is required")
		}
		if f.Scope != "api" && f.Scope != "all" {
			errs.Add(p+".scope", "must be api or all, got %q", f.Scope)
		}
	}
	errs.Nest("static", c.Static.Validate())
	errs.Nest("upstreams", c.Upstreams.Validate())
	errs.Nest("redis", c.Redis.Validate())
	errs.Nest("auth", c.Auth.Validate())
	errs.Nest("sale", c.Sale.Validate())
	errs.Nest("events", c.Events.Validate())
	c.validateOrders(&errs)
	c.validateDemoLogin(&errs)
	errs.Nest("payments", c.Payments.Validate())
	validateActivities(&errs, c.Activities, c.Sale.OrderTTL)
	return errs
}

func positive(errs *field.Errors, path string, d time.Duration) {
	if d <= 0 {
		errs.Add(path, "must be a positive duration such as 5s, got %v", d)
	}
}

func checkAddr(errs *field.Errors, path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		errs.Add(path, "must be host:port or :port, got %q", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		errs.Add(path, "port must be a number from 0 to 65535, got %q", port)
	}
	_ = host
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false // ":9901" listens on every interface
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
