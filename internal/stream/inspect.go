package stream

import "google.golang.org/grpc/metadata"

// What the interceptor package's tests look at in a Stream.

// Buffer returns the state of s's replay buffer: its size in bytes, the
// number of kept messages, whether the first slot still holds a message and
// whether the stream committed.
func (s *Stream) Buffer() (size, kept int, firstHeld, committed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size, len(s.sent), s.sent0[0] != nil, s.phase == streamCommitted
}

// FirstTrailer returns the trailer s keeps of its first attempt.
func (s *Stream) FirstTrailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first.trailer
}
