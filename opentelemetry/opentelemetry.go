// Package opentelemetry records what the retrying interceptors of
// github.com/platformkit/grpcbackoff/interceptor do as OpenTelemetry metrics,
// through the OpenTelemetry API only (no SDK dependency). It is a module of
// its own so that the interceptors cost nothing in OpenTelemetry to those who
// do not use it.
//
//	r, err := interceptor.New(p, opentelemetry.WithMeterProvider(otel.GetMeterProvider()))
package opentelemetry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// Metric names. Every metric has the attributes rpc.system.name ("grpc"),
// rpc.method ("pkg.Service/Method") and rpc.response.status_code (the code
// name, e.g. "UNAVAILABLE").
const (
	// MetricAttempts counts attempts as they end, by the attempt's code.
	MetricAttempts = "grpcbackoff.client.attempts"
	// MetricRetries counts the retries sent, by the code that caused them.
	MetricRetries = "grpcbackoff.client.retries"
	// MetricBackoff is a histogram of the waits before retries, in seconds.
	MetricBackoff = "grpcbackoff.client.backoff"
	// MetricGaveUp counts the calls that ended failing after a retry was
	// asked for, by the last code and by why retrying stopped (attribute
	// grpcbackoff.reason).
	MetricGaveUp = "grpcbackoff.client.gave_up"
)

// ReasonKey is the attribute that says why a call gave up (MetricGaveUp).
const ReasonKey = attribute.Key("grpcbackoff.reason")

var reasonValues = [...]string{
	grpcbackoff.ReasonExhausted:     "exhausted",
	grpcbackoff.ReasonNotRetryable:  "not_retryable",
	grpcbackoff.ReasonDeadline:      "deadline",
	grpcbackoff.ReasonCanceled:      "canceled",
	grpcbackoff.ReasonServerRefused: "server_refused",
	grpcbackoff.ReasonThrottled:     "throttled",

	grpcbackoff.ReasonRejectedLocally: "rejected_locally",
}

// WithMeterProvider records the metrics named Metric* with mp.
func WithMeterProvider(mp metric.MeterProvider) interceptor.Option {
	var err error
	if mp == nil {
		err = errors.New("opentelemetry: WithMeterProvider(nil): the meter provider is nil")
	} else if v := reflect.ValueOf(mp); v.Kind() == reflect.Pointer && v.IsNil() {
		err = fmt.Errorf("opentelemetry: WithMeterProvider((%T)(nil)): the meter provider is a nil pointer", mp)
	}
	var m *metrics
	if err == nil {
		m, err = newMetrics(mp)
	}
	if err != nil {
		return func(*interceptor.Retrier) error { return err }
	}
	return interceptor.WithObserver(m)
}

type metrics struct {
	attempts, retries, gaveUps metric.Int64Counter
	backoff                    metric.Float64Histogram
	attrs                      sync.Map // attrKey -> *measureOpts
}

// measureOpts are the options of one attribute set, made once so that
// recording allocates nothing.
type measureOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

type attrKey struct {
	method string
	code   codes.Code
	reason grpcbackoff.Reason
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	meter := mp.Meter("github.com/platformkit/grpcbackoff/opentelemetry")
	m := &metrics{}
	var err error
	if m.attempts, err = meter.Int64Counter(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of calls through the retry interceptors, by the attempt's status code.")); err != nil {
		return nil, err
	}
	if m.retries, err = meter.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries sent, by the status code that caused them.")); err != nil {
		return nil, err
	}
	if m.gaveUps, err = meter.Int64Counter(MetricGaveUp, metric.WithUnit("{call}"),
		metric.WithDescription("Calls that ended failing after retries or with a retry refused, by reason.")); err != nil {
		return nil, err
	}
	if m.backoff, err = meter.Float64Histogram(MetricBackoff, metric.WithUnit("s"),
		metric.WithDescription("Waits before retries."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) set(k attrKey) *measureOpts {
	if v, ok := m.attrs.Load(k); ok {
		return v.(*measureOpts)
	}
	kvs := []attribute.KeyValue{
		attribute.String("rpc.system.name", "grpc"),
		attribute.String("rpc.method", strings.TrimPrefix(k.method, "/")),
		attribute.String("rpc.response.status_code", codeName(k.code)),
	}
	if k.reason != 0 {
		kvs = append(kvs, ReasonKey.String(reasonValues[k.reason]))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kvs...))
	v, _ := m.attrs.LoadOrStore(k, &measureOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}})
	return v.(*measureOpts)
}

// OnRetry counts the failed attempt, and the retry unless it was refused
// (the call's end then counts the attempt).
func (m *metrics) OnRetry(ctx context.Context, r interceptor.Retry) {
	if r.Throttled {
		return
	}
	set := m.set(attrKey{method: r.Method, code: r.Code})
	m.attempts.Add(ctx, 1, set.add...)
	m.retries.Add(ctx, 1, set.add...)
	m.backoff.Record(ctx, r.Delay.Seconds(), set.record...)
}

// OnEnd counts the last attempt, if any (a call rejected locally by
// adaptive throttling made none), and the give-up.
func (m *metrics) OnEnd(ctx context.Context, e interceptor.End) {
	if e.Attempts > 0 {
		m.attempts.Add(ctx, 1, m.set(attrKey{method: e.Method, code: e.Code}).add...)
	}
	if e.Reason != 0 && !(e.Reason == grpcbackoff.ReasonNotRetryable && e.Attempts == 1) {
		m.gaveUps.Add(ctx, 1, m.set(attrKey{method: e.Method, code: e.Code, reason: e.Reason}).add...)
	}
}

// codeName returns the name gRPC's specification gives code c, such as
// "UNAVAILABLE" (codes.Code.String gives "Unavailable").
func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "UNKNOWN"
}

var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}
