//go:build race

package ptoken

// raceEnabled skips the allocation tests: under the race detector sync.Pool
// drops items on purpose, so pooled state is rebuilt and allocates.
const raceEnabled = true
