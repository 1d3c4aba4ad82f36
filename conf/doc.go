// Package conf is the edge's configuration as data: it parses edge.yaml
// strictly (unknown keys are errors), fills defaults and validates every
// field (errors name the field path and the line). It imports nothing of
// the edge: the proxy compiles a loaded Document into the snapshot it
// serves with.
//
// The rule: every section of edge.yaml has its type, defaults and
// validation in conf, one file per section (static.go, upstream.go,
// redis.go, kafka.go, orders.go, clickhouse.go, auth.go, sale.go,
// events.go, payments.go, activities.go, tls.go for listen.tls, admin.go;
// the small ones, listen, log, real_ip, reload and filters, in config.go
// and load.go); the package that owns the behaviour reads its section from
// conf and builds its runtime objects from it (static.New, upstream's
// Manager.Build, catalog.Build, push.New). The one exception is a filter's
// own params: the filter types are an open registry, so conf keeps them as
// a yaml.Node and the filter registry decodes them per type with
// field.Decode, as strictly as the rest.
//
// Defaults are conf's alone, given in one way: the document is decoded
// over preset (listen, admin, log, real_ip, reload: a zero written there
// stays and is validated), then one pass, fill, gives every other setting
// left out or written as zero its default, fills list items and derives
// what depends on other fields. Defaults returns the result for a document
// that sets nothing; a section's WithDefaults gives the same to a section
// built in code.
//
// One rule for constructors whose config carries edge.yaml settings
// (stock.Open's Options, push.New, broker.NewPublisher and NewRelay,
// consumer.New): a zero setting takes conf's default, read through the
// section's WithDefaults, as a file that leaves it out does; a setting
// that is set but invalid (a negative duration, a batch above its limit)
// is refused, the error naming the field and its key. A zero that is one
// of a setting's values stays (events.max_streams: automatic,
// redis.wait_replicas: off, the consumer's BatchTimeMax: fixed). Settings
// edge.yaml does not have (a produce request's size, retry backoffs) keep
// their defaults in their constructor, which is the only place that knows
// them; what a constructor is wired with (a store, a publisher, a render
// function) is refused when missing. Filling rather than refusing a zero
// is the rule because a caller built in code (a test, bench) then gets the
// edge's behaviour without restating conf's numbers, and no constructor
// holds a second copy of a default.
//
// edge.yaml writes out the defaults to document them: every value in it
// equals conf's default for its key unless its line, or the comment line
// above the key, says "not the default:" and why. defaults_test.go
// (TestEdgeYAMLWritesTheDefaults) holds the file to that; it compares
// list items (filters, pools, routes, sales, certificates) with the
// defaults conf gives an item with the same identifying keys, and says
// which values it cannot compare: a filter's own params and the defaults
// a sale's builder gives (activities[].limit, the waiting room's timings),
// which live where the admin API's sales are built too.
//
// A field that holds a secret (a password, a token, a signing key) is
// tagged `secret:"true"`: /admin/config shows it as REDACTED, whatever its
// shape (a string, each item of a list). The proxy's tests walk the whole
// Config type and fail on a field whose name looks secret but is not
// tagged.
package conf
