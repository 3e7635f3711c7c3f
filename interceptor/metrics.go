package interceptor

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// The three counters are observable counters: each call counts with an
// atomic addition, and the values are read when the provider collects. They
// are monotonic cumulative sums, as those of counters added to would be,
// summed over every Retrier that shares the provider.

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
		m, err := newMetrics(mp)
		r.metrics = m
		return err
	}
}

type metrics struct {
	attempts, retries, gaveUps metric.Int64ObservableCounter
	backoff                    metric.Float64Histogram

	// series caches, per method, code and reason, the attribute options and
	// the count of attempts, so that recording allocates nothing once they
	// have been seen; ok holds those of successful attempts by method
	// alone, for the success path (a string key hashes faster than a
	// struct).
	series sync.Map // attrKey -> *series
	ok     sync.Map // method -> *series
}

// series is one set of attributes. The counters' values are counted here
// and reported by a callback when the provider collects, rather than added
// to Int64Counters: an atomic addition costs a few nanoseconds, the SDK's
// Add some 150, on the success path of every call.
type series struct {
	attempts, retries, gaveUps atomic.Int64
	record                     []metric.RecordOption
	observe                    []metric.ObserveOption
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
	if m.attempts, err = meter.Int64ObservableCounter(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of calls through the retry interceptors, by the attempt's status code.")); err != nil {
		return nil, err
	}
	if m.retries, err = meter.Int64ObservableCounter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries sent, by the status code that caused them.")); err != nil {
		return nil, err
	}
	if m.gaveUps, err = meter.Int64ObservableCounter(MetricGaveUp, metric.WithUnit("{call}"),
		metric.WithDescription("Calls that ended failing after retries or with a retry refused, by reason.")); err != nil {
		return nil, err
	}
	// The registration lasts as long as mp: the counts it reports are
	// cumulative, like those of a counter added to.
	if _, err = meter.RegisterCallback(m.observe, m.attempts, m.retries, m.gaveUps); err != nil {
		return nil, err
	}
	if m.backoff, err = meter.Float64Histogram(MetricBackoff, metric.WithUnit("s"),
		metric.WithDescription("Waits before retries."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)); err != nil {
		return nil, err
	}
	return m, nil
}

// observe reports the counts so far.
func (m *metrics) observe(_ context.Context, o metric.Observer) error {
	m.series.Range(func(_, v any) bool {
		s := v.(*series)
		for _, c := range [...]struct {
			inst metric.Int64Observable
			n    int64
		}{{m.attempts, s.attempts.Load()}, {m.retries, s.retries.Load()}, {m.gaveUps, s.gaveUps.Load()}} {
			if c.n > 0 {
				o.ObserveInt64(c.inst, c.n, s.observe...)
			}
		}
		return true
	})
	return nil
}

// get returns the cached series of the attributes of k.
func (m *metrics) get(k attrKey) *series {
	if v, ok := m.series.Load(k); ok {
		return v.(*series)
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
	s := &series{record: []metric.RecordOption{set}, observe: []metric.ObserveOption{set}}
	v, _ := m.series.LoadOrStore(k, s)
	return v.(*series)
}

func (m *metrics) attempt(method string, code codes.Code) {
	if code != codes.OK {
		m.get(attrKey{method: method, code: code}).attempts.Add(1)
		return
	}
	v, ok := m.ok.Load(method)
	if !ok {
		v, _ = m.ok.LoadOrStore(method, m.get(attrKey{method: method, code: codes.OK}))
	}
	v.(*series).attempts.Add(1)
}

func (m *metrics) retry(method string, code codes.Code, d time.Duration) {
	s := m.get(attrKey{method: method, code: code})
	s.retries.Add(1)
	m.backoff.Record(context.Background(), d.Seconds(), s.record...)
}

func (m *metrics) gaveUp(method string, code codes.Code, why grpcbackoff.Reason) {
	m.get(attrKey{method: method, code: code, reason: why}).gaveUps.Add(1)
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
