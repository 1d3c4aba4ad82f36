// Command proxy runs a flashgate edge: `proxy -c conf/edge.yaml`.
//
// This package is the process only: flags (-c, -t like `nginx -t`,
// -version, -pprof), signals (SIGHUP reloads, SIGTERM/SIGINT drain and
// exit 0), the start-up check that data_dir is writable, and the
// subcommands `proxy orders`, `proxy reconcile` and `proxy health` (the
// Docker image's HEALTHCHECK, since its base has no curl), dispatched from
// one table (commands.go): an unknown subcommand or a stray argument prints
// the usage and exits 2, as nginx and git do. What the edge is
// made of, and how its parts are connected, is decided in one place,
// package proxy's composition root.
package main
