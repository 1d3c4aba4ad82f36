//go:build race

package activity

const raceEnabled = true
