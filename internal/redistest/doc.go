// Package redistest runs a real redis-server as a child process for tests.
//
// The sale's promises (never oversold, outbox written with the deduction,
// Redis may lose its memory) are properties of the real server's Lua engine
// and of what happens when it dies, so tests exercise /usr/bin/redis-server
// rather than a fake. Each server gets its own port on 127.0.0.1, its own
// temp directory and no persistence (no RDB snapshots, no AOF): Stop then
// Start on the same Server is exactly "Redis restarted and lost its memory".
//
// NewPersistent is the other way Redis goes back in time: a server that
// restarts from its last snapshot (Save, Crash, Start), without the writes
// made after it.
//
// NewCluster runs a Redis Cluster of three masters and three replicas
// (created with redis-cli), for the failovers a standalone server cannot
// show: Kill a master and AwaitMaster its promoted replica, or LagFailover,
// a replica promoted while it lagged, so the cluster serves older values of
// keys that still exist. Slot and MasterOf say which node serves a key.
//
// Install the binaries with: apt-get install -y redis-server (redis-cli
// comes with it, in redis-tools)
package redistest
