package field

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Decode decodes node into out (a pointer) strictly: every mapping key must
// name a field (by its yaml tag), and every problem is reported with its path
// relative to node and its line. Keys listed in skip are accepted and ignored
// at the top level (a filter's common keys, decoded by someone else).
// Values already in out are kept where the document is silent, so callers
// pre-fill defaults before decoding.
func Decode(node *yaml.Node, out any, skip ...string) Errors {
	var errs Errors
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		panic("field.Decode: out must be a non-nil pointer")
	}
	decodeValue(node, v.Elem(), "", skip, &errs)
	return errs
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

func decodeValue(node *yaml.Node, v reflect.Value, path string, skip []string, errs *Errors) {
	if node == nil {
		return
	}
	if node.Kind == yaml.DocumentNode {
		if len(node.Content) == 0 {
			return
		}
		node = node.Content[0]
	}
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	// Types that decode themselves (and leaves such as time.Duration) go to yaml.
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		decodeLeaf(node, v, path, errs)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if node.Tag == "!!null" {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		decodeValue(node, v.Elem(), path, nil, errs)
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			if node.Tag == "!!null" {
				return
			}
			*errs = append(*errs, Error{Path: path, Line: node.Line, Msg: "expected a mapping"})
			return
		}
		decodeStruct(node, v, path, skip, errs)
	case reflect.Slice:
		if node.Tag == "!!null" {
			v.SetZero()
			return
		}
		if node.Kind != yaml.SequenceNode {
			*errs = append(*errs, Error{Path: path, Line: node.Line, Msg: "expected a list"})
			return
		}
		s := reflect.MakeSlice(v.Type(), len(node.Content), len(node.Content))
		for i, item := range node.Content {
			decodeValue(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i), nil, errs)
		}
		v.Set(s)
	case reflect.Map:
		if node.Tag == "!!null" {
			return
		}
		if node.Kind != yaml.MappingNode {
			*errs = append(*errs, Error{Path: path, Line: node.Line, Msg: "expected a mapping"})
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			k := reflect.New(v.Type().Key()).Elem()
			decodeLeaf(node.Content[i], k, path, errs)
			val := reflect.New(v.Type().Elem()).Elem()
			decodeValue(node.Content[i+1], val, Join(path, node.Content[i].Value), nil, errs)
			v.SetMapIndex(k, val)
		}
	case reflect.Interface:
		decodeLeaf(node, v, path, errs)
	default:
		decodeLeaf(node, v, path, errs)
	}
}

func decodeStruct(node *yaml.Node, v reflect.Value, path string, skip []string, errs *Errors) {
	fields := structFields(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		name := key.Value
		kpath := Join(path, name)
		if seen[name] {
			*errs = append(*errs, Error{Path: kpath, Line: key.Line, Msg: "duplicate key"})
			continue
		}
		seen[name] = true
		idx, ok := fields[name]
		if !ok {
			if contains(skip, name) {
				continue
			}
			*errs = append(*errs, Error{Path: kpath, Line: key.Line, Msg: "unknown key" + suggest(name, fields)})
			continue
		}
		decodeValue(val, v.FieldByIndex(idx), kpath, nil, errs)
	}
}

func decodeLeaf(node *yaml.Node, v reflect.Value, path string, errs *Errors) {
	if node.Kind == yaml.MappingNode || node.Kind == yaml.SequenceNode {
		switch v.Kind() {
		case reflect.Interface, reflect.Struct:
		default:
			if !(v.CanAddr() && v.Addr().Type().Implements(unmarshalerType)) {
				*errs = append(*errs, Error{Path: path, Line: node.Line, Msg: "expected a single value"})
				return
			}
		}
	}
	if err := node.Decode(v.Addr().Interface()); err != nil {
		*errs = append(*errs, Error{Path: path, Line: node.Line, Msg: cleanYAMLError(err, node)})
	}
}

// cleanYAMLError turns yaml.v3's "line 3: cannot unmarshal !!str `abc` into int"
// into "cannot use "abc" as int": the path and line are ours already.
func cleanYAMLError(err error, node *yaml.Node) string {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "line ") {
		msg = msg[i+2:]
	}
	if i := strings.Index(msg, " into "); i >= 0 && strings.HasPrefix(msg, "cannot unmarshal") {
		return fmt.Sprintf("cannot use %q as %s", node.Value, strings.TrimPrefix(msg[i+6:], "time."))
	}
	return msg
}

func structFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			for k, idx := range structFields(f.Type) {
				out[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = []int{i}
	}
	return out
}

func suggest(name string, fields map[string][]int) string {
	best, bestD := "", 3
	for k := range fields {
		if d := distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance, small strings only.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Line finds the line of path (as produced by Decode/Join) inside node, or 0.
func Line(node *yaml.Node, path string) int {
	n := node
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	for _, part := range splitPath(path) {
		if n == nil {
			break
		}
		if part.index >= 0 {
			if n.Kind != yaml.SequenceNode || part.index >= len(n.Content) {
				break
			}
			n = n.Content[part.index]
			line = n.Line
			continue
		}
		if n.Kind != yaml.MappingNode {
			break
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == part.key {
				next = n.Content[i+1]
				line = n.Content[i].Line
				break
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

type pathPart struct {
	key   string
	index int
}

func splitPath(path string) []pathPart {
	var parts []pathPart
	for _, seg := range strings.Split(path, ".") {
		for seg != "" {
			open := strings.IndexByte(seg, '[')
			if open < 0 {
				parts = append(parts, pathPart{key: seg, index: -1})
				break
			}
			if open > 0 {
				parts = append(parts, pathPart{key: seg[:open], index: -1})
			}
			end := strings.IndexByte(seg[open:], ']')
			if end < 0 {
				break
			}
			var idx int
			fmt.Sscanf(seg[open+1:open+end], "%d", &idx)
			parts = append(parts, pathPart{index: idx})
			seg = seg[open+end+1:]
		}
	}
	return parts
}
