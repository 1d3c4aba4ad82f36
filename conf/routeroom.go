package conf

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"flashgate/conf/field"
)

// RouteRoomConfig is a route's `waiting_room:` (package proxy/routeroom):
// at most AdmitPerMinute new visitors a minute and/or MaxActive visitors at
// once reach the route's pool; the others wait on a page the edge serves.
// The room's state is in Redis under its Name, so every edge agrees.
type RouteRoomConfig struct {
	// Name identifies the room in Redis, in its cookies and in the admin
	// API: 1 to 64 of [A-Za-z0-9_-]. Two routes with the same name share
	// one room (one queue in front of both).
	Name string `yaml:"name"`
	// Title is the room's name on the page (default: Name).
	Title string `yaml:"title"`
	// AdmitPerMinute bounds the new visitors let in a minute (0: no bound);
	// MaxActive the visitors whose session runs (0: no cap). At least one
	// of the two is set.
	AdmitPerMinute int `yaml:"admit_per_minute"`
	MaxActive      int `yaml:"max_active"`
	// Session is how long an admitted visitor stays active without
	// activity; with Renew, every request after Recheck renews it.
	Session time.Duration `yaml:"session"`
	// Renew: activity renews the session (a pointer: an explicit false
	// differs from "not set", default true).
	Renew *bool `yaml:"renew"`
	// Recheck is how long an admitted visitor's pass is taken on the
	// edge's word alone, from memory; after it one request asks Redis
	// (renews the session, or finds it ended). It bounds how long a session
	// the origin ended can still be replayed. At most Session.
	Recheck time.Duration `yaml:"recheck"`
	// Method is how the room admits: fifo, random, passthrough, reject or
	// queue_all; the admin API switches it live on every edge.
	Method string `yaml:"method"`
	// EndHeader is the response header with which the origin ends the
	// visitor's session (value "end"); the edge removes it from the answer.
	EndHeader string `yaml:"end_header"`
	// Page is an HTML template file for the queue page (html/template;
	// README "Waiting room on a route" lists the fields); "" serves the
	// built-in page, in English or Chinese by Accept-Language.
	Page string `yaml:"page"`
	// Poll is how often the page asks for its place; a waiting visitor
	// not seen for Abandon loses their place.
	Poll    time.Duration `yaml:"poll"`
	Abandon time.Duration `yaml:"abandon"`
	// Bypass lets requests past the room without a place and uncounted.
	Bypass RoomBypassConfig `yaml:"bypass"`
	// Events are scheduled windows with their own settings.
	Events []RoomEventConfig `yaml:"events"`
	// Challenge asks a new visitor for a proof of work (the sale room's)
	// before they get a place (difficulty 0: none).
	Challenge RoomChallenge `yaml:"challenge"`
}

// RoomEventConfig is one scheduled window of a route room: from Prequeue
// to Start everyone waits (nobody is let in) and, with Shuffle, their order
// is drawn at random at the start; from Start to End the event's settings
// replace the room's. Times are RFC 3339, or relative to the edge's start
// ("+30s") as an activity's. An operator's live method still wins.
type RoomEventConfig struct {
	Name     string `yaml:"name"`
	Prequeue string `yaml:"prequeue"` // "" = no pre-queue
	Start    string `yaml:"start"`
	End      string `yaml:"end"`
	// AdmitPerMinute, MaxActive (0: the room's), Method ("": the room's)
	// and Page ("": the room's) apply from Start to End.
	AdmitPerMinute int    `yaml:"admit_per_minute"`
	MaxActive      int    `yaml:"max_active"`
	Method         string `yaml:"method"`
	Page           string `yaml:"page"`
	// Shuffle draws the pre-queue's order at random at the start (the
	// lottery); off, it keeps the order of arrival. Default true.
	Shuffle *bool `yaml:"shuffle"`
}

// RoomBypassConfig is a route room's `bypass:`. A signed bypass token
// (minted by POST /admin/rooms/bypass) works without any setting here.
type RoomBypassConfig struct {
	// CIDRs of clients (the real client IP) that bypass the room.
	CIDRs []string `yaml:"cidrs"`
	// Paths are path prefixes that bypass the room (static assets).
	Paths []string `yaml:"paths"`
}

// The route room's queueing methods.
const (
	RoomFIFO        = "fifo"
	RoomRandom      = "random"
	RoomPassthrough = "passthrough"
	RoomReject      = "reject"
	RoomQueueAll    = "queue_all"
)

// RoomMethods lists the methods in the order the admin API shows them.
var RoomMethods = []string{RoomFIFO, RoomRandom, RoomPassthrough, RoomReject, RoomQueueAll}

// ValidRoomMethod reports whether m is a route room's method.
func ValidRoomMethod(m string) bool {
	for _, x := range RoomMethods {
		if m == x {
			return true
		}
	}
	return false
}

// ValidRoomName reports whether n is a room name: [A-Za-z0-9_-]{1,64}, so
// that it is a cookie name's tail and a Redis hash tag as it is.
func ValidRoomName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// fill gives the room's settings left out their defaults.
func (c *RouteRoomConfig) fill() {
	orDefault(&c.Title, c.Name)
	orDefault(&c.Session, 5*time.Minute)
	if c.Renew == nil {
		c.Renew = boolPtr(true)
	}
	orDefault(&c.Recheck, min(30*time.Second, c.Session))
	orDefault(&c.Method, RoomFIFO)
	orDefault(&c.EndHeader, "Flashgate-Room")
	orDefault(&c.Poll, 5*time.Second)
	orDefault(&c.Abandon, time.Minute)
	for i := range c.Events {
		if c.Events[i].Shuffle == nil {
			c.Events[i].Shuffle = boolPtr(true)
		}
	}
}

// WithDefaults returns c with the defaults Parse gives it.
func (c RouteRoomConfig) WithDefaults() RouteRoomConfig {
	c.Events = slices.Clone(c.Events)
	c.fill()
	return c
}

func (c *RouteRoomConfig) validate(errs *field.Errors, at string) {
	if !ValidRoomName(c.Name) {
		errs.Add(field.Join(at, "name"), "want 1 to 64 of [A-Za-z0-9_-], got %q", c.Name)
	}
	if c.AdmitPerMinute < 0 || c.AdmitPerMinute > 10_000_000 {
		errs.Add(field.Join(at, "admit_per_minute"), "must be between 0 (no bound) and 10000000, got %d", c.AdmitPerMinute)
	}
	if c.MaxActive < 0 || c.MaxActive > 100_000_000 {
		errs.Add(field.Join(at, "max_active"), "must be between 0 (no cap) and 100000000, got %d", c.MaxActive)
	}
	if c.AdmitPerMinute == 0 && c.MaxActive == 0 {
		errs.Add(at, "set admit_per_minute, max_active or both")
	}
	if c.Session < time.Second || c.Session > 24*time.Hour {
		errs.Add(field.Join(at, "session"), "must be between 1s and 24h, got %s", c.Session)
	}
	if c.Recheck < 100*time.Millisecond || c.Recheck > c.Session {
		errs.Add(field.Join(at, "recheck"), "must be between 100ms and session (%s), got %s", c.Session, c.Recheck)
	}
	if !ValidRoomMethod(c.Method) {
		errs.Add(field.Join(at, "method"), "%q must be one of %s", c.Method, strings.Join(RoomMethods, ", "))
	}
	if !validHeaderName(c.EndHeader) {
		errs.Add(field.Join(at, "end_header"), "%q is not a header name", c.EndHeader)
	}
	if c.Poll < time.Second || c.Poll > time.Minute {
		errs.Add(field.Join(at, "poll"), "must be between 1s and 1m, got %s", c.Poll)
	}
	if c.Abandon < 2*c.Poll || c.Abandon > time.Hour {
		errs.Add(field.Join(at, "abandon"), "must be between two polls (%s) and 1h, got %s", 2*c.Poll, c.Abandon)
	}
	for i, s := range c.Bypass.CIDRs {
		if _, err := ParseRoomCIDR(s); err != nil {
			errs.Add(field.Join(at, field.Join("bypass", field.Index("cidrs", i))), "%v", err)
		}
	}
	for i := range c.Events {
		ev := &c.Events[i]
		eat := field.Join(at, field.Index("events", i))
		if ev.Name == "" {
			errs.Add(field.Join(eat, "name"), "required")
		}
		if ev.Start == "" || ev.End == "" {
			errs.Add(eat, "start and end are required")
		}
		if ev.Method != "" && !ValidRoomMethod(ev.Method) {
			errs.Add(field.Join(eat, "method"), "%q must be one of %s", ev.Method, strings.Join(RoomMethods, ", "))
		}
		if ev.AdmitPerMinute < 0 || ev.AdmitPerMinute > 10_000_000 {
			errs.Add(field.Join(eat, "admit_per_minute"), "must be between 0 (the room's) and 10000000, got %d", ev.AdmitPerMinute)
		}
		if ev.MaxActive < 0 || ev.MaxActive > 100_000_000 {
			errs.Add(field.Join(eat, "max_active"), "must be between 0 (the room's) and 100000000, got %d", ev.MaxActive)
		}
		if ev.Shuffle == nil {
			errs.Add(field.Join(eat, "shuffle"), "required (Parse fills it)")
		}
	}
	for i, p := range c.Bypass.Paths {
		if !strings.HasPrefix(p, "/") {
			errs.Add(field.Join(at, field.Join("bypass", field.Index("paths", i))), "must start with \"/\"")
		}
	}
}

// ParseRoomCIDR reads a bypass CIDR; a bare address is its /32 or /128.
func ParseRoomCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Masked(), nil
}

func validHeaderName(h string) bool {
	if h == "" || len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
