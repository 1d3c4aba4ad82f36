// Package redistest runs a real redis-server as a child process for tests.
//
// The sale's promises (never oversold, outbox written with the deduction,
// Redis may lose its memory) are properties of the real server's Lua engine
// and of what happens when it dies, so tests exercise /usr/bin/redis-server
// rather than a fake. Each server gets its own port on 127.0.0.1, its own
// temp directory and no persistence (no RDB snapshots, no AOF): Stop then
// Start on the same Server is exactly "Redis restarted and lost its memory".
//
// Install the binary with: apt-get install -y redis-server
package redistest
