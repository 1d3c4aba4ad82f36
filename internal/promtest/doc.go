// Package promtest runs Debian's Prometheus (/usr/bin/prometheus) as a child
// process for tests, scraping real edges' admin listeners on loopback, and
// reads what it concluded through its HTTP API: alerts with their state
// (pending, firing), instant queries, the metric names it has seen.
//
// It also holds the two transformations the tests make of what deploy/
// ships, so that they test the shipped files and not a second hand-written
// copy: Rules rewrites every `for:` of a rules file (a test cannot wait
// minutes), and DashboardQueries lists every PromQL expression of a
// Grafana dashboard's panels.
//
// Install with: apt-get install -y prometheus (promtool comes with it).
package promtest
