//go:build race

package upstream

// raceEnabled skips allocation tests: the race detector makes sync.Pool
// drop items on purpose, so pooled objects get allocated again.
const raceEnabled = true
