//go:build race

package interceptor_test

// raceEnabled says that the tests run under the race detector: the storms
// whose figures are statistics over thousands of calls skip there (CI runs
// them without it, in the README's test command), their concurrency being
// the other tests' to watch.
const raceEnabled = true
