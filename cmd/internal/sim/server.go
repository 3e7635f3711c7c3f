package sim

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Method is the full name of the simulated service's one method
// (google.protobuf.Empty in and out).
const Method = "/stormsim.Server/Work"

// serviceDesc describes the simulated service by hand: one unary method
// taking and returning google.protobuf.Empty, so that no generated code is
// needed.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "stormsim.Server",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Work",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in emptypb.Empty
			if err := dec(&in); err != nil {
				return nil, err
			}
			srv.(*server).work()
			return &emptypb.Empty{}, nil
		},
	}},
}

// server carries out a Model. Its handler ignores the caller's context: a
// request's work goes on after the client gave up, as in the original
// experiment, and only stop ends it early, when the run is over.
//
// The pause models SIGSTOP. A stopped process neither accepts connections
// nor runs handlers, while clients keep sending: requests that arrive during
// the pause wait, in arrival order, in waiting (the listen backlog of the
// original). At resume they are accepted one after the other, each counting
// itself, so the first sees the concurrency of before the pause and the last
// all of the backlog (the original server printed "concurrency: 1040, last
// delay: 2.67s" one second after SIGCONT). Requests that were being served
// when the pause came cannot answer until the resume, whenever their work
// ends, so they stay in flight too (under the AtStart rule; the Current
// rule's loop, stopped like the rest, ends them at the resume).
//
// Two concurrencies are kept: accepted (the requests whose work is under
// way, which drive the latency formula, as the original process's counter
// did) and inflight, which adds the backlog and the answers held by the
// pause: the load on the server as a client sees it, the one reported.
type server struct {
	m     Model
	scale float64       // real duration of one model duration
	stop  chan struct{} // closed when the run is over

	mu       sync.Mutex
	paused   bool
	resumed  chan struct{} // closed at resume; a new one at each pause
	waiting  []*request    // arrived during the pause, in arrival order
	accepted int           // accepted, work under way
	held     int           // work done during the pause, not yet answered
	peak     int           // most in flight since the last sample

	// Current rule only: the accepted requests in order of start, which is
	// also the order in which they end, and a wake-up for the loop that
	// ends them.
	queue []*request
	kick  chan struct{}
}

// request is a request the server must come back to: one that waits for the
// resume, or, under the Current rule, any accepted one.
type request struct {
	start time.Time
	c     int           // AtStart rule: concurrency at acceptance
	ready chan struct{} // closed when the request may proceed
}

func newServer(m Model, scale float64) *server {
	s := &server{m: m, scale: scale, stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	if m.Rule == Current {
		go s.loop()
	}
	return s
}

// latency returns the real latency at concurrency c.
func (s *server) latency(c int) time.Duration {
	l := s.m.Latency(c)
	if s.scale == 1 {
		return l
	}
	return time.Duration(float64(l) * s.scale)
}

// work is one request, from arrival to answer.
func (s *server) work() {
	s.mu.Lock()
	var r *request
	switch {
	case s.paused:
		r = &request{ready: make(chan struct{})}
		s.waiting = append(s.waiting, r)
	case s.m.Rule == Current:
		r = &request{start: time.Now(), ready: make(chan struct{})}
		s.accept(r)
	default:
		s.accepted++
	}
	c := s.accepted
	s.peak = max(s.peak, s.inflight())
	s.mu.Unlock()

	if s.m.Rule == Current {
		// The loop ends the request (resume accepts it first if it waits).
		select {
		case <-r.ready:
		case <-s.stop:
		}
		return
	}
	if r != nil { // waited for the resume, which set its concurrency
		select {
		case <-r.ready:
		case <-s.stop:
			return
		}
		c = r.c
	}
	t := time.NewTimer(s.latency(c))
	select {
	case <-t.C:
	case <-s.stop:
		t.Stop()
		return
	}
	s.mu.Lock()
	s.accepted--
	if s.paused { // done, but a stopped process cannot answer
		s.held++
		resumed := s.resumed
		s.mu.Unlock()
		select {
		case <-resumed:
		case <-s.stop:
		}
		return
	}
	s.mu.Unlock()
}

// accept takes r into service under the Current rule; s.mu is held.
func (s *server) accept(r *request) {
	s.queue = append(s.queue, r)
	s.accepted++
	if len(s.queue) == 1 {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// loop ends the requests of the Current rule: the oldest request ends once
// its age reaches the latency at the current concurrency, and as the
// concurrency falls with each end, the next ones may end at the same moment.
// A new request only makes the latency longer, so the loop's timer can only
// be early, never late; it is rearmed each time round.
func (s *server) loop() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		s.mu.Lock()
		if !s.paused {
			now := time.Now()
			for len(s.queue) > 0 {
				head := s.queue[0]
				due := head.start.Add(s.latency(len(s.queue)))
				if now.Before(due) {
					t.Reset(due.Sub(now))
					break
				}
				close(head.ready)
				s.queue[0] = nil
				s.queue = s.queue[1:]
				s.accepted--
			}
		}
		s.mu.Unlock()
		select {
		case <-t.C:
		case <-s.kick:
		case <-s.stop:
			t.Stop()
			return
		}
	}
}

// inflight is the number of requests arrived and not answered; s.mu is held.
func (s *server) inflight() int { return s.accepted + s.held + len(s.waiting) }

// Pause stops the server as SIGSTOP would.
func (s *server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		s.paused = true
		s.resumed = make(chan struct{})
	}
}

// Resume accepts the backlog in arrival order and lets the server answer.
func (s *server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		return
	}
	s.paused = false
	now := time.Now()
	for i, r := range s.waiting {
		if s.m.Rule == Current {
			r.start = now // its handler waits on r.ready, closed by loop
			s.accept(r)
		} else {
			s.accepted++
			r.c = s.accepted
			close(r.ready)
		}
		s.waiting[i] = nil
	}
	s.waiting = nil
	s.held = 0 // they answer now
	close(s.resumed)
	select { // the Current loop may have requests to end now
	case s.kick <- struct{}{}:
	default:
	}
}

// sample returns the requests in flight now and the most in flight since the
// previous call, and starts a new peak.
func (s *server) sample() (now, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, peak = s.inflight(), s.peak
	s.peak = now
	return now, peak
}

// Close ends every request still in the server; the run is over.
func (s *server) Close() { close(s.stop) }

// Service is the Model's server for use outside Run: for example in a
// process of its own, paused for real with SIGSTOP (cmd/fleetsim -real).
type Service struct{ s *server }

// NewService returns a server carrying out m in real time.
func NewService(m Model) *Service { return &Service{s: newServer(m, 1)} }

// Register registers the service on gs.
func (s *Service) Register(gs *grpc.Server) { gs.RegisterService(&serviceDesc, s.s) }

// Sample returns the requests in the server now and the most since the
// previous call.
func (s *Service) Sample() (now, peak int) { return s.s.sample() }

// Close ends every request still in the server.
func (s *Service) Close() { s.s.Close() }
