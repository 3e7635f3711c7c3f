// Package googlehook is the Google Cloud clients' rule as the retry loop's
// Hook (loop.Hook), the one place the engine reaches internal/cloudclients:
// for a code a client retries by itself for a method, the Retrier makes
// one attempt and hands the error back (ReasonClientRetries); and a client
// retries a unary call with one context and request, by which the
// Retrier's retries of it, across the client's attempts of it, stay within
// MaxAttempts (cloudclients.Memory). In the engine's layers it sits above
// the loop, whose Hook it implements, and beside the drivers; the package
// interceptor installs it in every Retrier.
package googlehook

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Hook is the Google Cloud clients' rule of one Retrier, with its memory of
// the clients' calls. Its zero value is ready; it is safe for concurrent
// use.
type Hook struct {
	memory cloudclients.Memory
}

var _ loop.Hook = (*Hook)(nil)

// call is what the Hook keeps of one call: whether it took the memory's
// entry of the client's earlier attempts of it (Open), and, once learnt
// at its first retry decision, what its client retries by itself.
type call struct {
	taken  bool
	client cloudclients.Client
}

// The states of the calls that need no state of their own, shared: a call
// that took its entry before it learnt its client, and a call learnt not
// to be a Google Cloud client's. They are never written.
var (
	takenOnly = &call{taken: true}
	notGoogle = &call{client: cloudclients.Client{Learnt: true}}
)

// Open learns, once per ClientConn, the Google API its calls serve
// (cloudclients.APIOf), and, for a unary call that may be retried,
// recalls the retries the Retrier made in its client's earlier attempts of
// it. Only a Google Cloud client's call is remembered, by a key no other
// call has: which client it is is learnt at its first failure, as for
// every call, not here, where learning it would allocate on a call that
// may succeed.
func (h *Hook) Open(ctx context.Context, conn *targets.Conn, method string, req any, retried bool) (int, any) {
	if conn.Hook.Load() == nil {
		if a := cloudclients.APIOf(ctx, method); a != nil {
			var v any = a
			conn.Hook.CompareAndSwap(nil, &v) // once per ClientConn
		}
	}
	if req == nil || !retried || h.memory.Len() == 0 {
		return 0, nil
	}
	k, ok := cloudclients.KeyOf(ctx, targetOf(conn), method, req)
	if !ok {
		return 0, nil
	}
	prior, taken := h.memory.Take(k, time.Now())
	if !taken {
		return prior, nil
	}
	return prior, takenOnly
}

// Leaves learns, once per call, whether it is a Google Cloud client's, and
// which codes its client retries (cloudclients.Learn), and applies the
// rule to st.
func (h *Hook) Leaves(ctx context.Context, c loop.HookCall, st *status.Status, opening bool) (bool, any) {
	s, _ := c.State.(*call)
	if s == nil || !s.client.Learnt {
		var api *cloudclients.API
		if v := c.Conn.Hook.Load(); v != nil {
			api, _ = (*v).(*cloudclients.API)
		}
		cl := cloudclients.Learn(ctx, c.Method, c.Opts, api, c.Req)
		if taken := s != nil && s.taken; taken || cl.Google {
			s = &call{taken: taken, client: cl} // a Google Cloud client's call: it allocates, once
		} else {
			s = notGoogle
		}
	}
	return s.client.Leaves(st, opening), s
}

// End records, for the next attempt its Google Cloud client may make of
// the unary call c, that made attempts and ended with err, the retries the
// Retrier made of it in all: kept while the client may send it again,
// after err, within its longest pause; forgotten otherwise. A call that
// took its entry and succeeded at once gives it back so; one that failed
// first is remembered only once learnt a Google Cloud client's.
func (h *Hook) End(ctx context.Context, c loop.HookCall, err error, attempts int) {
	s, _ := c.State.(*call)
	if s == nil || attempts == 0 && !s.taken || attempts > 0 && !s.client.Google {
		return
	}
	k, ok := cloudclients.KeyOf(ctx, targetOf(c.Conn), c.Method, c.Req)
	if !ok {
		return
	}
	h.memory.Record(ctx, k, s.taken, s.client, err, c.Prior+max(attempts-1, 0), time.Now())
}

// Streamer watches the streams of method for what a client's rule reads
// from them (a Pub/Sub subscription's exactly-once delivery:
// cloudclients.Watch).
func (h *Hook) Streamer(method string, s grpc.Streamer) grpc.Streamer {
	return cloudclients.Watch(method, s)
}

// targetOf returns the target of conn's ClientConn, "" for calls without
// one.
func targetOf(conn *targets.Conn) string {
	if cc := conn.ClientConn(); cc != nil {
		return cc.Target()
	}
	return ""
}
