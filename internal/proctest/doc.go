// Package proctest runs a server binary as a child process for tests, the
// part that redistest and chtest share: free loopback ports, a start that
// polls the server until it is ready (or has died, or a deadline passed),
// a fresh port pick when another process took the one picked, and the
// Stop/Start/Pause/Resume/Close lifecycle of the child.
//
// A child gets Pdeathsig (on Linux): it is killed when the test binary dies
// without running its cleanups (a panic in another goroutine, go test
// -timeout), so no orphaned server keeps its ports.
package proctest
