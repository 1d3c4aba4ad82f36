//go:build race

package e2e

// pushRace caps the push load test: the race detector allows at most 8128
// live goroutines, and each waiting shopper here is one.
const pushRace = true
