//go:build race

package guard_test

// raceEnabled says that the tests run under the race detector: the
// scenarios whose figures are statistics over many calls, or a heap's
// growth, skip there (CI runs them without it, in the README's test
// command), their concurrency being the other tests' to watch.
const raceEnabled = true
