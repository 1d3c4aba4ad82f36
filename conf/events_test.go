package conf

import (
	"strings"
	"testing"
	"time"
)

func TestEventsDefaultsAndValidation(t *testing.T) {
	def := Defaults().Events
	if errs := def.Validate(); len(errs) > 0 {
		t.Fatalf("defaults do not validate: %v", errs)
	}
	if def.MaxPerUser != 4 || def.Heartbeat != 15*time.Second || def.Deadline != 60*time.Second || def.WriteTimeout != 10*time.Millisecond {
		t.Fatalf("defaults %+v", def)
	}
	for _, c := range []struct {
		name  string
		edit  func(*EventsConfig)
		field string
	}{
		{"negative max_streams", func(c *EventsConfig) { c.MaxStreams = -1 }, "max_streams"},
		{"max_per_user too large", func(c *EventsConfig) { c.MaxPerUser = 1000 }, "max_per_user"},
		{"heartbeat too short", func(c *EventsConfig) { c.Heartbeat = 10 * time.Millisecond }, "heartbeat"},
		{"deadline too long", func(c *EventsConfig) { c.Deadline = 2 * time.Hour }, "deadline"},
		{"too many heartbeats per deadline", func(c *EventsConfig) { c.Heartbeat, c.Deadline = time.Second, time.Hour }, "heartbeat"},
		{"write_timeout too long", func(c *EventsConfig) { c.WriteTimeout = time.Minute }, "write_timeout"},
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
}
