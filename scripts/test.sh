#!/usr/bin/env bash
# Runs every test of flashgate on a fresh Debian machine: installs the real
# servers the tests start (each test starts its own on free loopback ports),
# then runs go vet and go test.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# internal/redistest's Sentinel kit starts /usr/bin/redis-sentinel (its own package on Debian).
[ -x /usr/bin/redis-sentinel ] || need+=(redis-sentinel)
# internal/chtest starts /usr/sbin/clickhouse-server (not on root's PATH everywhere).
{ command -v clickhouse-server || [ -x /usr/sbin/clickhouse-server ]; } >/dev/null 2>&1 || need+=(clickhouse-server clickhouse-client)
# internal/chtest's cluster kit runs Debian's ZooKeeper (ClickHouse 18.16 has no Keeper) with java.
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
# proxy's TLS tests check the edge's HTTPS listener with curl (OpenSSL).
command -v curl >/dev/null 2>&1 || need+=(curl)
# test/deploy checks deploy/prometheus with promtool, test/e2e's TestPrometheusAlerts runs
# /usr/bin/prometheus (internal/promtest); Debian's prometheus package ships both.
{ [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; } || need+=(prometheus)
# test/browser drives Debian's chromium (headless) at /usr/bin/chromium.
[ -x /usr/bin/chromium ] || need+=(chromium)
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

go vet ./...
# Unit and component tests first, packages in parallel. The end-to-end and
# browser suites put real load on real servers; on a 2-core machine they run
# after the rest, one package at a time, so that they measure the system and
# not the other packages competing for the cores.
heavy='flashgate/test/e2e|flashgate/test/browser'
go test -count=1 -timeout 12m $(go list ./... | grep -Ev "^($heavy)$") "$@"
go test -count=1 -timeout 12m -p 1 ./test/e2e/ ./test/browser/ "$@"
# The nemesis (bench/README.md, "The nemesis scenario"): two fixed fault
# schedules (seeds 112 and 127: edges killed, frozen and restarted with the
# clock 2 s behind, a consumer killed, one edge's Redis link cut, brokers
# and ClickHouse gone), each on a fresh fleet of three edges, a Redis
# Cluster, three brokers and ClickHouse, every promise checked from outside;
# ~2 min, exits 1 on any violation. Needs redis-server, redis-cli,
# clickhouse-server.
go run ./bench run -s nemesis -seeds 112,127 -duration 30s -q
