//go:build !race

package guard_test

// raceEnabled: see race_test.go.
const raceEnabled = false
