// Package proxy is the edge server and the composition root of an edge
// process.
//
// The server (server.go) is the fasthttp listener for shoppers, the router
// (sale page, sale API behind the filter chain, everything else to the
// origin pools), the admin listener, and the holder of the current
// configuration snapshot, which reloads swap atomically. Neither listener
// lets fasthttp log what a client sent (fastlog.go); the admin listener
// refuses what a web page could send it (admin_guard.go), shows the
// config with its secrets redacted by structure (admin.go) and serves the
// Go profiler behind the same rules (admin_debug.go).
//
// Compile (compile.go) turns a loaded conf.Document into that Snapshot. It
// never starts anything: upstream health checks are activated and old state
// retired only after the new snapshot is in place, so a config that fails
// anywhere leaves the running edge untouched.
//
// wire.go is the one place where the long-lived parts are built and
// connected, in dependency order and complete at construction: the Redis
// store, the order pipeline (publisher, relay, consumer, order store), the
// push hub and the sale service. RunOrders and RunReconcile, the `proxy
// orders` and `proxy reconcile` subcommands, use the same constructors.
package proxy
