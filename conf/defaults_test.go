package conf

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/conf/field"
)

// notDefault marks a value of edge.yaml that is not conf's default, on the
// value's line or the comment line right above its key, followed by why
// (and, if the file likes, the default in parentheses before the colon):
//
//	data_dir: data   # not the default (in memory): the demo keeps its state
const notDefault = "not the default:"

// itemKeys are the keys that make a list item what it is (a filter's type,
// a pool's name and servers, a sale's product): they have no default, so
// the defaults document is made of the file's list items with these keys
// only, and everything else an item writes is compared with the defaults
// conf gives such an item. Paths use [] for "every item".
var itemKeys = []string{
	"listen.tls.certificates[].cert_file",
	"listen.tls.certificates[].key_file",
	"listen.tls.certificates[].names",
	"filters[].type",
	"upstreams.pools[].name",
	"upstreams.pools[].servers",
	"upstreams.routes[].host",
	"upstreams.routes[].pool",
	"upstreams.routes[].cache.ttl",
	"activities[].product_id",
	"activities[].name",
	"activities[].price",
	"activities[].image",
	"activities[].stock",
	"activities[].start",
	"activities[].end",
}

// probes are the settings whose defaults conf gives only once another one
// is set: a pool's health check timings are filled when health.path is.
// The file documents them with the path empty, so they are compared with
// the defaults of a document where the probe is set (and the probed key
// itself with the plain defaults).
var probes = map[string]string{
	"upstreams.pools[].health.path": "/probe",
}

// elsewhere are the keys whose defaults conf does not hold, so the test
// cannot compare them: a sale's limit and its waiting room's settings
// come from the admin API too, which never passes through conf, and their
// zero is defaulted where the sale is built. A filter's own params (every
// key of a filter but type, name, enabled, dry_run and scope) are the
// filter's: the filter registry decodes them over each filter's defaults
// (package filters), which conf cannot import. The test logs every value
// it skipped.
var elsewhere = map[string]string{
	"activities[].limit":                         "sale/catalog.Build (0 is 1)",
	"activities[].waiting_room.prequeue_opens":   "sale/room.DefaultPrequeueOpens",
	"activities[].waiting_room.admit_per_minute": "sale/room.DefaultAdmitPerMinute",
	"activities[].waiting_room.session":          "sale/room.DefaultSession",
	"activities[].waiting_room.order":            `sale/room.Build ("" is lottery_then_fifo)`,
}

const filterParams = "the filter's own param: package filters decodes it over the filter's defaults"

// TestEdgeYAMLWritesTheDefaults: every value written in the shipped
// edge.yaml is conf's default for its key, unless its line (or the comment
// line above its key) says "not the default:" and why. conf's fill is the
// one place that defines a default; the file repeats them to document
// them, and this keeps the two from drifting apart.
func TestEdgeYAMLWritesTheDefaults(t *testing.T) {
	problems, skipped := checkDefaults(t, DefaultYAML)
	for _, p := range problems {
		t.Error(p)
	}
	for _, s := range skipped {
		t.Log("not compared: " + s)
	}
}

// TestDefaultsCheckCatchesDrift: the check above fails on a value that is
// not the default and says nothing, on a list the default has empty, and
// on a marker without a reason; it passes once the marker says why.
func TestDefaultsCheckCatchesDrift(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		want           string // "" = no problem
	}{
		{"changed value", "max_batch: 256 ", "max_batch: 512 ", "redis.max_batch: 512 is not conf's default (256)"},
		{"changed duration", "  timeout: 200ms ", "  timeout: 300ms ", "redis.timeout: 300ms is not conf's default (200ms)"},
		{"list item setting", "      max_conns: 512 ", "      max_conns: 64 ", "upstreams.pools[0].max_conns: 64 is not conf's default (512)"},
		{"probed default", "        rise: 2 ", "        rise: 5 ", "upstreams.pools[0].health.rise: 5 is not conf's default (2)"},
		{"marker without reason", "# not the default: this file is edge 1", "# not the default: \n# this file is edge 1", "node_id: 1 is not conf's default (0)"},
		{"marker below", "# not the default: this file is edge 1 of a fleet; give every edge its own\nnode_id: 1\n", "node_id: 1\n# not the default: a reason on the wrong line\n", "node_id: 1 is not conf's default (0)"},
		{"list without reason", "# not the default: conf has no sale; these are the demo's three\n", "", "activities: 3 items, conf's default has none"},
		{"marker on the line", "max_batch: 256 ", "max_batch: 512 # not the default: a test's reason\n ", ""},
		{"marker above", "  max_batch: 256 ", "  # not the default: a test's reason\n  max_batch: 512 ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := string(DefaultYAML)
			if !strings.Contains(src, tc.old) {
				t.Fatalf("edge.yaml has no %q any more: update the test", tc.old)
			}
			src = strings.Replace(src, tc.old, tc.new, 1)
			problems, _ := checkDefaults(t, []byte(src))
			if tc.want == "" {
				if len(problems) > 0 {
					t.Fatalf("problems: %q", problems)
				}
				return
			}
			if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
				t.Fatalf("problems %q, want one with %q", problems, tc.want)
			}
		})
	}
}

// checkDefaults compares every value written in src with conf's default
// for its key; it returns what differs without saying why, and what it
// could not compare.
func checkDefaults(t *testing.T, src []byte) (problems, skipped []string) {
	t.Helper()
	if _, err := Parse(src, "edge.yaml"); err != nil {
		t.Fatalf("the file does not load: %v", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		t.Fatal(err)
	}
	doc := root.Content[0]
	defaults := func(probe map[string]string) reflect.Value {
		b, err := yaml.Marshal(reduce(doc, "", probe))
		if err != nil {
			t.Fatal(err)
		}
		d, err := Parse(b, "defaults")
		if err != nil {
			t.Fatalf("the defaults document (the list items' own keys, itemKeys) does not load: %v\n%s", err, b)
		}
		return reflect.ValueOf(d.Config).Elem()
	}
	c := &defaultsCheck{lines: strings.Split(string(src), "\n")}
	c.walk(doc, nil, "", "", defaults(nil), defaults(probes))
	return c.problems, c.skipped
}

// reduce is n with only the keys that lead to itemKeys (the items' own
// keys), and probe's settings added; pat is n's path with [] for indices.
func reduce(n *yaml.Node, pat string, probe map[string]string) *yaml.Node {
	switch n.Kind {
	case yaml.SequenceNode:
		out := &yaml.Node{Kind: yaml.SequenceNode}
		for _, item := range n.Content {
			r := reduce(item, pat+"[]", probe)
			if r == nil {
				r = &yaml.Node{Kind: yaml.MappingNode}
			}
			out.Content = append(out.Content, r)
		}
		return out
	case yaml.MappingNode:
		out := &yaml.Node{Kind: yaml.MappingNode}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(pat, k.Value)
			switch {
			case slices.Contains(itemKeys, p):
				out.Content = append(out.Content, k, v)
			case leadsTo(p):
				if r := reduce(v, p, probe); r != nil && (r.Kind != yaml.MappingNode || len(r.Content) > 0) {
					out.Content = append(out.Content, k, r)
				}
			}
		}
		for key, value := range probe {
			if rest, ok := strings.CutPrefix(key, pat+"."); ok && strings.HasSuffix(pat, "[]") && !strings.Contains(rest, "[]") {
				setPath(out, strings.Split(rest, "."), value)
			}
		}
		if pat != "" && len(out.Content) == 0 {
			return nil
		}
		return out
	}
	return nil
}

// leadsTo reports whether an item key lies under p.
func leadsTo(p string) bool {
	for _, k := range itemKeys {
		if strings.HasPrefix(k, p+".") || strings.HasPrefix(k, p+"[]") {
			return true
		}
	}
	return false
}

func setPath(m *yaml.Node, keys []string, value string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == keys[0] {
			if len(keys) > 1 {
				setPath(m.Content[i+1], keys[1:], value)
			}
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Value: keys[0]}
	if len(keys) == 1 {
		m.Content = append(m.Content, k, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
		return
	}
	v := &yaml.Node{Kind: yaml.MappingNode}
	setPath(v, keys[1:], value)
	m.Content = append(m.Content, k, v)
}

func join(pat, key string) string {
	if pat == "" {
		return key
	}
	return pat + "." + key
}

type defaultsCheck struct {
	lines             []string
	problems, skipped []string
}

// walk compares node, written under key at path, with the defaults plain
// and probed (the same Go value in the two defaults documents).
func (c *defaultsCheck) walk(node, key *yaml.Node, path, pat string, plain, probed reflect.Value) {
	if where, ok := elsewhere[pat]; ok {
		c.skipped = append(c.skipped, fmt.Sprintf("%s: %s (default in %s)", path, show(node), where))
		return
	}
	if _, ok := probes[pat]; ok {
		probed = plain
	}
	for probed.Kind() == reflect.Pointer && node.Kind == yaml.MappingNode {
		if probed.IsNil() {
			c.problems = append(c.problems, fmt.Sprintf("%s: conf gives it no defaults unless it is set: add the keys that make it to itemKeys", path))
			return
		}
		plain, probed = deref(plain), probed.Elem()
	}
	switch {
	case node.Kind == yaml.MappingNode && probed.Kind() == reflect.Struct && !isLeaf(probed):
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			p, pt := join(path, k.Value), join(pat, k.Value)
			fq, ok := fieldByTag(probed, k.Value)
			if !ok {
				if pat == "filters[]" {
					c.skipped = append(c.skipped, fmt.Sprintf("%s: %s (%s)", p, show(v), filterParams))
					continue
				}
				c.problems = append(c.problems, fmt.Sprintf("%s: no such setting in conf's defaults", p))
				continue
			}
			fp, _ := fieldByTag(deref(plain), k.Value)
			c.walk(v, k, p, pt, fp, fq)
		}
	case node.Kind == yaml.SequenceNode && probed.Kind() == reflect.Slice && probed.Type().Elem().Kind() == reflect.Struct:
		if probed.Len() != len(node.Content) {
			c.problems = append(c.problems, fmt.Sprintf("%s: %d items, the defaults document %d (itemKeys)", path, len(node.Content), probed.Len()))
			return
		}
		// conf gives no list of items a default item: a list written here
		// is the file's choice.
		if len(node.Content) > 0 && !c.marked(key) {
			c.problems = append(c.problems, fmt.Sprintf("%s: %d items, conf's default has none: say why on its line or the line above (# %s ...)", path, len(node.Content), notDefault))
		}
		for i, item := range node.Content {
			c.walk(item, nil, fmt.Sprintf("%s[%d]", path, i), pat+"[]", plain.Index(i), probed.Index(i))
		}
	default:
		got := reflect.New(probed.Type())
		if errs := field.Decode(node, got.Interface()); len(errs) > 0 {
			c.problems = append(c.problems, fmt.Sprintf("%s: %v", path, errs))
			return
		}
		if equal(got.Elem(), probed) || c.marked(key) {
			return
		}
		c.problems = append(c.problems, fmt.Sprintf("%s: %s is not conf's default (%s): write the default, or say why on its line or the line above (# %s ...)",
			path, show(node), value(probed), notDefault))
	}
}

// marked reports whether the key's line, or the comment line right above
// it (not indented deeper than the key: a wrapped line comment of the
// setting before is not), says why the value is not the default.
func (c *defaultsCheck) marked(key *yaml.Node) bool {
	if key == nil {
		return false
	}
	has := markerRE.MatchString
	if has(c.lines[key.Line-1]) {
		return true
	}
	if key.Line < 2 {
		return false
	}
	above := c.lines[key.Line-2]
	hash := strings.Index(above, "#")
	return hash >= 0 && strings.TrimSpace(above[:hash]) == "" && hash < key.Column && has(above)
}

// markerRE finds the marker in a comment, with the default it differs from
// in parentheses if the file names it ("not the default (0, off): ..."),
// and a reason after it.
var markerRE = regexp.MustCompile(`#.*not the default( \([^)]*\))?: *\S`)

var unmarshaler = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// isLeaf: a struct that decodes itself is compared whole, except a
// filter, whose common keys are conf's and whose params are not.
func isLeaf(v reflect.Value) bool {
	return v.Type() != reflect.TypeOf(FilterConfig{}) && reflect.PointerTo(v.Type()).Implements(unmarshaler)
}

func deref(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	return v
}

func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	for i := 0; i < v.NumField(); i++ {
		tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		if tag == name && tag != "-" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// equal compares a decoded value with a default; an empty list is the
// default of a list that conf leaves nil.
func equal(a, b reflect.Value) bool {
	if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

func show(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	b, _ := yaml.Marshal(n)
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\n", " "))
}

func value(v reflect.Value) string {
	switch {
	case v.Kind() == reflect.Pointer && v.IsNil():
		return "absent"
	case v.Kind() == reflect.Pointer:
		return value(v.Elem())
	case v.Type() == reflect.TypeOf(time.Duration(0)):
		return shortDuration(v.Interface().(time.Duration))
	case v.Type() == reflect.TypeOf(MaxAge(0)):
		return shortDuration(time.Duration(v.Interface().(MaxAge)))
	case v.Kind() == reflect.String:
		return fmt.Sprintf("%q", v.String())
	}
	return fmt.Sprint(v.Interface())
}

// shortDuration writes 1h rather than 1h0m0s, as the file does.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// TestSectionWithDefaultsIsDefaults: a section built in code and given
// WithDefaults is what a file that leaves the section out loads as, so a
// constructor that fills its zero settings from it (doc.go) gets conf's
// defaults and no others.
func TestSectionWithDefaultsIsDefaults(t *testing.T) {
	d := Defaults()
	for name, pair := range map[string][2]any{
		"redis":  {RedisConfig{}.WithDefaults(), d.Redis},
		"kafka":  {KafkaConfig{}.WithDefaults(), d.Kafka},
		"orders": {OrdersConfig{}.WithDefaults(), d.Orders},
		"events": {EventsConfig{}.WithDefaults(), d.Events},
		"sale":   {SaleConfig{}.WithDefaults(), d.Sale},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("%s: WithDefaults gives %+v, Defaults %+v", name, pair[0], pair[1])
		}
	}
	// A derived default follows the field it derives from, as in a file.
	if r := (RedisConfig{Timeout: 3 * time.Second}).WithDefaults(); r.QueueTimeout != 3*time.Second {
		t.Errorf("queue_timeout with timeout 3s: %v, want 3s", r.QueueTimeout)
	}
}
