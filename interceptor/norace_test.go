//go:build !race

package interceptor_test

// raceEnabled: see race_test.go.
const raceEnabled = false
