package interceptor

import (
	"context"
	"errors"
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
//
// The Retriers given one provider (a pointer, as the SDK's is) share their
// counts and the one callback that reports them, so that making a Retrier
// per client leaves nothing behind; such a provider is kept for the life
// of the program.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(r *Retrier) error {
		if mp == nil {
			return errors.New("interceptor: WithMeterProvider(nil): the meter provider is nil")
		}
		m, err := metricsFor(mp)
		r.metrics = m
		return err
	}
}

// metricsByProvider holds the metrics of each meter provider that is a
// pointer. Other providers (noop.MeterProvider is a struct) get metrics per
// Retrier.
var metricsByProvider sync.Map // metric.MeterProvider -> *metrics

func metricsFor(mp metric.MeterProvider) (*metrics, error) {
	shared := reflect.ValueOf(mp).Kind() == reflect.Pointer
	if shared {
		if v, ok := metricsByProvider.Load(mp); ok {
			return v.(*metrics), nil
		}
	}
	m, reg, err := newMetrics(mp)
	if err != nil || !shared {
		return m, err
	}
	if v, loaded := metricsByProvider.LoadOrStore(mp, m); loaded {
		// Another Retrier made them meanwhile: use its.
		if err := reg.Unregister(); err != nil {
			return nil, err
		}
		return v.(*metrics), nil
	}
	return m, nil
}

type metrics struct {
	attempts, retries, gaveUps metric.Int64ObservableCounter
	backoff                    metric.Float64Histogram

	// series caches, per method, code and reason, the attribute options and
	// the counts, so that recording allocates nothing once they have been
	// seen.
	series sync.Map // attrKey -> *series
	// ok finds the series of successful attempts of a method without
	// hashing its name (which costs the success path ~13 ns): method names
	// are constants of the generated code, so the address of a name's
	// bytes picks a slot, and comparing the names confirms it.
	ok [1 << okSlotBits]atomic.Pointer[series]
}

const (
	okSlotBits  = 6
	okShardBits = 4
)

// fibHash returns the top bits of x times 2⁶⁴/φ (Fibonacci hashing): close
// values of x, such as addresses, spread over the 2^bits results.
func fibHash(x uint64, bits uint) uint64 {
	return (x * 0x9e3779b97f4a7c15) >> (64 - bits)
}

// series is one set of attributes. The counters' values are counted here
// and reported by a callback when the provider collects, rather than added
// to Int64Counters: an atomic addition costs a few nanoseconds, the SDK's
// Add some 150, on the success path of every call.
type series struct {
	method                     string
	attempts, retries, gaveUps atomic.Int64
	record                     []metric.RecordOption
	observe                    []metric.ObserveOption

	// okShards count the attempts of a series of code OK, one counter
	// per cache line, so that calls on several cores do not all write
	// the same line.
	okShards *[1 << okShardBits]okShard
}

type okShard struct {
	n atomic.Int64
	_ [56]byte // pad to a 64-byte cache line
}

// count returns the attempts counted so far.
func (s *series) count() int64 {
	n := s.attempts.Load()
	if s.okShards != nil {
		for i := range s.okShards {
			n += s.okShards[i].n.Load()
		}
	}
	return n
}

type attrKey struct {
	method string
	code   codes.Code
	reason grpcbackoff.Reason
}

// newMetrics makes the instruments and registers the callback that reports
// the counts, for as long as mp lives: the counts are cumulative, like those
// of a counter added to.
func newMetrics(mp metric.MeterProvider) (*metrics, metric.Registration, error) {
	meter := mp.Meter("github.com/platformkit/grpcbackoff/interceptor")
	m := &metrics{}
	var err error
	if m.attempts, err = meter.Int64ObservableCounter(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of calls through the retry interceptors, by the attempt's status code.")); err != nil {
		return nil, nil, err
	}
	if m.retries, err = meter.Int64ObservableCounter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries sent, by the status code that caused them.")); err != nil {
		return nil, nil, err
	}
	if m.gaveUps, err = meter.Int64ObservableCounter(MetricGaveUp, metric.WithUnit("{call}"),
		metric.WithDescription("Calls that ended failing after retries or with a retry refused, by reason.")); err != nil {
		return nil, nil, err
	}
	if m.backoff, err = meter.Float64Histogram(MetricBackoff, metric.WithUnit("s"),
		metric.WithDescription("Waits before retries."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)); err != nil {
		return nil, nil, err
	}
	reg, err := meter.RegisterCallback(m.observe, m.attempts, m.retries, m.gaveUps)
	if err != nil {
		return nil, nil, err
	}
	return m, reg, nil
}

// observe reports the counts so far.
func (m *metrics) observe(_ context.Context, o metric.Observer) error {
	m.series.Range(func(_, v any) bool {
		s := v.(*series)
		for _, c := range [...]struct {
			inst metric.Int64Observable
			n    int64
		}{{m.attempts, s.count()}, {m.retries, s.retries.Load()}, {m.gaveUps, s.gaveUps.Load()}} {
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
	s := &series{method: k.method, record: []metric.RecordOption{set}, observe: []metric.ObserveOption{set}}
	if k.code == codes.OK && k.reason == 0 {
		s.okShards = new([1 << okShardBits]okShard)
	}
	v, _ := m.series.LoadOrStore(k, s)
	return v.(*series)
}

func (m *metrics) attempt(method string, code codes.Code) {
	if code != codes.OK {
		m.get(attrKey{method: method, code: code}).attempts.Add(1)
		return
	}
	slot := &m.ok[fibHash(uint64(uintptr(unsafe.Pointer(unsafe.StringData(method)))), okSlotBits)]
	s := slot.Load()
	if s == nil || s.method != method {
		s = m.get(attrKey{method: method, code: codes.OK})
		slot.Store(s)
	}
	// The shard is picked by a hash of an address on the goroutine's
	// stack: a goroutine keeps its shard, and different goroutines, likely
	// on different cores, mostly get different ones.
	var here byte
	s.okShards[fibHash(uint64(uintptr(unsafe.Pointer(&here))>>10), okShardBits)].n.Add(1)
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
