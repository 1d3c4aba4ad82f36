package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/conf/field"
)

// Scenario is one bench/scenarios/*.yaml file: who arrives, what each
// shopper does, the sale they meet and the faults in between. Unknown keys
// are errors (field.Decode, like the edge's own config).
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`

	// Load shape.
	Mode        string        `yaml:"mode"`        // open (arrivals at a fixed rate) | closed (connections loop)
	Rate        float64       `yaml:"rate"`        // open: shoppers arriving per second
	Burst       int           `yaml:"burst"`       // open: shoppers arriving at once at the start, besides rate
	Duration    time.Duration `yaml:"duration"`    // arrivals (open) or loops (closed) stop after it
	Connections int           `yaml:"connections"` // generator connections (closed: also the shoppers at a time)
	Timeout     time.Duration `yaml:"timeout"`     // per request
	Drain       time.Duration `yaml:"drain"`       // after duration: let journeys in progress finish, at most this long
	Tick        time.Duration `yaml:"tick"`        // open: pacing granularity (arrivals released per tick)
	Preconnect  bool          `yaml:"preconnect"`  // open every connection (one status call each, not counted) before the start, as browsers already on the page have

	// The sale.
	Users     int           `yaml:"users"`      // shopper ids u0000001..; sessions signed lazily
	Products  int           `yaml:"products"`   // p1..pN
	Stock     int           `yaml:"stock"`      // per product
	Limit     int           `yaml:"limit"`      // units per shopper
	Quantity  int           `yaml:"quantity"`   // units per purchase
	SaleStart time.Duration `yaml:"sale_start"` // the sale opens this long after the load starts (0: open already)
	Price     string        `yaml:"price"`
	// Hot is the share of shoppers who go for p1, the others spread
	// evenly over the rest (0: every product alike).
	Hot float64 `yaml:"hot"`

	// What one shopper does, in order.
	Steps []Step `yaml:"steps"`

	Faults Faults `yaml:"faults"`

	// Failover runs the sale on a Redis Cluster behind several edges and
	// fails the hot product's master over mid-run (failover.go).
	Failover *Failover `yaml:"failover"`

	// Fleet measures the same load on 1, 2, 3 … edges, each on a fresh
	// sale on a Redis Cluster (fleet.go).
	Fleet *Fleet `yaml:"fleet"`

	// WaitingRoom runs one sale behind the edge's waiting room on several
	// edges (waitingroom.go); its shoppers' steps are fixed (join, poll,
	// token, do), so steps is not read.
	WaitingRoom *Room `yaml:"waiting_room"`

	// RouteRoom runs two route rooms (a cap and a rate) on several edges
	// in front of a loopback origin (routeroom.go); steps is not read.
	RouteRoom *RouteRoomBench `yaml:"route_room"`

	// Nemesis plays random fault schedules over a fleet and checks every
	// promise from outside (nemesis.go).
	Nemesis *Nemesis `yaml:"nemesis"`

	// Soak runs the nemesis fleet without faults for a long time and
	// samples what could grow without bound (soak.go).
	Soak *Soak `yaml:"soak"`

	// Quick is the -quick run's overrides, as -set key=value pairs
	// (applied before any -set).
	Quick map[string]string `yaml:"quick"`

	// Edge is YAML merged over the edge config bench writes (maps merge,
	// lists replace), e.g. to change a filter or redis.max_flush_delay.
	Edge map[string]any `yaml:"edge"`
}

// Step is one call of a shopper's journey.
type Step struct {
	Call   string        `yaml:"call"`   // page | status | token | do | result | origin
	Think  time.Duration `yaml:"think"`  // pause after the previous answer (first step: after arrival)
	Repeat int           `yaml:"repeat"` // status/result/origin: at most this many calls (default 1)
	Every  time.Duration `yaml:"every"`  // pause between repeats (default 1s)
	Until  string        `yaml:"until"`  // status: "active" stops polling once the sale is open; result: "done" once not pending
	Path   string        `yaml:"path"`   // origin: path, "{product}" replaced (default /items/{product})
	Prob   float64       `yaml:"prob"`   // the fraction of shoppers making this step (default 1)
}

// Faults are injected by TCP delay proxies that bench puts between the
// edge and Redis / the origin.
type Faults struct {
	Redis  *Fault `yaml:"redis"`
	Origin *Fault `yaml:"origin"`
}

// Fault delays every chunk of bytes by Latency plus a uniform jitter, and
// every StallEvery holds all traffic for StallFor (longer than the edge's
// timeout: the calls time out).
type Fault struct {
	Latency    time.Duration `yaml:"latency"`
	Jitter     time.Duration `yaml:"jitter"`
	StallEvery time.Duration `yaml:"stall_every"`
	StallFor   time.Duration `yaml:"stall_for"`
}

// Failover is the failover scenario's event: at At after the load starts,
// p1's master fails over onto a replica that lags it (the replica frozen,
// tens of MB written to the master, the master killed, the replica
// promoted).
type Failover struct {
	At      time.Duration `yaml:"at"`      // after the load starts
	Edges   int           `yaml:"edges"`   // cmd/proxy edges sharing the load (default 2)
	Timeout time.Duration `yaml:"timeout"` // how long the promotion may take (default 30s)
}

// Call names, also the endpoint names of the report.
var callNames = []string{"page", "status", "token", "do", "result", "origin"}

func defaultScenario() Scenario {
	return Scenario{
		Mode: "open", Duration: 20 * time.Second, Connections: 256, Timeout: 5 * time.Second,
		Drain: 15 * time.Second, Tick: time.Millisecond,
		Users: 1_000_000, Products: 10, Stock: 1000, Limit: 1, Quantity: 1, Price: "99.00",
	}
}

// scenarioDir is where named scenarios live, relative to the module root.
const scenarioDir = "bench/scenarios"

// resolveScenario turns "normal" into bench/scenarios/normal.yaml; a path
// (with a slash or a .yaml suffix) is taken as it is.
func resolveScenario(root, name string) string {
	if strings.ContainsRune(name, '/') || strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") {
		return name
	}
	return filepath.Join(root, scenarioDir, name+".yaml")
}

// listScenarios names the files in bench/scenarios.
func listScenarios(root string) []string {
	m, _ := filepath.Glob(filepath.Join(root, scenarioDir, "*.yaml"))
	var out []string
	for _, p := range m {
		out = append(out, strings.TrimSuffix(filepath.Base(p), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// loadScenario reads, decodes (strictly), applies key=value overrides and
// validates a scenario file.
func loadScenario(path string, overrides []string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("scenario %s: no such file", path)
		}
		return nil, err
	}
	return parseScenario(data, path, overrides)
}

func parseScenario(data []byte, source string, overrides []string) (*Scenario, error) {
	sc := defaultScenario()
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("scenario %s: %v", source, err)
	}
	if errs := field.Decode(&root, &sc); len(errs) > 0 {
		return nil, fmt.Errorf("scenario %s: %w", source, lineErrors(&root, errs))
	}
	for _, o := range overrides {
		node, err := overrideNode(o)
		if err != nil {
			return nil, err
		}
		if errs := field.Decode(node, &sc); len(errs) > 0 {
			return nil, fmt.Errorf("-set %s: %w", o, errs)
		}
	}
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(source), filepath.Ext(source))
	}
	if errs := sc.validate(); len(errs) > 0 {
		return nil, fmt.Errorf("scenario %s: %w", source, lineErrors(&root, errs))
	}
	return &sc, nil
}

// quickSets are the scenario's quick: overrides as -set arguments, in
// key order.
func (sc *Scenario) quickSets() []string {
	var out []string
	for _, k := range sortedStrings(sc.Quick) {
		out = append(out, k+"="+sc.Quick[k])
	}
	return out
}

func sortedStrings(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func lineErrors(root *yaml.Node, errs field.Errors) field.Errors {
	for i := range errs {
		if errs[i].Line == 0 {
			errs[i].Line = field.Line(root, errs[i].Path)
		}
	}
	return errs
}

// overrideNode turns "a.b=v" into the YAML mapping {a: {b: v}}.
func overrideNode(kv string) (*yaml.Node, error) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return nil, fmt.Errorf("-set %q: want key=value (e.g. rate=500, faults.redis.latency=2ms)", kv)
	}
	var val yaml.Node
	if err := yaml.Unmarshal([]byte(v), &val); err != nil || len(val.Content) == 0 {
		val = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
	} else {
		val = *val.Content[0]
	}
	node := &val
	parts := strings.Split(k, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		node = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: parts[i]}, node}}
	}
	return node, nil
}

func (sc *Scenario) validate() field.Errors {
	var errs field.Errors
	switch sc.Mode {
	case "open":
		if sc.Rate <= 0 && sc.Burst <= 0 && sc.WaitingRoom == nil && sc.RouteRoom == nil {
			errs.Add("rate", "open mode needs rate > 0 or burst > 0")
		}
		if sc.Rate < 0 {
			errs.Add("rate", "must not be negative")
		}
	case "closed":
	default:
		errs.Add("mode", "must be open or closed, not %q", sc.Mode)
	}
	if sc.Burst < 0 {
		errs.Add("burst", "must not be negative")
	}
	if sc.Duration <= 0 && !(sc.Mode == "open" && sc.Rate == 0) {
		errs.Add("duration", "must be > 0")
	}
	if sc.Duration > time.Hour {
		errs.Add("duration", "at most 1h (keep every run bounded)")
	}
	if sc.Connections < 1 || sc.Connections > 20000 {
		errs.Add("connections", "must be 1..20000")
	}
	if sc.Timeout <= 0 {
		errs.Add("timeout", "must be > 0")
	}
	if sc.Drain < 0 || sc.Drain > 10*time.Minute {
		errs.Add("drain", "must be 0..10m")
	}
	if sc.Tick <= 0 || sc.Tick > time.Second {
		errs.Add("tick", "must be > 0 and at most 1s")
	}
	if sc.Users < 1 || sc.Users > 100_000_000 {
		errs.Add("users", "must be 1..100000000")
	}
	if sc.Products < 1 || sc.Products > 10000 {
		errs.Add("products", "must be 1..10000")
	}
	if sc.Stock < 0 {
		errs.Add("stock", "must not be negative")
	}
	if sc.Limit < 1 {
		errs.Add("limit", "must be >= 1")
	}
	if sc.Quantity < 1 || sc.Quantity > sc.Limit {
		errs.Add("quantity", "must be 1..limit (%d)", sc.Limit)
	}
	if sc.SaleStart < 0 {
		errs.Add("sale_start", "must not be negative")
	}
	if sc.Hot < 0 || sc.Hot >= 1 {
		errs.Add("hot", "must be in [0, 1): the share of shoppers going for p1")
	}
	if fo := sc.Failover; fo != nil {
		if fo.Edges == 0 {
			fo.Edges = 2
		}
		if fo.Timeout == 0 {
			fo.Timeout = 30 * time.Second
		}
		if fo.At <= 0 || fo.At >= sc.Duration {
			errs.Add("failover.at", "must be within the load (0 < at < duration %v)", sc.Duration)
		}
		if fo.Edges < 1 || fo.Edges > 4 {
			errs.Add("failover.edges", "must be 1..4")
		}
		if fo.Timeout < 0 {
			errs.Add("failover.timeout", "must not be negative")
		}
		if sc.Faults.Redis != nil {
			errs.Add("faults.redis", "not with failover (the edges talk to the cluster directly)")
		}
	}
	if len(sc.Steps) == 0 && sc.WaitingRoom == nil && sc.RouteRoom == nil && sc.Nemesis == nil {
		errs.Add("steps", "at least one step")
	}
	for i := range sc.Steps {
		s := &sc.Steps[i]
		p := fmt.Sprintf("steps[%d]", i)
		if !contains(callNames, s.Call) {
			errs.Add(p+".call", "unknown call %q (one of %s)", s.Call, strings.Join(callNames, ", "))
		}
		if s.Repeat == 0 {
			s.Repeat = 1
		}
		if s.Repeat < 0 || s.Repeat > 10000 {
			errs.Add(p+".repeat", "must be 1..10000")
		}
		if s.Every == 0 {
			s.Every = time.Second
		}
		if s.Every < 0 || s.Think < 0 {
			errs.Add(p, "every and think must not be negative")
		}
		switch {
		case s.Until == "":
		case s.Until == "active" && s.Call == "status":
		case s.Until == "done" && s.Call == "result":
		default:
			errs.Add(p+".until", "%q does not apply to %s (status: active, result: done)", s.Until, s.Call)
		}
		if s.Path != "" && s.Call != "origin" {
			errs.Add(p+".path", "only for call: origin")
		}
		if s.Call == "origin" && s.Path == "" {
			s.Path = "/items/{product}"
		}
		if s.Path != "" && !strings.HasPrefix(s.Path, "/") {
			errs.Add(p+".path", "must start with /")
		}
		if s.Prob == 0 {
			s.Prob = 1
		}
		if s.Prob < 0 || s.Prob > 1 {
			errs.Add(p+".prob", "must be in (0, 1]")
		}
	}
	for _, f := range []struct {
		name string
		f    *Fault
	}{{"faults.redis", sc.Faults.Redis}, {"faults.origin", sc.Faults.Origin}} {
		if f.f == nil {
			continue
		}
		if f.f.Latency < 0 || f.f.Jitter < 0 || f.f.StallEvery < 0 || f.f.StallFor < 0 {
			errs.Add(f.name, "durations must not be negative")
		}
		if (f.f.StallEvery > 0) != (f.f.StallFor > 0) {
			errs.Add(f.name, "stall_every and stall_for go together")
		}
		if f.f.StallEvery > 0 && f.f.StallFor >= f.f.StallEvery {
			errs.Add(f.name+".stall_for", "must be shorter than stall_every")
		}
	}
	sc.validateFleet(&errs)
	sc.validateRoom(&errs)
	sc.validateRouteRoom(&errs)
	sc.validateNemesis(&errs)
	sc.validateSoak(&errs)
	return errs
}

func (sc *Scenario) has(call string) bool {
	for _, s := range sc.Steps {
		if s.Call == call {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
