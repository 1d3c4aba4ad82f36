//go:build !race

package e2e

const pushRace = false
