package stream

import (
	"io"

	"github.com/platformkit/grpcbackoff/internal/loop"
)

// grpc.OnFinish runs its function once per call, with the call's final
// status, as grpc-go runs it: a call that retries or hedges takes the
// caller's OnFinish options off its attempts and runs them itself, once,
// when the call ends (loop.SplitOnFinish).

// finished runs the stream's OnFinish functions, once, with err (io.EOF:
// success).
func (s *Stream) finished(err error) {
	s.mu.Lock()
	fs := s.finishers
	s.finishers = nil
	s.mu.Unlock()
	if err == io.EOF {
		err = nil
	}
	loop.Finish(fs, err)
}
