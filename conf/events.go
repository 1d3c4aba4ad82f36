package conf

import (
	"time"

	"flashgate/conf/field"
)

// EventsConfig is the `events:` section: order outcomes pushed to the sale
// page as Server-Sent Events (package push).
type EventsConfig struct {
	// Disabled turns the event stream off: /api/seckill/events answers 404
	// and the page polls.
	Disabled bool `yaml:"disabled"`
	// MaxStreams bounds the open streams of this edge; each holds a socket.
	// 0 means half the process's open-file limit, at most 50,000, so that
	// waiting shoppers can never starve the purchase path of descriptors.
	MaxStreams int `yaml:"max_streams"`
	// MaxPerUser bounds the open streams of one shopper on this edge (a
	// local limit: with N edges a shopper can hold N times as many).
	MaxPerUser int `yaml:"max_per_user"`
	// Heartbeat is how often an idle stream gets a comment line, so that
	// proxies and load balancers do not cut it as idle.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// Deadline is how long a stream may wait for its outcome. It then reads
	// the order state once more, sends it and closes; the page polls on.
	Deadline time.Duration `yaml:"deadline"`
	// WriteTimeout bounds one write to a connection that does not support
	// non-blocking writes (TLS, listen.max_conns_per_ip); past it the client
	// is dropped. Plain TCP connections on Linux never wait at all.
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// fill gives the settings left out or written as zero their defaults
// (max_streams 0 stays: push.New resolves it from the process's limits).
func (c *EventsConfig) fill() {
	orDefault(&c.MaxPerUser, 4)
	orDefault(&c.Heartbeat, 15*time.Second)
	orDefault(&c.Deadline, 60*time.Second)
	orDefault(&c.WriteTimeout, 10*time.Millisecond)
}

// WithDefaults returns c with the defaults Parse gives the `events:`
// section: constructors fill their zero settings from it (doc.go).
func (c EventsConfig) WithDefaults() EventsConfig {
	c.fill()
	return c
}

// Validate checks the section; paths are relative to `events`.
func (c *EventsConfig) Validate() field.Errors {
	var errs field.Errors
	if c.MaxStreams < 0 || c.MaxStreams > 1_000_000 {
		errs.Add("max_streams", "must be between 0 (automatic) and 1000000, got %d", c.MaxStreams)
	}
	if c.MaxPerUser < 1 || c.MaxPerUser > 100 {
		errs.Add("max_per_user", "must be between 1 and 100, got %d", c.MaxPerUser)
	}
	if c.Heartbeat < time.Second || c.Heartbeat > 5*time.Minute {
		errs.Add("heartbeat", "must be between 1s and 5m, got %v", c.Heartbeat)
	}
	if c.Deadline < time.Second || c.Deadline > time.Hour {
		errs.Add("deadline", "must be between 1s and 1h, got %v", c.Deadline)
	}
	// A stream must stay far below the smallest socket buffer over its whole
	// life, or a healthy client that reads slowly could look slow.
	if c.Heartbeat > 0 && c.Deadline/c.Heartbeat > 1000 {
		errs.Add("heartbeat", "at most 1000 heartbeats per deadline (%v / %v)", c.Deadline, c.Heartbeat)
	}
	if c.WriteTimeout < time.Millisecond || c.WriteTimeout > 5*time.Second {
		errs.Add("write_timeout", "must be between 1ms and 5s, got %v", c.WriteTimeout)
	}
	return errs
}
