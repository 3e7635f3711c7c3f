// Package loop is the interceptors' retry loop, the one every driver (the
// unary path, a hedged call, a stream) runs its attempts through: a call's
// Plan (the Retrier's settings for its method, what its ClientConn's
// control plane decides of them, and the call's options, resolved once,
// before the first attempt), its opening (Open: the
// admission of its target's gates), the protocol after each failed attempt
// (Call: Decide, Reserve, Wait, Pay, or Next for all four, Proceed for the
// last three; PayHedge for a hedge), the record of every attempt's end
// (Record), and its one way out (Fail, End).
//
// Its files, each on those before it: options.go (the call options a Plan
// reads), engine.go (what the calls of one Retrier share, and what its
// Observer is told), plan.go, call.go (a Call, the protocol and its end),
// hook.go (the rule of a calling layer that retries by itself, such as a
// Google Cloud client), open.go.
//
// In the engine's layers it sits above what it reads (internal/attempt,
// internal/targets and their gates, internal/gate, internal/settings,
// internal/safety, internal/resume, internal/decide) and below what
// carries calls out (internal/unary, internal/hedge, internal/stream). The
// package interceptor holds an Engine and adapts it to its public types.
package loop

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/resume"
	"github.com/platformkit/grpcbackoff/internal/safety"
	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Engine is what the calls of one Retrier share: its settings, what it
// knows of its methods' safety, its targets' state, the Hook of the
// calling layers that retry by themselves, and who observes them. Its fields are set by the
// Retrier's options, before the first call; it is then safe for concurrent
// use.
type Engine struct {
	Settings      settings.Table
	Safety        safety.Catalog
	Unsafe        func(name string) bool // reports names known not to be idempotent (Safety.NotIdempotent)
	UnsafeRetries bool                   // WithNonIdempotentRetries: a method's Safety never stops a retry
	Targets       targets.Registry
	Hook          Hook         // the rule of the calling layers that retry by themselves (the Google Cloud clients'); nil: none
	Observer      Observer     // nil: no one observes
	NoPushback    bool         // WithoutPushback: unary calls do not read the trailer
	BufLimit      int          // bytes of sent messages a stream keeps for replay before it commits
	Resume        resume.Table // WithResume's rules: the server streams resumed after they committed (Plan.Resume)
}

// extraGates returns the gates every target gets after its built-in ones:
// set by the loop package's own tests alone (SetExtraGates, in
// export_test.go), nil in every other binary.
var extraGates func(target string) []gate.Gate

// Prepare readies e once its options are set, before its first call.
func (e *Engine) Prepare() {
	if extraGates != nil {
		e.Targets.Extra = extraGates
	}
}

// Observer is told of every retry decision and of every call's end, as
// interceptor's Observers are: the interceptor package adapts its own.
type Observer interface {
	OnRetry(ctx context.Context, r Retry)
	OnEnd(ctx context.Context, e End)
}

// Retry is a retry decision, field for field interceptor.Retry.
type Retry struct {
	Method       string
	StaticMethod bool
	Target       string
	Conn         *grpc.ClientConn
	Attempt      int
	Code         codes.Code
	Err          error
	Hint         grpcbackoff.Hint
	Delay        time.Duration
	Throttled    bool
	Hedge        bool
}

// End is how a call ended, field for field interceptor.End.
type End struct {
	Method       string
	StaticMethod bool
	Target       string
	Conn         *grpc.ClientConn
	Code         codes.Code
	Err          error
	Attempts     int
	Delay        time.Duration
	Hedged       bool
	Hedges       int
	Reason       grpcbackoff.Reason
}

// targetOf returns cc's target, or "" for a call made without a ClientConn.
func targetOf(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}
