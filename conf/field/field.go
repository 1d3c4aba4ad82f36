package field

import (
	"fmt"
	"strings"
)

// Error is one invalid setting. Path uses dots for keys and [i] for list
// items, e.g. "upstreams.pools[0].servers[1]". Line is 0 until conf fills it
// in from the YAML document.
type Error struct {
	Path string
	Line int
	Msg  string
}

func (e Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	}
	if e.Path == "" {
		return e.Msg
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

// Errors collects every problem of a document so an operator fixes them in
// one pass instead of one per reload attempt.
type Errors []Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// Err returns nil for an empty list so callers can `return errs.Err()`.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Add appends an error at path.
func (es *Errors) Add(path, format string, args ...any) {
	*es = append(*es, Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Nest appends others with prefix joined in front of their paths.
func (es *Errors) Nest(prefix string, others Errors) {
	for _, e := range others {
		e.Path = Join(prefix, e.Path)
		*es = append(*es, e)
	}
}

// Join joins a prefix and a relative path ("a", "b" -> "a.b"; "a", "[1]" -> "a[1]").
func Join(prefix, rel string) string {
	switch {
	case prefix == "":
		return rel
	case rel == "":
		return prefix
	case strings.HasPrefix(rel, "["):
		return prefix + rel
	default:
		return prefix + "." + rel
	}
}

// Index returns "name[i]".
func Index(name string, i int) string { return fmt.Sprintf("%s[%d]", name, i) }
