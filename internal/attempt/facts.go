package attempt

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Facts are the targets of the call options by which grpc-go tells what
// became of a unary attempt (see Failure): its response headers (commit),
// its trailer (pushback), its peer, written exactly when the attempt made a
// transport stream (sent), and whether grpc-go had the attempt at all (its
// grpc.OnFinish ran). Reset readies them for an attempt.
type Facts struct {
	Header  metadata.MD
	Trailer metadata.MD
	Peer    peer.Peer
	Reached bool
}

// notSentAddr is the peer address an attempt's grpc.Peer target holds until
// grpc-go writes the attempt's real peer, which it does exactly when the
// attempt made a transport stream, whatever that peer's fields are (a
// net.Conn may have no address).
type notSentAddr struct{}

func (notSentAddr) Network() string { return "grpcbackoff" }
func (notSentAddr) String() string  { return "not sent" }

// Options returns the call options by which grpc-go writes f: grpc.Header,
// grpc.Peer, grpc.OnFinish and grpc.Trailer. Each allocates: make them once
// for the Facts they serve.
func (f *Facts) Options() (header, peer, finish, trailer grpc.CallOption) {
	return grpc.Header(&f.Header), grpc.Peer(&f.Peer), grpc.OnFinish(f.Finished), grpc.Trailer(&f.Trailer)
}

// Reset readies f for an attempt: nothing heard, nothing sent.
func (f *Facts) Reset() {
	f.Header, f.Trailer, f.Reached = nil, nil, false
	f.Peer = peer.Peer{Addr: notSentAddr{}}
}

// Finished is the function of the attempt's grpc.OnFinish: grpc-go had the
// attempt, with its call options.
func (f *Facts) Finished(error) { f.Reached = true }

// PeerWritten reports whether grpc-go wrote the attempt's peer: it made a
// transport stream.
func (f *Facts) PeerWritten() bool { return f.Peer.Addr != notSentAddr{} }

// Sent reports whether the attempt's request may have reached the server:
// unless grpc-go had the attempt and made no transport stream for it.
func (f *Facts) Sent() bool { return !f.Reached || f.PeerWritten() }

// Read fills in what the attempt that failed as x.Err told through f, the
// trailer itself only with trailer (for pushback). Without grpc.Trailer
// among the attempt's options its status is not known to be the server's.
func (f *Facts) Read(x *Failure, trailer bool) {
	x.Committed, x.Sent, x.Status = f.Header != nil, f.Sent(), len(f.Trailer) > 0
	if trailer {
		x.Trailer = f.Trailer
	}
}
