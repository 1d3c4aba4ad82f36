// Command proxy runs a flashgate edge: `proxy -c conf/edge.yaml`.
//
// This package is the process only: flags (-c, -t like `nginx -t`,
// -version, -pprof), signals (SIGHUP reloads, SIGTERM/SIGINT drain and
// exit 0) and the subcommands `proxy orders` and `proxy reconcile`. What
// the edge is made of, and how its parts are connected, is decided in one
// place, package proxy's composition root.
package main
