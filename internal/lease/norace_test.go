//go:build !race

package lease_test

// raceEnabled: see race_test.go.
const raceEnabled = false
