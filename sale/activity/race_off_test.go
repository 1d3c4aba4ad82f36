//go:build !race

package activity

const raceEnabled = false
