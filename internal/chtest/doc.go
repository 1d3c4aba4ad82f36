// Package chtest runs a real clickhouse-server as a child process for tests.
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
// Debian's 18.16.1 starts in ~0.2 s here. Install it with:
//
//	apt-get install -y clickhouse-server clickhouse-client
package chtest
