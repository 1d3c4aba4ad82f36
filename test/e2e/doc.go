// Package e2e holds the end-to-end tests of the sale path: real edges
// (proxy.Server, and once the real cmd/proxy binary) in front of a real
// redis-server, driven over HTTP on loopback the way shoppers drive them.
// It has no code of its own; everything is in the _test.go files.
//
// Each test starts its own redis-server (internal/redistest) and its own
// edges on 127.0.0.1:0, from a config file written to t.TempDir() (the base
// in helpers_test.go merged with per-test YAML overrides). Sessions are
// Bearer JWTs the tests sign with the edges' auth.secrets; every edge of a
// test shares the session and purchase-token secrets, as a fleet would.
// After each scenario the tests read Redis directly (stock keys, buyers'
// counts, outbox streams, INFO commandstats) rather than trusting the
// edge's own answers.
//
// What they prove, against the promises of docs/architecture.md:
//
//   - TestNoOversellUnderLoad: 200,000 purchase attempts from 2,000
//     concurrent buyers sell exactly the stock (in units, with quantities),
//     never above a shopper's limit, one outbox entry per 200, unique order
//     ids. -e2e.attempts and -e2e.buyers scale it.
//   - TestSoldOutCostsNoRedis: a sold-out product costs no script call and
//     almost no Redis command, on the edge that sold it and on another edge
//     (in-process and the real binary) that learns it within a second.
//   - TestRestartMidSaleKeepsStock: an edge restarted mid-sale, idle or
//     under load, continues with the stock and buyers Redis holds.
//   - TestRejections: forged, expired and alg-none sessions, replayed or
//     foreign purchase tokens, malformed bodies, closed sales: each gets the
//     contract's status and code and moves no stock; a refused token stays
//     usable.
//   - TestRedisDownDegradesFast: a dead or hung Redis gives 503 DEGRADED
//     within twice redis.timeout, the breaker (counting failed calls, not
//     attempts) opens and closes; a Redis that comes
//     back empty must not resurrect sold stock.
//   - TestAdminDegradeSwitch: the admin degrade switch, per product and
//     for all.
//   - TestCatalogAndDegradeSurviveRedisAndRestarts: a degrade set on one
//     edge holds on another and across its restart; an admin-created sale
//     survives Redis restarting empty (503 RECOVERING while it is rebuilt,
//     never 404) and sells exactly its stock; reconcile is clean.
//   - TestPartialStockIsNotSoldOut: a refusal for too large a quantity does
//     not flag the product sold out while units remain.
//   - TestFailover* (failover_*_test.go): Redis goes back in time or away
//     under load through two edge processes of the real binary, with a
//     shared broker and ClickHouse — restarted from a stale snapshot, a
//     Cluster master failed over onto a lagging replica, a Sentinel
//     failover onto a lagging replica, a Cluster master killed under ~90 %
//     of the traffic, restarted empty with sales created through the admin
//     API. Each checks against ClickHouse that no product stored more than
//     its stock, nobody holds more than the limit and every 200 is stored
//     once; `proxy reconcile` is clean; products on nodes that did not fail
//     are never closed, the others sell again within 10 s of Redis
//     answering. Each logs a timeline of the answers, second by second.
//   - TestFleet (fleet_*_test.go): the production layout — three edge
//     processes on a Redis Cluster, three Kafka brokers (replication
//     factor 3) and a ClickHouse cluster of two shards of two replicas.
//     One user hammering all three edges gets user_limit's documented
//     bound with policy redis (three times it with policy local); a sale
//     of 10 x 1,000 survives a broker stopped and started again
//     unnoticed, and an edge killed with orders only in its outbox:
//     exactly 10,000 stored, every 200 once, nobody over the limit, the
//     survivors relay the killed edge's outbox, reconcile clean.
//   - TestPrometheusAlerts (prometheus_test.go): Debian's Prometheus
//     scrapes two edge processes with the admin token and evaluates the
//     shipped deploy/prometheus rules (`for:` shortened): every panel of
//     deploy/grafana's dashboard returns series, every series the rules
//     name is scraped, a healthy fleet fires only the certificate alert
//     (its TLS edge's certificate is due in a day), and Redis stopped makes
//     FlashgateRedisDown go pending, then firing, then resolve once it
//     answers again; the Kafka broker's process killed and started again
//     does the same with FlashgateKafkaDown.
//
// Run with `go test ./e2e/` (redis-server must be installed: see
// scripts/test.sh); -short skips the load test.
package e2e
