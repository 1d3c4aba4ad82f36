//go:build race

package stock

// sync.Pool drops items at random under the race detector.
const raceEnabled = true
