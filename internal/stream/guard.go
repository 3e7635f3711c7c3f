package stream

// A panic in the code under a stream (the interceptors chained after this
// one, the transport), on the caller's goroutine or on one of the stream's
// own, breaks the stream: it is raised on the caller's goroutine, with the
// same value, by its current or next operation and by every later one, as
// it would reach the caller without the library, and no lock is left held.

// guard calls f, which calls the code under the stream (the interceptors
// chained after this one, the transport) without mu. A panic in f breaks
// the stream: every operation of the caller's, from its current or next
// one, raises it again with the same value, as it would reach the caller
// without the library; with rethrow (f runs on the caller's goroutine) it
// goes on up at once. On a goroutine of the stream's own (rethrow false),
// guard reports whether f returned.
func (s *Stream) guard(rethrow bool, f func()) (returned bool) {
	defer func() {
		if returned {
			return
		}
		v := recover()
		s.mu.Lock()
		s.breakLocked(v)
		s.mu.Unlock()
		if rethrow {
			panic(v)
		}
	}()
	f()
	return true
}

// breakLocked ends the stream for the panic v: its current attempt is
// released, its plan's timeout stopped, and every operation waiting wakes
// up to raise v. The caller's grpc.OnFinish functions run once its context
// ends, as grpc-go runs them for a stream it made. mu is held.
func (s *Stream) breakLocked(v any) {
	if !s.broken {
		s.broken, s.panicV = true, v
	}
	s.phase = streamEnded
	s.cur.release()
	s.releaseSent()
	if s.stopTimeout != nil {
		s.stopTimeout()
	}
	if s.ownCancel != nil {
		s.ownCancel()
	}
	s.changed.Broadcast()
}
