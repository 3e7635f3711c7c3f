package plan_test

import (
	"fmt"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/plan"
)

// The schedule of the derivation's first example: Initial 1 s, Multiplier 2,
// no jitter and a cap far away. Retry n waits 2^(n-1) s and starts at
// 2^n - 1 s.
func ExampleSchedule() {
	p := grpcbackoff.DefaultPolicy()
	p.Max = time.Hour
	p.Jitter = 0
	p.MaxAttempts = 12 // 11 retries
	for s := range plan.Schedule(p) {
		fmt.Printf("retry %2d: wait %5.0fs, starts at %5.0fs\n", s.Retry, s.Delay.Seconds(), s.Elapsed.Seconds())
	}
	// Output:
	// retry  1: wait     1s, starts at     1s
	// retry  2: wait     2s, starts at     3s
	// retry  3: wait     4s, starts at     7s
	// retry  4: wait     8s, starts at    15s
	// retry  5: wait    16s, starts at    31s
	// retry  6: wait    32s, starts at    63s
	// retry  7: wait    64s, starts at   127s
	// retry  8: wait   128s, starts at   255s
	// retry  9: wait   256s, starts at   511s
	// retry 10: wait   512s, starts at  1023s
	// retry 11: wait  1024s, starts at  2047s
}

// DefaultPolicy with its jitter: each wait is between Delay and MaxDelay, so
// each retry starts between Elapsed and MaxElapsed.
func ExampleSchedule_jitter() {
	for s := range plan.Schedule(grpcbackoff.DefaultPolicy()) {
		fmt.Printf("retry %d: wait %v to %v, starts at %v to %v\n", s.Retry, s.Delay, s.MaxDelay, s.Elapsed, s.MaxElapsed)
	}
	// Output:
	// retry 1: wait 1s to 2s, starts at 1s to 2s
	// retry 2: wait 2s to 3s, starts at 3s to 5s
	// retry 3: wait 4s to 5s, starts at 7s to 10s
	// retry 4: wait 8s to 9s, starts at 15s to 19s
	// retry 5: wait 16s to 17s, starts at 31s to 36s
	// retry 6: wait 32s to 32s, starts at 1m3s to 1m8s
	// retry 7: wait 32s to 32s, starts at 1m35s to 1m40s
}

// Choosing the Multiplier from the wait wanted after a long time: a retry
// about every 10% of the time already waited. About 1000 s in, the waits are
// then about 100 s.
func ExampleMultiplierForRatio() {
	r, err := plan.MultiplierForRatio(0.1)
	if err != nil {
		fmt.Println(err)
		return
	}
	p := grpcbackoff.DefaultPolicy()
	p.Multiplier, p.Max, p.Jitter = r, time.Hour, 0

	next := plan.NextAfter(p, 1000*time.Second)
	fmt.Printf("r = %v\n", r)
	fmt.Printf("at 1000s: %d retries made; retry %d follows after %.3fs, at %.3fs\n",
		next.Retry-1, next.Retry, next.Delay.Seconds(), next.Elapsed.Seconds())
	// Output:
	// r = 1.1
	// at 1000s: 48 retries made; retry 49 follows after 97.017s, at 1057.190s
}

// NextAfter inverts the schedule: a retry at 1023 s is retry 10, and the wait
// after it is a + (r-1)·T = 1 + 1023 = 1024 s. Past the cap every wait is Max.
func ExampleNextAfter() {
	p := grpcbackoff.DefaultPolicy()
	p.Max = time.Hour
	p.Jitter = 0
	next := plan.NextAfter(p, 1023*time.Second)
	fmt.Printf("retry %d after %.0fs, at %.0fs\n", next.Retry, next.Delay.Seconds(), next.Elapsed.Seconds())

	next = plan.NextAfter(grpcbackoff.DefaultPolicy(), 1000*time.Second)
	fmt.Printf("retry %d after %.0fs, at %.0fs\n", next.Retry, next.Delay.Seconds(), next.Elapsed.Seconds())
	// Output:
	// retry 11 after 1024s, at 2047s
	// retry 36 after 32s, at 1023s
}

// Retrying every 10% instead of doubling takes about 7 times as many retries
// over the same time (fewer in practice: 48 instead of 9 by 1000 s).
func ExampleRetryCountRatio() {
	k, err := plan.RetryCountRatio(2, 1.1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%.2f\n", k)
	// Output:
	// 7.27
}

func ExampleAttemptsWithin() {
	p := grpcbackoff.DefaultPolicy()
	for _, d := range []time.Duration{10 * time.Second, 30 * time.Second, 600 * time.Second} {
		fewest, most := plan.AttemptsWithin(p, d)
		fmt.Printf("%v: %d to %d attempts\n", d, fewest, most)
	}
	// Output:
	// 10s: 3 to 4 attempts
	// 30s: 5 to 5 attempts
	// 10m0s: 8 to 8 attempts
}

// DefaultPolicy suits the 600 s timeouts of the Cloud Redis client, but not
// a 30 s deadline nor an hour.
func ExampleCheckDeadline() {
	p := grpcbackoff.DefaultPolicy()
	for _, d := range []time.Duration{600 * time.Second, 30 * time.Second, time.Hour} {
		fmt.Println(plan.CheckDeadline(p, d))
	}
	// Output:
	// <nil>
	// grpcbackoff: MaxAttempts (8) needs up to 100s of delays but the deadline is 30s: only 5 attempts start in time
	// grpcbackoff: gives up after at most 100s of delays, less than a tenth of the 3600s deadline: MaxAttempts up to 117 would still fit
}
