// Package chtest runs a real clickhouse-server as a child process for
// tests, alone or as a cluster.
//
// The order store's promises (a redelivered event never counts twice, a
// release replaces its order, nothing is lost while ClickHouse is down) are
// properties of the real server's ReplacingMergeTree and of what happens
// when it dies, so tests exercise /usr/sbin/clickhouse-server rather than a
// fake. Each server gets its own directory (data, tmp, user_files,
// format_schemas, logs), a config copied from /etc/clickhouse-server with
// those paths rewritten, free ports for the native, HTTP and interserver
// listeners, and listens on 127.0.0.1 only. Readiness is HTTP GET /ping.
//
// Unlike redistest, Stop then Start keeps the data: ClickHouse writes its
// parts to disk, so a stopped and restarted server is "ClickHouse was down
// for a while", not "ClickHouse lost its memory".
//
// NewTLS adds the secure native port (tcp_port_secure) with a given
// certificate, and optionally a CA every client certificate must chain to.
//
// NewCluster (and NewClusterWith, LaunchCluster for a TestMain) starts a
// cluster: one ZooKeeper (Debian's 3.8, run by java; ClickHouse 18.16 has
// no Keeper of its own) and Shards x Replicas servers whose configs name
// each other in remote_servers (internal_replication on), with {shard} and
// {replica} macros and distributed DDL, so that ON CLUSTER, Replicated and
// Distributed tables behave as on real hosts. Members are started in
// parallel once ZooKeeper serves, and are ready once their distributed DDL
// worker is on ZooKeeper (18.16 can crash on an ON CLUSTER statement sent
// before); Stop/Start of one member keeps its data. A failed test logs
// every member's error log.
//
// Debian's 18.16.1 starts in ~0.2 s here; a two-shard cluster with its
// ZooKeeper in ~0.5-1.5 s (ZooKeeper's JVM is most of it). Install them with:
//
//	apt-get install -y clickhouse-server clickhouse-client
//	apt-get install -y --no-install-recommends zookeeper
package chtest
