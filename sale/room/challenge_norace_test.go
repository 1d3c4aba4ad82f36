//go:build !race

package room

const challengeRaceEnabled = false
