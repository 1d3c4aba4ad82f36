// Package deploy checks what deploy/ ships for operators, without starting
// an edge: the Prometheus rules pass `promtool check rules` and their own
// unit tests (`promtool test rules`, deploy/prometheus/flashgate.rules.test.yml),
// the example configuration passes `promtool check config`, the test copy
// of the rules (short `for:`, internal/promtest.Rules) differs from the
// shipped one in nothing else, every PromQL expression of the Grafana
// dashboard parses, and every flashgate_ series the rules and the dashboard
// name is one the code registers.
//
// test/e2e's TestPrometheusAlerts runs the same files against Debian's
// Prometheus scraping two real edges.
package deploy
