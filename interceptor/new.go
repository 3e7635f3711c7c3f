package interceptor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/googlehook"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// New returns a Retrier that carries out p, or an error naming every invalid
// field of p and every invalid option (a nil one included) by its index in
// opts, all at once. Use it for configuration read at run time; Unary,
// Stream and DialOptions panic instead.
func New(p grpcbackoff.Policy, opts ...Option) (*Retrier, error) {
	c, err := settings.Compile(p)
	errs := []error{err}
	throttle := grpcbackoff.DefaultThrottle()
	r := &Retrier{}
	r.e.BufLimit = DefaultBufferLimit
	r.e.Hook = new(googlehook.Hook) // the Google Cloud clients' rule (doc.go)
	r.e.Safety.Settings = &r.e.Settings
	r.e.Safety.Resumed = r.e.Resume.Covers
	r.e.Targets.Throttle, r.e.Targets.Max = &throttle, maxTargets
	r.e.Settings.Base.SetPolicy(&c)
	for i, o := range opts {
		if o == nil {
			errs = append(errs, &optionError{i: i, err: errors.New("interceptor: the option is nil")})
		} else if err := o(r); err != nil {
			errs = append(errs, &optionError{i: i, err: err})
		}
	}
	if r.e.Unsafe == nil {
		r.e.Unsafe = r.e.Safety.NotIdempotent
	}
	r.e.Prepare()
	errs = append(errs, r.checkHedging())
	r.e.Settings.All(func(_ string, e *settings.Entry) {
		r.timed = r.timed || e.Policy != nil && e.Policy.AttemptTimeout > 0
	})
	errs = append(errs, r.e.Resume.Check(r.resumeUnsafe))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// maxTargets is the number of targets past which a Retrier drops the idle
// ones (see targets.Registry).
var maxTargets = 1024

// optionError is the error of the option opts[i] given to New.
type optionError struct {
	i   int
	err error
}

// Error names the option on each line of its error.
func (e *optionError) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	for j, l := range lines {
		lines[j] = fmt.Sprintf("interceptor: opts[%d]: %s", e.i, strings.TrimPrefix(l, "interceptor: "))
	}
	return strings.Join(lines, "\n")
}

func (e *optionError) Unwrap() error { return e.err }

func mustNew(p grpcbackoff.Policy, opts []Option) *Retrier {
	r, err := New(p, opts...)
	if err != nil {
		panic(err.Error())
	}
	return r
}
