// Package connpolicy reads the retry policy a connection's control plane
// gives a method (issue 45): the methodConfig of the service config that
// grpc-go holds for a ClientConn (from its resolver: a manual resolver, DNS
// TXT _grpc_config records, or grpc.WithDefaultServiceConfig), mapped onto
// the engine's settings as serviceconfig.Parse and WithServiceConfig map
// the same document (internal/a6); and, on a channel where grpc-go's own
// retry applies a policy the library cannot read (an xDS route's), how many
// attempts grpc-go made of a call (Attempts).
//
// In the engine's layers it sits beside internal/settings, which it
// produces values of, and below the connection's state (internal/targets,
// which holds a Source per ClientConn) and the plan of a call
// (internal/loop), which asks it once per call, when the call's first
// attempt has failed: the only time the answer matters, and the first time
// it is sure to be there (a new channel applies its resolver's config
// before it lets a first attempt through, not before its first call
// starts); a plan that needs it before the first attempt (a method the
// Retrier would hedge or not retry) asks as the call starts.
package connpolicy

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/internal/a6"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// Policy is what a connection's control plane says of one method.
type Policy struct {
	// Retry is the method's retryPolicy as a validated Policy, nil if the
	// control plane gives it none. The pointer stays the same while the
	// connection's config does: it is shared, never to be changed.
	Retry *settings.Policy
	// Timeout is the method's timeout, bounding each call of it, retries
	// included; 0 means none (as does a negative timeout).
	Timeout time.Duration
	// From is the entry of the config that gave Retry: the method's own
	// (settings.FromMethod), its service's, or the default one.
	From settings.Level
}

// Set reports whether the control plane gives the method a retry policy or
// a timeout.
func (p Policy) Set() bool { return p.Retry != nil || p.Timeout > 0 }

// MethodConfigs is what a Source reads: a *grpc.ClientConn.
//
// grpc.MethodConfig is marked deprecated ("Service config should be
// received through name resolver"), yet ClientConn.GetMethodConfig is
// grpc-go's only view of the resolver's methodConfig for code outside it:
// a grpc-go release that drops it fails the probes of the controlplane
// module first (TestProbeGetMethodConfig).
type MethodConfigs interface {
	//lint:ignore SA1019 see above
	GetMethodConfig(method string) grpc.MethodConfig
}

// Source reads the policies of one connection's control plane. Its Lookup
// is safe for concurrent use and allocates nothing while the connection's
// config stands; make one with New.
type Source struct {
	cc MethodConfigs

	// compiled maps a *RetryPolicy that grpc-go returned to its *compiled
	// mapping. grpc-go returns one pointer per methodConfig entry for as
	// long as its config stands, and a new one after each update: so the
	// map holds one entry per entry of the configs seen, and is cleared
	// when it holds more than maxCompiled.
	compiled sync.Map
	n        atomic.Int32
}

type compiled struct {
	p   *settings.Policy
	err error
}

// maxCompiled bounds the retry policies a Source keeps compiled: more than
// a control plane's config names, fewer than its updates over months.
const maxCompiled = 64

// New returns the Source of cc's policies.
func New(cc MethodConfigs) *Source { return &Source{cc: cc} }

// Lookup returns what the connection's control plane says of method, as
// grpc-go resolves a method's config: its own methodConfig entry, else its
// service's, else the default entry. A retryPolicy the library cannot
// carry out (a backoffMultiplier below 1, which grpc-go accepts; a
// retryPolicy whose codes are all OK) is returned as an error naming the
// method and the field, with a Policy without Retry: the caller keeps its
// own Policy for the method and says why.
//
// From tells which entry gave Retry, by the entries' RetryPolicy pointers
// (one per entry): an entry naming the method and its service both reads
// as its service's.
//
// grpc-go has already capped maxAttempts at 5 (grpc.WithMaxCallAttempts)
// where serviceconfig.Parse uses it as given. An entry without a
// retryPolicy reads as no entry at all (grpc-go returns the same empty
// config for both), so its methods keep the caller's Policy where
// WithServiceConfig would not retry them. A resolver's retryThrottling is
// out of reach: grpc-go keeps it unexported.
func (s *Source) Lookup(method string) (Policy, error) {
	mc := s.cc.GetMethodConfig(method)
	var p Policy
	if mc.Timeout != nil {
		p.Timeout = max(*mc.Timeout, 0)
	}
	rp := mc.RetryPolicy
	if rp == nil {
		return p, nil
	}
	c, ok := s.compiled.Load(rp)
	if !ok {
		pol, err := compile(rp.MaxAttempts, rp.InitialBackoff, rp.MaxBackoff, rp.BackoffMultiplier, rp.RetryableStatusCodes)
		if err != nil {
			err = fmt.Errorf("connpolicy: the connection's retryPolicy for %s: %w", method, err)
		}
		if s.n.Add(1) > maxCompiled {
			s.compiled.Clear()
			s.n.Store(1)
		}
		c = &compiled{p: pol, err: err}
		s.compiled.Store(rp, c)
	}
	cp := c.(*compiled)
	if p.Retry = cp.p; p.Retry == nil {
		return p, cp.err
	}
	// The entry that gave rp: the method's own, unless its service's (or,
	// for lack of one, the default) gives the same; its service's, unless
	// the default does.
	switch svc := settings.ServiceOf(method); {
	case svc != "" && s.cc.GetMethodConfig(svc).RetryPolicy != rp:
		p.From = settings.FromMethod
	case s.cc.GetMethodConfig("").RetryPolicy != rp:
		p.From = settings.FromService
	default:
		p.From = settings.FromDefault
	}
	return p, nil
}

// GRPCRetries reports whether grpc-go's own retry, where it is on, retries
// a failure of method with code: the retryPolicy of its config for the
// method names code (as grpc-go parsed it: its maxAttempts and backoff are
// grpc-go's, even where Lookup refuses them). It is false on an xDS
// channel, whose route policies grpc-go does not show (see Attempts).
func (s *Source) GRPCRetries(method string, code codes.Code) bool {
	rp := s.cc.GetMethodConfig(method).RetryPolicy
	return rp != nil && rp.RetryableStatusCodes[code]
}

// compile maps a retryPolicy as grpc-go parsed it onto a validated Policy,
// with a6.Policy: its codes in ascending order, OK (which grpc-go accepts
// and never retries) left out.
func compile(attempts int, initial, maxBackoff time.Duration, mult float64, retryable map[codes.Code]bool) (*settings.Policy, error) {
	var cs []codes.Code
	for c, on := range retryable {
		if on && c != codes.OK {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	if len(cs) == 0 {
		return nil, errors.New("retryableStatusCodes holds no error code: no code would be retried")
	}
	p, err := settings.Compile(a6.Policy(attempts, initial, maxBackoff, mult, cs))
	if err != nil {
		return nil, err
	}
	return &p, nil
}
