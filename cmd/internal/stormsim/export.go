package stormsim

import "google.golang.org/grpc"

// Method is the full name of the simulated service's one method
// (google.protobuf.Empty in and out).
const Method = method

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
