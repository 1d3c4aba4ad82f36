//go:build race

package room

// challengeRaceEnabled skips the allocation tests: under the race detector
// sync.Pool drops items on purpose, so pooled state is rebuilt and allocates.
const challengeRaceEnabled = true
