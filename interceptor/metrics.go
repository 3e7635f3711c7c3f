package interceptor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// Metric names, as recorded with WithMeterProvider. Every metric has the
// OpenTelemetry RPC attributes rpc.system.name ("grpc"), rpc.method
// ("pkg.Service/Method") and rpc.response.status_code (the code name, e.g.
// "UNAVAILABLE").
const (
	// MetricAttempts counts attempts as they end, by the attempt's code. A
	// stream's attempt ends when the caller's RecvMsg returns an error or
	// io.EOF (code OK).
	MetricAttempts = "grpcbackoff.client.attempts"
	// MetricRetries counts the retries sent, by the code that caused them.
	MetricRetries = "grpcbackoff.client.retries"
	// MetricBackoff is a histogram of the waits before retries, in seconds.
	MetricBackoff = "grpcbackoff.client.backoff"
	// MetricGaveUp counts the calls that ended with a retryable failure, or
	// after retries, by the last code and by why retrying stopped (attribute
	// grpcbackoff.reason: exhausted, throttled, deadline, canceled,
	// server_refused, not_retryable).
	MetricGaveUp = "grpcbackoff.client.gave_up"
)

// ReasonKey is the attribute that says why a call gave up (MetricGaveUp).
const ReasonKey = attribute.Key("grpcbackoff.reason")

var reasonValues = [...]string{
	grpcbackoff.Exhausted:     "exhausted",
	grpcbackoff.NotRetryable:  "not_retryable",
	grpcbackoff.Deadline:      "deadline",
	grpcbackoff.Canceled:      "canceled",
	grpcbackoff.ServerRefused: "server_refused",
	grpcbackoff.Throttled:     "throttled",
}

// WithMeterProvider records the metrics named Metric* with the meter
// provider mp (go.opentelemetry.io/otel/metric: no SDK needed unless you
// want one). Without it nothing is recorded and nothing is paid.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(r *Retrier) error {
		if mp == nil {
			return errors.New("interceptor: WithMeterProvider(nil): the meter provider is nil")
		}
		if v := reflect.ValueOf(mp); v.Kind() == reflect.Pointer && v.IsNil() {
			return fmt.Errorf("interceptor: WithMeterProvider((%T)(nil)): the meter provider is a nil pointer", mp)
		}
		m, err := newMetrics(mp)
		r.metrics = m
		return err
	}
}

type metrics struct {
	attempts, retries, gaveUps metric.Int64Counter
	backoff                    metric.Float64Histogram

	// attrs caches the attribute options per method, code and reason, so
	// that recording allocates nothing once they have been seen.
	attrs sync.Map // attrKey -> *measureOpts
	// ok finds the options of successful attempts of a method without
	// hashing its name, which would cost the success path ~10 ns: method
	// names are constants of the generated code, so the address of a
	// name's bytes picks a slot, and comparing the names confirms it. A
	// slot is filled once; methods that find theirs taken use attrs.
	ok [1 << okSlotBits]atomic.Pointer[measureOpts]
}

const okSlotBits = 6

type measureOpts struct {
	method string
	add    []metric.AddOption
	record []metric.RecordOption
}

type attrKey struct {
	method string
	code   codes.Code
	reason grpcbackoff.Reason
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	meter := mp.Meter("github.com/platformkit/grpcbackoff/interceptor")
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

// opts returns the cached measurement options for the attributes of k.
func (m *metrics) opts(k attrKey) *measureOpts {
	if v, ok := m.attrs.Load(k); ok {
		return v.(*measureOpts)
	}
	kvs := []attribute.KeyValue{
		semconv.RPCSystemNameGRPC,
		semconv.RPCMethodKey.String(strings.TrimPrefix(k.method, "/")),
		semconv.RPCResponseStatusCodeKey.String(codeName(k.code)),
	}
	if k.reason != 0 {
		kvs = append(kvs, ReasonKey.String(reasonValues[k.reason]))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kvs...))
	o := &measureOpts{method: k.method, add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	v, _ := m.attrs.LoadOrStore(k, o)
	return v.(*measureOpts)
}

func (m *metrics) attempt(method string, code codes.Code) {
	if code != codes.OK {
		m.attempts.Add(context.Background(), 1, m.opts(attrKey{method: method, code: code}).add...)
		return
	}
	// Fibonacci hashing: the top bits of the address times 2⁶⁴/φ.
	slot := &m.ok[(uint64(uintptr(unsafe.Pointer(unsafe.StringData(method))))*0x9e3779b97f4a7c15)>>(64-okSlotBits)]
	o := slot.Load()
	if o == nil || o.method != method {
		o = m.opts(attrKey{method: method, code: codes.OK})
		slot.CompareAndSwap(nil, o)
	}
	m.attempts.Add(context.Background(), 1, o.add...)
}

func (m *metrics) retry(method string, code codes.Code, d time.Duration) {
	o := m.opts(attrKey{method: method, code: code})
	m.retries.Add(context.Background(), 1, o.add...)
	m.backoff.Record(context.Background(), d.Seconds(), o.record...)
}

func (m *metrics) gaveUp(method string, code codes.Code, why grpcbackoff.Reason) {
	m.gaveUps.Add(context.Background(), 1, m.opts(attrKey{method: method, code: code, reason: why}).add...)
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
