package sim

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// ends runs one request per arrival time on s (started with go at each
// time, inside a synctest bubble) and returns when each was answered,
// measured from the start.
func ends(s *server, arrivals []time.Duration, pauseAt, resumeAt time.Duration) []time.Duration {
	start := time.Now()
	out := make([]time.Duration, len(arrivals))
	var wg sync.WaitGroup
	for i, a := range arrivals {
		wg.Go(func() {
			time.Sleep(a)
			s.work()
			out[i] = time.Since(start)
		})
	}
	wg.Go(func() {
		time.Sleep(pauseAt)
		s.Pause()
		time.Sleep(resumeAt - pauseAt)
		s.Resume()
	})
	wg.Wait()
	s.Close()
	return out
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The latency doubles with each request above 2: 100, 100, 200, 400 ms...
func testModel(rule LatencyRule) Model {
	return Model{Limit: 2, BaseLatency: 100 * time.Millisecond, Growth: 2, K: 1, Rule: rule}
}

func TestServerAtStart(t *testing.T) {
	const ms = time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		// A, B at 0 (c = 1, 2: 100 ms) and C at 10 ms (c = 3: 200 ms); no
		// pause before 1 s.
		got := ends(newServer(testModel(AtStart), 1), []time.Duration{0, 0, 10 * ms}, time.Second, 2*time.Second)
		if want := []time.Duration{100 * ms, 100 * ms, 210 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// A, B at 0 end their work at 100 ms, but the pause (50 ms to 1 s)
		// holds their answers. C, D, E arrive during the pause and are
		// accepted at the resume in order, with c = 1, 2, 3 (A and B are
		// done): 100, 100 and 200 ms.
		s := newServer(testModel(AtStart), 1)
		mid := make(chan int, 1)
		go func() {
			time.Sleep(500 * ms)
			n, _ := s.sample()
			mid <- n
		}()
		got := ends(s, []time.Duration{0, 0, 60 * ms, 61 * ms, 62 * ms}, 50*ms, time.Second)
		if want := []time.Duration{time.Second, time.Second, 1100 * ms, 1100 * ms, 1200 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
		if n := <-mid; n != 5 {
			t.Errorf("in flight during the pause = %d, want 5", n)
		}
	})
}

func TestServerCurrent(t *testing.T) {
	const ms = time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		// A, B at 0, C at 50 ms: with three in flight the latency is 200 ms,
		// so nobody ends at 100 ms; A ends at 200 ms, and then, two left,
		// the latency is 100 ms and B and C (150 ms old) end with it.
		got := ends(newServer(testModel(Current), 1), []time.Duration{0, 0, 50 * ms}, time.Second, 2*time.Second)
		if want := []time.Duration{200 * ms, 200 * ms, 200 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// A at 0 is paused at 50 ms; B, C, D arrive in the pause and start
		// at the resume (1 s) with four in flight (400 ms), A included. A,
		// a second old, ends at once; then, three in flight, the latency
		// is 200 ms, and B, C and D end at 1.2 s.
		got := ends(newServer(testModel(Current), 1), []time.Duration{0, 60 * ms, 70 * ms, 80 * ms}, 50*ms, time.Second)
		if want := []time.Duration{time.Second, 1200 * ms, 1200 * ms, 1200 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
	})
}
