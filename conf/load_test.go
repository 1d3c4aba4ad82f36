package conf

import (
	"errors"
	"strings"
	"testing"
	"time"

	"flashgate/conf/field"
)

func TestShippedConfigIsValid(t *testing.T) {
	doc, err := Parse(DefaultYAML, "edge.yaml")
	if err != nil {
		t.Fatalf("conf/edge.yaml does not load: %v", err)
	}
	c := doc.Config
	if c.Listen.Addr != ":8080" || c.Admin.Addr != "127.0.0.1:9901" {
		t.Fatalf("listen %q admin %q; the shipped file must listen on :8080 and 127.0.0.1:9901", c.Listen.Addr, c.Admin.Addr)
	}
	if len(c.Filters) == 0 || c.Filters[0].Scope == "" {
		t.Fatalf("filters not defaulted: %+v", c.Filters)
	}
}

func TestErrorsNameFieldAndLine(t *testing.T) {
	cases := []struct {
		name, yaml string
		path       string
		line       int
		msg        string
	}{
		{"unknown top-level key", "node_id: 1\nlisten:\n  addr: \":8080\"\nlistne: {}\n", "listne", 4, `did you mean "listen"`},
		{"unknown nested key", "listen:\n  adr: \":1\"\n", "listen.adr", 2, "unknown key"},
		{"wrong type", "listen:\n  read_timeout: soon\n", "listen.read_timeout", 2, `cannot use "soon"`},
		{"impossible value", "node_id: 5000\n", "node_id", 1, "between 0 and 1023"},
		{"bad address", "listen:\n  addr: nowhere\n", "listen.addr", 2, "host:port"},
		{"filter without type", "filters:\n  - name: x\n", "filters[0].type", 2, "required"},
		{"bad scope", "filters:\n  - type: access\n    scope: some\n", "filters[0].scope", 3, "api or all"},
		{"open admin without token", "admin:\n  addr: \"0.0.0.0:9901\"\n", "admin.token", 0, "loopback"},
		{"admin token from missing env", "admin:\n  token: env:FLASHGATE_TEST_NOPE\n", "admin.token", 2, "not set"},
		{"sample out of range", "log:\n  access_sample: 2\n", "log.access_sample", 2, "between 0 and 1"},
		{"list where mapping expected", "listen: [1, 2]\n", "listen", 1, "expected a mapping"},
		{"rolling-upgrade flag not a bool", "sale:\n  buyer_keys: maybe\n", "sale.buyer_keys", 2, `cannot use "maybe"`},
		{"queue shorter than a call", "redis:\n  timeout: 500ms\n  queue_timeout: 100ms\n", "redis.queue_timeout", 3, "between timeout"},
		{"batch beyond the script's stack", "redis:\n  max_batch: 2001\n", "redis.max_batch", 2, "between 1 and 2000"},
		{"negative batch", "redis:\n  max_batch: -1\n", "redis.max_batch", 2, "between 1 and 2000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "t.yaml")
			var fe field.Errors
			if !errors.As(err, &fe) {
				t.Fatalf("want field errors, got %v", err)
			}
			for _, e := range fe {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.msg) && (tc.line == 0 || e.Line == tc.line) {
					return
				}
			}
			t.Fatalf("no error at %s line %d containing %q in: %v", tc.path, tc.line, tc.msg, err)
		})
	}
}

func TestMalformedYAML(t *testing.T) {
	for _, in := range []string{"", "listen: [\n", "\t- nope"} {
		if _, err := Parse([]byte(in), "t.yaml"); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

func TestDefaultsFillOmittedFields(t *testing.T) {
	doc, err := Parse([]byte("node_id: 7\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := doc.Config
	if c.NodeID != 7 || c.Listen.ReadTimeout == 0 || c.Log.Level != "info" || c.RealIP.Header != "X-Forwarded-For" ||
		c.Redis.QueueTimeout < c.Redis.Timeout {
		t.Fatalf("defaults missing: %+v", c)
	}
}

// A zero written in listen, admin, log, real_ip or reload stays (and is
// validated); in every other section it takes the default, like a key left
// out.
func TestWrittenZero(t *testing.T) {
	doc, err := Parse([]byte("log:\n  access_sample: 0\nkafka:\n  topic: \"\"\n  batch_timeout: 0s\nstatic:\n  max_age: 0s\nredis:\n  timeout: 2s\n  queue_timeout: 0s\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, d := doc.Config, Defaults()
	if c.Log.AccessSample != 0 || c.Kafka.Topic != d.Kafka.Topic || c.Kafka.BatchTimeout != d.Kafka.BatchTimeout ||
		c.Static.MaxAge != d.Static.MaxAge || c.Redis.QueueTimeout != 2*time.Second {
		t.Fatalf("log %+v kafka %+v static %+v redis %+v", c.Log, c.Kafka, c.Static, c.Redis)
	}
	if _, err := Parse([]byte("listen:\n  read_timeout: 0s\n"), "t.yaml"); err == nil {
		t.Fatal("listen.read_timeout: 0s accepted")
	}
}

func TestAdminTokenFromEnv(t *testing.T) {
	t.Setenv("FLASHGATE_TEST_TOKEN", "0123456789abcdef0123")
	doc, err := Parse([]byte("admin:\n  addr: \"0.0.0.0:9901\"\n  token: env:FLASHGATE_TEST_TOKEN\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := doc.Config.Admin.ResolveToken(); tok != "0123456789abcdef0123" {
		t.Fatalf("token %q", tok)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(DefaultYAML)
	f.Add([]byte("filters:\n  - type: ip_limit\n    rate: 1r/s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse(data, "fuzz.yaml")
		if err == nil && doc.Config == nil {
			t.Fatal("nil config without error")
		}
	})
}
