package push

import (
	"strings"
	"testing"
	"time"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	var def Config
	def.SetDefaults()
	if errs := def.Validate(); len(errs) > 0 {
		t.Fatalf("defaults do not validate: %v", errs)
	}
	if def.MaxPerUser != DefaultMaxPerUser || def.Heartbeat != DefaultHeartbeat || def.Deadline != DefaultDeadline || def.WriteTimeout != DefaultWriteTimeout {
		t.Fatalf("defaults %+v", def)
	}
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"negative max_streams", func(c *Config) { c.MaxStreams = -1 }, "max_streams"},
		{"max_per_user too large", func(c *Config) { c.MaxPerUser = 1000 }, "max_per_user"},
		{"heartbeat too short", func(c *Config) { c.Heartbeat = 10 * time.Millisecond }, "heartbeat"},
		{"deadline too long", func(c *Config) { c.Deadline = 2 * time.Hour }, "deadline"},
		{"too many heartbeats per deadline", func(c *Config) { c.Heartbeat, c.Deadline = time.Second, time.Hour }, "heartbeat"},
		{"write_timeout too long", func(c *Config) { c.WriteTimeout = time.Minute }, "write_timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := def
			c.edit(&cfg)
			errs := cfg.Validate()
			if len(errs) == 0 || !strings.HasPrefix(errs[0].Path, c.field) {
				t.Fatalf("errors %v, want one at %s", errs, c.field)
			}
		})
	}
	if n := autoMaxStreams(); n < 1 || n > maxDefaultStreams {
		t.Fatalf("automatic max_streams %d", n)
	}
}
