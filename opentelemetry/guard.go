package opentelemetry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/guard"
)

// The metrics of a server's retry guard (package guard), which a
// GuardRecorder records from guard.Options.OnMark, each with the
// attributes MethodKey, StatusKey and CriticalityKey.
const (
	// MetricGuardPaced counts the retriable failures the guard answered
	// with a pushback wait. Unit {failure}.
	MetricGuardPaced = "grpcbackoff.server.guard.paced"
	// MetricGuardRefused counts those it answered with pushback −1.
	// Unit {failure}.
	MetricGuardRefused = "grpcbackoff.server.guard.refused"
	// MetricGuardWait is the waits of the failures paced, in seconds, in
	// LatencyBuckets.
	MetricGuardWait = "grpcbackoff.server.guard.wait"
)

// CriticalityKey is the tier a call said, grpcbackoff.CriticalityKey's
// value ("CRITICAL_PLUS"…), or "" for none.
const CriticalityKey = attribute.Key("grpcbackoff.criticality")

// A GuardRecorder records what a server's retry guard paces and refuses,
// per method. It is safe for concurrent use; give its OnMark to
// guard.Options.OnMark.
//
//	gr, err := opentelemetry.NewGuardRecorder(opentelemetry.Options{MeterProvider: mp})
//	...
//	g, err := guard.New(guard.Options{OnMark: gr.OnMark})
//
// MethodKey is the method's name without its leading slash
// ("pkg.Service/Method") for a method the server registered, and "other"
// for one an unknown-service handler serves, unless
// Options.MethodAttributeFilter accepts its name: the rule of grpc-go's
// OpenTelemetry plugin for servers. Options.TargetAttributeFilter is not
// used.
type GuardRecorder struct {
	paced, refused metric.Int64Counter
	wait           metric.Float64Histogram
	methodFilter   func(string) bool
	sets           sync.Map // guardKey -> *guardSet
}

// guardKey is a label set's key: its MethodKey label (so that a flood of
// names an unknown-service handler serves makes one key, "other"), code
// and criticality.
type guardKey struct {
	method      string
	code        codes.Code
	criticality string
}

// guardSet holds the options of one label set, made once so that
// recording allocates nothing.
type guardSet struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// NewGuardRecorder returns a GuardRecorder, or an error if o.MeterProvider
// is a nil pointer or refuses an instrument.
func NewGuardRecorder(o Options) (*GuardRecorder, error) {
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	} else if v := reflect.ValueOf(mp); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("opentelemetry: NewGuardRecorder: Options.MeterProvider is a nil %T", mp)
	}
	meter := mp.Meter("github.com/platformkit/grpcbackoff/opentelemetry")
	r := &GuardRecorder{methodFilter: o.MethodAttributeFilter}
	var errs [3]error
	r.paced, errs[0] = meter.Int64Counter(MetricGuardPaced, metric.WithUnit("{failure}"),
		metric.WithDescription("Retriable failures a server's retry guard answered with a pushback wait."))
	r.refused, errs[1] = meter.Int64Counter(MetricGuardRefused, metric.WithUnit("{failure}"),
		metric.WithDescription("Retriable failures a server's retry guard answered with pushback -1, do not retry."))
	r.wait, errs[2] = meter.Float64Histogram(MetricGuardWait, metric.WithUnit("s"),
		metric.WithDescription("Waits a server's retry guard asked of the failures it paced."),
		metric.WithExplicitBucketBoundaries(LatencyBuckets...))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("opentelemetry: NewGuardRecorder: %w", err)
	}
	return r, nil
}

// OnMark records m, a failure the guard paced or refused.
func (r *GuardRecorder) OnMark(ctx context.Context, m guard.Mark) {
	set := r.set(guardKey{r.methodLabel(m), m.Code, m.Criticality})
	if m.Refused {
		r.refused.Add(ctx, 1, set.add...)
		return
	}
	r.paced.Add(ctx, 1, set.add...)
	r.wait.Record(ctx, m.Wait.Seconds(), set.record...)
}

// methodLabel returns the MethodKey label of m's method.
func (r *GuardRecorder) methodLabel(m guard.Mark) string {
	name := strings.TrimPrefix(m.Method, "/")
	if m.Registered || r.methodFilter != nil && r.methodFilter(name) {
		return name
	}
	return Other
}

// set returns the options of k's label set.
func (r *GuardRecorder) set(k guardKey) *guardSet {
	if v, ok := r.sets.Load(k); ok {
		return v.(*guardSet)
	}
	attrs := attribute.NewSet(MethodKey.String(k.method), StatusKey.String(codeName(k.code)), CriticalityKey.String(k.criticality))
	v, _ := r.sets.LoadOrStore(k, &guardSet{
		add:    []metric.AddOption{metric.WithAttributeSet(attrs)},
		record: []metric.RecordOption{metric.WithAttributeSet(attrs)},
	})
	return v.(*guardSet)
}
