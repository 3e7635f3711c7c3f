package guardcore

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"
)

// A drive is a small discrete-event run of clients against a server guarded
// by a Core, on given times: clients that retry as grpc-go's built-in retry
// does (5 attempts, 0.1 s doubling to 1 s, jittered ×0.8–1.2, a pushback ≥ 0
// waited exactly and resetting the backoff, −1 ending the call) or as this
// library's (the same backoff, a pushback waited at least), and a server
// whose answers a function decides.
type drive struct {
	core     *Core   // nil: no guard
	clients  int     // connections, each a pair of one method
	rate     float64 // calls a second, all clients
	length   time.Duration
	deadline time.Duration // of each call
	library  bool          // the library's pushback rule, not grpc-go's
	attempts int           // per call; 5 if 0
	rank     func(call int) Rank
	// answer returns whether an attempt at time at succeeds, and if not
	// whether it is shed (RESOURCE_EXHAUSTED).
	answer func(at time.Duration, rng *rand.Rand) (ok, shed bool)
	// extra calls, started at the given times, with their own deadline.
	extra         []time.Duration
	extraDeadline time.Duration
	seed          uint64
	probe         func(m *Method, now time.Duration)
}

// driveResult is what a drive measured.
type driveResult struct {
	calls, failed          int
	failedByRank           [Ranks]int
	callsByRank            [Ranks]int
	retries                int // at the server
	extraOK                int // extra calls served
	paced, refused         int
	perTenth               map[int64]int // retries at the server per 100 ms
	unpacedPerTenth        map[int64]int // failures let through without pushback per 100 ms
	overTenths             map[int64]bool
	maxRetriesPer100msOver int
}

type driveEvent struct {
	at   time.Duration
	call int
	kind uint8 // 0 start, 1 attempt
}

type driveQueue []driveEvent

func (q driveQueue) Len() int           { return len(q) }
func (q driveQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q driveQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *driveQueue) Push(x any)        { *q = append(*q, x.(driveEvent)) }
func (q *driveQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type driveCall struct {
	key           uint64
	start         time.Duration
	deadline      time.Duration
	attempt       int // attempts made
	sincePushback int
	rank          Rank
	extra         bool
}

func (d drive) run() driveResult {
	rng := rand.New(rand.NewPCG(d.seed, 7))
	maxAttempts := d.attempts
	if maxAttempts == 0 {
		maxAttempts = 5
	}
	keys := make([]uint64, d.clients)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	var m Method
	res := driveResult{perTenth: map[int64]int{}, overTenths: map[int64]bool{}, unpacedPerTenth: map[int64]int{}}
	var calls []*driveCall
	q := &driveQueue{}
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / d.rate * float64(time.Second))
		if t >= d.length {
			break
		}
		c := &driveCall{key: keys[rng.IntN(d.clients)], start: t, deadline: t + d.deadline, rank: RankDefault}
		if d.rank != nil {
			c.rank = d.rank(len(calls))
		}
		calls = append(calls, c)
		heap.Push(q, driveEvent{at: t, call: len(calls) - 1})
	}
	for _, at := range d.extra {
		c := &driveCall{key: keys[rng.IntN(d.clients)], start: at, deadline: at + d.extraDeadline, rank: RankDefault, extra: true}
		calls = append(calls, c)
		heap.Push(q, driveEvent{at: at, call: len(calls) - 1})
	}
	end := func(c *driveCall, ok bool) {
		if c.extra {
			if ok {
				res.extraOK++
			}
			return
		}
		res.calls++
		res.callsByRank[c.rank]++
		if !ok {
			res.failed++
			res.failedByRank[c.rank]++
		}
	}
	for q.Len() > 0 {
		ev := heap.Pop(q).(driveEvent)
		c := calls[ev.call]
		now := ev.at
		if now >= c.deadline {
			end(c, false)
			continue
		}
		if d.probe != nil {
			d.probe(&m, now)
		}
		c.attempt++
		retry := c.attempt > 1
		if retry {
			res.retries++
			tenth := int64(now / (100 * time.Millisecond))
			res.perTenth[tenth]++
		}
		var cl Client
		if d.core != nil {
			cl, _ = d.core.Count(&m, c.key, now, retry, c.rank)
			if d.core.State(&m, now).Over {
				res.overTenths[int64(now/(100*time.Millisecond))] = true
			}
		}
		ok, shed := d.answer(now, rng)
		if ok {
			if d.core != nil {
				d.core.Served(&m, cl, now, int64(c.attempt-1), c.rank)
			}
			end(c, true)
			continue
		}
		var v Verdict
		if d.core != nil {
			v, _ = d.core.Failed(&m, cl, now, c.deadline, int64(c.attempt-1), c.rank, shed)
		}
		if !v.Refused && !v.Paced {
			res.unpacedPerTenth[int64(now/(100*time.Millisecond))]++
		}
		if v.Refused || c.attempt >= maxAttempts {
			if v.Refused {
				res.refused++
			}
			end(c, false)
			continue
		}
		backoff := time.Duration(math.Min(0.1*math.Pow(2, float64(c.sincePushback)), 1) * (0.8 + 0.4*rng.Float64()) * float64(time.Second))
		wait := backoff
		if v.Paced {
			res.paced++
			if d.library {
				wait = max(backoff, v.Wait)
				c.sincePushback++
			} else {
				wait = v.Wait
				c.sincePushback = 0
			}
		} else {
			c.sincePushback++
		}
		if now+wait >= c.deadline {
			end(c, false)
			continue
		}
		heap.Push(q, driveEvent{at: now + wait, call: ev.call, kind: 1})
	}
	for tenth, n := range res.perTenth {
		if res.overTenths[tenth] {
			res.maxRetriesPer100msOver = max(res.maxRetriesPer100msOver, n)
		}
	}
	return res
}

// flaky returns an answer that fails a share p of the attempts, at random.
func flaky(p float64) func(time.Duration, *rand.Rand) (bool, bool) {
	return func(_ time.Duration, rng *rand.Rand) (bool, bool) { return rng.Float64() >= p, false }
}

// outage returns an answer that fails every attempt from from to to.
func outage(from, to time.Duration) func(time.Duration, *rand.Rand) (bool, bool) {
	return func(at time.Duration, _ *rand.Rand) (bool, bool) { return at < from || at >= to, false }
}
