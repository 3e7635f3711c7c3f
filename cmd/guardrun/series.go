package main

import (
	"sync/atomic"
	"time"
)

// A column is what a series counts.
type column int

const (
	firstTries       column = iota // attempts at the handler without grpc-previous-rpc-attempts ≥ 1
	retries                        // attempts at the handler with it
	served                         // requests whose work was done
	wasted                         // ... after their caller had given up
	offered                        // calls the clients started
	ok                             // calls that succeeded, when they ended
	failed                         // calls that failed, when they ended
	over                           // samples of the guard's State.Over (one a step)
	sheddable                      // calls that said SHEDDABLE, when they ended (brownout)
	sheddableFailed                // ... and failed
	critical                       // calls that said CRITICAL_PLUS, when they ended
	criticalFailed                 // ... and failed
	patientOK                      // patient calls (30 s deadlines) that succeeded
	patientFailed                  // ... and failed
	sheddableRetries               // retries at the handler of calls that said SHEDDABLE
	columns
)

// series counts events in buckets of step from start; events past the last
// bucket count in it.
type series struct {
	start time.Time
	step  time.Duration
	b     [][columns]atomic.Int64
}

func newSeries(start time.Time, step, length time.Duration) *series {
	return &series{start: start, step: step, b: make([][columns]atomic.Int64, int((length+step-1)/step))}
}

func (s *series) add(t time.Time, c column, n int64) {
	i := max(0, min(int(t.Sub(s.start)/s.step), len(s.b)-1))
	s.b[i][c].Add(n)
}

// get returns column c of bucket i.
func (s *series) get(i int, c column) int64 { return s.b[i][c].Load() }

// sum returns column c over buckets [from, to).
func (s *series) sum(c column, from, to int) int64 {
	var n int64
	for i := max(from, 0); i < min(to, len(s.b)); i++ {
		n += s.get(i, c)
	}
	return n
}

// bucket returns the bucket of the time d after the start.
func (s *series) bucket(d time.Duration) int { return int(d / s.step) }
