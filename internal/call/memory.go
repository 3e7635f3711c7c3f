package call

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// A Google Cloud client retries a unary call with one context and request:
// the Retrier's retries of it, across the client's attempts of it, stay
// within MaxAttempts (cloudclients.Memory). Open recalls them, Remember
// records them.

// recall looks up, for the unary call p plans with req on ctx and cc, a
// Google Cloud client's, the retries the Retrier made in the client's
// earlier attempts of it, which count in this one's.
func (e *Engine) recall(ctx context.Context, p *Plan, cc *grpc.ClientConn, req any) {
	if p.Policy == nil || p.Hedge != nil {
		return
	}
	k, ok := cloudclients.KeyOf(ctx, targetOf(cc), p.Method, req)
	if !ok {
		return
	}
	// Only a Google Cloud client's call is remembered, by a key no other
	// call has: which client it is is learnt at its first failure, as for
	// every call, not here, where learning it would allocate on a call that
	// may succeed.
	p.Prior, p.Taken = e.Memory.Take(k, time.Now())
}

// Remember records, for the next attempt its Google Cloud client may make
// of the unary call u, planned as p, that made attempts and ended with err,
// the retries the Retrier made of it in all: kept while the client may send
// it again, after err, within its longest pause; forgotten otherwise.
func (e *Engine) Remember(p *Plan, u *Unary, err error, attempts int) {
	k, ok := cloudclients.KeyOf(u.Origin, targetOf(u.CC), u.Method, u.Req)
	if !ok {
		return
	}
	e.Memory.Record(u.Origin, k, p.Taken, p.Client, err, p.Prior+max(attempts-1, 0), time.Now())
}
