// Package edgetest starts flashgate edges in the test's own process: a
// config rendered from a base YAML and per-test overrides, loaded the way
// the binary loads it, and a proxy.Server on fresh loopback listeners that
// is shut down when the test ends. It also reads the event stream off the
// wire. The tests of e2e/, browser/ and push/ use it; each keeps its own
// base config, clients and assertions.
package edgetest
