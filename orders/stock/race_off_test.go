//go:build !race

package stock

const raceEnabled = false
