//go:build !race

package waitroom

const challengeRaceEnabled = false
