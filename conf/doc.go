// Package conf is the edge's configuration as data: it parses edge.yaml
// strictly (unknown keys are errors), fills defaults and validates every
// field (errors name the field path and the line). It imports nothing of
// the edge: the proxy compiles a loaded Document into the snapshot it
// serves with.
//
// The rule: every section of edge.yaml has its type, defaults and
// validation in conf, one file per section (static.go, upstream.go,
// sale.go, events.go, activities.go, orders.go; the small ones in
// config.go and load.go); the package that owns the behaviour reads its
// section from conf and builds its runtime objects from it (static.New,
// upstream's Manager.Build, activity.Build, push.New), taking the values
// as given. The one exception is a filter's own params: the filter types
// are an open registry, so conf keeps them as a yaml.Node and the filter
// registry decodes them per type with field.Decode, as strictly as the
// rest.
//
// Defaults are conf's alone, given in one way: the document is decoded
// over preset (listen, admin, log, real_ip, reload: a zero written there
// stays and is validated), then one pass, fill, gives every other setting
// left out or written as zero its default, fills list items and derives
// what depends on other fields. Defaults returns the result for a document
// that sets nothing; code and tests that build a section by hand start
// from it.
//
// A field that holds a secret (a password, a token, a signing key) is
// tagged `secret:"true"`: /admin/config shows it as REDACTED, whatever its
// shape (a string, each item of a list). The proxy's tests walk the whole
// Config type and fail on a field whose name looks secret but is not
// tagged.
package conf
