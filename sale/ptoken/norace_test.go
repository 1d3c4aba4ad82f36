//go:build !race

package ptoken

const raceEnabled = false
