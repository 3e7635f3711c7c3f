// Package opentelemetry records what the retrying interceptors of
// github.com/platformkit/grpcbackoff/interceptor do, in the OpenTelemetry
// form the gRPC ecosystem already reads: the per-call retry metrics of gRFC
// A96 with the labels of gRFC A66, events on the caller's span, and gauges
// of the retry budgets. It uses the OpenTelemetry API only (no SDK), and is a
// module of its own so that the interceptors cost nothing in OpenTelemetry to
// those who do not use it.
//
//	rec, err := opentelemetry.New(opentelemetry.Options{MeterProvider: mp})
//	...
//	conn, err := grpc.NewClient(target, append(interceptor.DialOptions(p, rec.Option()), creds)...)
//
// # Metrics
//
// The A96 histograms, recorded once when a call ends, with the attributes
// grpc.method and grpc.target:
//
//   - grpc.client.call.retries ({retry}; buckets 1, 2, 3, 4, 5): the retries
//     of a call that made at least one.
//   - grpc.client.call.hedges ({hedge}; buckets 1, 2, 3, 4, 5): the hedges of
//     a call that made at least one (interceptor.WithHedging).
//   - grpc.client.call.retry_delay (s; the A66 latency buckets): the time the
//     call spent with no attempt in flight (interceptor.End.Delay), for a call
//     that retried, hedged or waited. A call with a single attempt and no wait
//     records nothing, as in gRPC C++.
//   - grpc.client.call.transparent_retries ({transparent_retry}; buckets 1, 2,
//     3, 4, 5, 10): created but never recorded. grpc-go makes transparent
//     retries below interceptors and reports them to stats handlers only
//     (stats.Begin.IsTransparentRetryAttempt); an interceptor never sees them.
//
// grpc.method is the method name without its leading slash
// ("pkg.Service/Method") for calls that carry grpc.StaticMethod(), as the
// calls of generated stubs do, and "other" for the others unless
// Options.MethodAttributeFilter accepts them: the rule of grpc-go's own
// OpenTelemetry plugin for clients. grpc.target is the canonical target of
// the call's ClientConn ("dns:///example.com:443"), or "other" when
// Options.TargetAttributeFilter rejects it.
//
// Our own metrics, where A96 has no equivalent, are prefixed grpcbackoff.:
// MetricCallGaveUp, MetricBudgetRefused, MetricBudgetAvailable,
// MetricThrottleRejectionProbability and MetricCallRejected, and for
// budgets shared by a fleet (the fleetbudget module) MetricFleetLeases and
// MetricFleetFallbacks, read through the interceptor's seam: this module
// imports no Redis client.
//
// # A server's retry guard
//
// A GuardRecorder counts what a server's retry guard (package guard) paces
// and refuses, per method: MetricGuardPaced, MetricGuardRefused and the
// waits, MetricGuardWait. The guard itself logs a line when a method goes
// over and back (guard.Options.Logger).
//
// # Traces
//
// On the span in the call's context (trace.SpanFromContext), when it is
// recording: an event EventRetry per retry, and an event EventGaveUp when the
// call gives up (interceptor.End.GaveUp). The package creates no span.
//
// # With grpc-go's own plugin
//
// google.golang.org/grpc/stats/opentelemetry records per-attempt and per-call
// metrics (grpc.client.attempt.*, grpc.client.call.duration) with the same
// grpc.method and grpc.target, but not A96's. Its interceptor sees a call as
// the interceptors around it make it: given before ours in the dial options,
// it is outside them and sees one call per caller's call (its
// grpc.client.call.duration includes the waits between attempts, and its
// grpc.client.attempt.started counts each of our attempts); given after, it
// is inside and sees each of our attempts as a call of its own.
package opentelemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// The metrics of gRFC A96, with the attributes MethodKey and TargetKey.
const (
	MetricCallRetries            = "grpc.client.call.retries"
	MetricCallTransparentRetries = "grpc.client.call.transparent_retries"
	MetricCallHedges             = "grpc.client.call.hedges"
	MetricCallRetryDelay         = "grpc.client.call.retry_delay"
)

// Our own metrics.
const (
	// MetricCallGaveUp counts the calls that gave up (interceptor.End.GaveUp),
	// with the attributes MethodKey, TargetKey, StatusKey (the last code)
	// and ReasonKey. Unit {call}.
	MetricCallGaveUp = "grpcbackoff.client.call.gave_up"
	// MetricBudgetRefused counts the attempts the retry budget refused, each
	// once, with the attributes MethodKey, TargetKey and AttemptTypeKey.
	// Unit {attempt}. A retry the server refused (pushback −1, as a retry
	// guard sends) is not the budget's and is not counted here: its call
	// gives up with ReasonKey "server_refused".
	MetricBudgetRefused = "grpcbackoff.client.budget.refused"
	// MetricCallRejected counts the calls that adaptive client-side
	// throttling (interceptor.WithAdaptiveThrottle) rejected without sending
	// an attempt, with the attributes MethodKey and TargetKey. Unit {call}.
	MetricCallRejected = "grpcbackoff.client.call.rejected"
	// MetricBudgetAvailable is a gauge of the retries the retry budget
	// serving a target could pay for now, with the attribute TargetKey (the
	// sum over the budgets of the Retrier's targets that share a label).
	// Unit {retry}. It reads the Retriers built with Recorder.Option.
	MetricBudgetAvailable = "grpcbackoff.client.budget.available"
	// MetricThrottleRejectionProbability is a gauge of the probability, from
	// 0 to 1, that the adaptive throttle rejects a call to a target, with
	// the attribute TargetKey (the highest over the Retriers that share a
	// label). Unit 1. It is 0 for a target without adaptive throttling.
	MetricThrottleRejectionProbability = "grpcbackoff.client.throttle.rejection_probability"
	// MetricFleetLeases counts the leases of fleet-wide retry budgets this
	// process received (interceptor.WithSharedBudget, as the fleetbudget
	// module sets it), with the attribute TargetKey; MetricFleetFallbacks
	// the times such a budget fell back to the process's share of it, its
	// shared state out of reach. Units {lease} and {fallback}. Both read
	// TargetState.Shared of the Retriers built with Recorder.Option, each
	// budget once however many Retriers share it.
	MetricFleetLeases    = "grpcbackoff.client.budget.fleet.leases"
	MetricFleetFallbacks = "grpcbackoff.client.budget.fleet.fallbacks"
)

// Metric attributes.
const (
	// MethodKey is gRFC A66's grpc.method: "pkg.Service/Method" or "other".
	MethodKey = attribute.Key("grpc.method")
	// TargetKey is gRFC A66's grpc.target: the canonical target, or "other".
	TargetKey = attribute.Key("grpc.target")
	// StatusKey is gRFC A66's grpc.status: a code's name, as "UNAVAILABLE".
	StatusKey = attribute.Key("grpc.status")
	// ReasonKey says why a call gave up: "exhausted", "not_retryable",
	// "deadline", "canceled", "server_refused" (the server asked not to
	// retry: a negative pushback, as a server's retry guard sends, or a
	// delay past grpcbackoff.MaxHintDelay), "throttled" (the retry budget,
	// the process's or the fleet's, could not pay), "rejected_locally"
	// (adaptive throttling) or "grpc_retries" (grpc-go's own retry had the
	// failure: an xDS route's retry_policy, under XDSDialOptions).
	ReasonKey = attribute.Key("grpcbackoff.reason")
	// AttemptTypeKey says what kind of attempt the budget refused: "retry"
	// or "hedge".
	AttemptTypeKey = attribute.Key("grpcbackoff.attempt_type")
)

// Span events and their attributes. Durations are float64 seconds.
const (
	// EventRetry is added when an attempt failed and the call will retry,
	// with AttemptKey (the failed attempt, from 1), StatusKey (its code),
	// DelayKey (the wait before the next attempt) and ServerDelayKey (the
	// delay the server asked for; 0 if none).
	EventRetry = "grpcbackoff.retry"
	// EventHedge is added when a hedge is sent, with AttemptKey (the
	// attempts before it), StatusKey (the code of the last attempt that
	// failed with a non-fatal code, OK if none did) and DelayKey (the time
	// since the attempt before it was sent).
	EventHedge = "grpcbackoff.hedge"
	// EventGaveUp is added when the call gives up, with AttemptsKey,
	// StatusKey (the last code), ReasonKey and RetryDelayKey (the call's
	// total time with no attempt in flight). A retry refused by the budget
	// has no EventRetry: the call gives up with reason "throttled".
	EventGaveUp = "grpcbackoff.gave_up"

	AttemptKey     = attribute.Key("grpcbackoff.attempt")
	AttemptsKey    = attribute.Key("grpcbackoff.attempts")
	DelayKey       = attribute.Key("grpcbackoff.delay")
	ServerDelayKey = attribute.Key("grpcbackoff.server_delay")
	RetryDelayKey  = attribute.Key("grpcbackoff.retry_delay")
)

// LatencyBuckets are gRFC A66's latency bucket boundaries, in seconds, used
// by MetricCallRetryDelay.
var LatencyBuckets = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002,
	0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065,
	0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}

// Other is the value of MethodKey and TargetKey for the methods and targets
// not recorded by name.
const Other = "other"

var reasonValues = [...]string{
	grpcbackoff.ReasonExhausted:     "exhausted",
	grpcbackoff.ReasonNotRetryable:  "not_retryable",
	grpcbackoff.ReasonDeadline:      "deadline",
	grpcbackoff.ReasonCanceled:      "canceled",
	grpcbackoff.ReasonServerRefused: "server_refused",
	grpcbackoff.ReasonThrottled:     "throttled",

	grpcbackoff.ReasonRejectedLocally: "rejected_locally",
	grpcbackoff.ReasonGRPCRetries:     "grpc_retries",
}

// Options configure a Recorder.
type Options struct {
	// MeterProvider records the metrics; nil: otel.GetMeterProvider() at New.
	MeterProvider metric.MeterProvider
	// MethodAttributeFilter, when set, is asked about each method called
	// without grpc.StaticMethod() ("pkg.Service/Method"): true records its
	// name, false records "other". Unset: all such methods are "other".
	// Take care to accept few names: each one is a time series.
	MethodAttributeFilter func(method string) bool
	// TargetAttributeFilter, when set, is asked about each canonical target,
	// once: true records it, false records "other". Unset: every target is
	// recorded.
	TargetAttributeFilter func(target string) bool
}

// A Recorder records the calls of the Retriers it is an option of, and the
// state of their budgets. It is safe for concurrent use, and its methods
// OnRetry and OnEnd make it an interceptor.Observer.
type Recorder struct {
	retries, hedges           metric.Int64Histogram
	retryDelay                metric.Float64Histogram
	gaveUp, refused, rejected metric.Int64Counter

	methodFilter, targetFilter func(string) bool

	targets sync.Map // raw target -> string, its label, from the ClientConn
	guesses sync.Map // raw target -> string, its label, guessed without it
	sets    sync.Map // labelKey -> *labelSet
	gaveUps sync.Map // gaveUpKey -> []metric.AddOption

	mu       sync.Mutex
	retriers []weak.Pointer[interceptor.Retrier] // for the gauges
}

// labelKey is a call's grpc.method label and raw target.
type labelKey struct{ method, target string }

// labelSet holds the options of one label set, made once so that recording
// allocates nothing.
type labelSet struct {
	key     labelKey
	target  string // the grpc.target label
	record  []metric.RecordOption
	add     []metric.AddOption // method and target
	refused []metric.AddOption // with AttemptTypeKey "retry"
	hedge   []metric.AddOption // with AttemptTypeKey "hedge"
}

type gaveUpKey struct {
	labelKey
	code   codes.Code
	reason grpcbackoff.Reason
}

// New returns a Recorder, or an error if o.MeterProvider is a nil pointer or
// refuses an instrument. A Recorder registers the callback of its gauges
// with the meter provider for as long as the provider lives: make one per
// provider and give its Option to every connection.
func New(o Options) (*Recorder, error) {
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	} else if v := reflect.ValueOf(mp); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("opentelemetry: New: Options.MeterProvider is a nil %T", mp)
	}
	meter := mp.Meter("github.com/platformkit/grpcbackoff/opentelemetry")
	rec := &Recorder{methodFilter: o.MethodAttributeFilter, targetFilter: o.TargetAttributeFilter}
	var errs [9]error
	rec.retries, errs[0] = meter.Int64Histogram(MetricCallRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Number of retries during the client call. If there were no retries, 0 is not reported."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5))
	_, errs[1] = meter.Int64Histogram(MetricCallTransparentRetries, metric.WithUnit("{transparent_retry}"),
		metric.WithDescription("Number of transparent retries during the client call. Never recorded: grpc-go does not show them to interceptors."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 10))
	rec.hedges, errs[2] = meter.Int64Histogram(MetricCallHedges, metric.WithUnit("{hedge}"),
		metric.WithDescription("Number of hedges during the client call. If there were no hedges, 0 is not reported."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5))
	rec.retryDelay, errs[3] = meter.Float64Histogram(MetricCallRetryDelay, metric.WithUnit("s"),
		metric.WithDescription("Total time of delay while there is no active attempt during the client call."),
		metric.WithExplicitBucketBoundaries(LatencyBuckets...))
	rec.gaveUp, errs[4] = meter.Int64Counter(MetricCallGaveUp, metric.WithUnit("{call}"),
		metric.WithDescription("Calls that ended failing after a retry was asked for, by reason."))
	rec.refused, errs[5] = meter.Int64Counter(MetricBudgetRefused, metric.WithUnit("{attempt}"),
		metric.WithDescription("Retries and hedges refused by the retry budget."))
	rec.rejected, errs[8] = meter.Int64Counter(MetricCallRejected, metric.WithUnit("{call}"),
		metric.WithDescription("Calls rejected locally by adaptive client-side throttling, without an attempt."))
	available, err := meter.Float64ObservableGauge(MetricBudgetAvailable, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries the retry budget serving the target could pay for now."))
	errs[6] = err
	probability, err := meter.Float64ObservableGauge(MetricThrottleRejectionProbability, metric.WithUnit("1"),
		metric.WithDescription("Probability that the adaptive throttle rejects a call to the target (0: no adaptive throttle)."))
	errs[7] = err
	var fleet fleetCounters
	var errLeases, errFallbacks error
	fleet.leases, errLeases = meter.Int64ObservableCounter(MetricFleetLeases, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases of fleet-wide retry budgets received by this process."))
	fleet.fallbacks, errFallbacks = meter.Int64ObservableCounter(MetricFleetFallbacks, metric.WithUnit("{fallback}"),
		metric.WithDescription("Times a fleet-wide retry budget fell back to this process's share of it."))
	if err := errors.Join(append(errs[:], errLeases, errFallbacks)...); err != nil {
		return nil, fmt.Errorf("opentelemetry: New: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		rec.observeBudgets(o, available, probability, fleet)
		return nil
	}, available, probability, fleet.leases, fleet.fallbacks)
	if err != nil {
		return nil, fmt.Errorf("opentelemetry: New: %w", err)
	}
	return rec, nil
}

// Option returns the option that makes rec an observer of the Retrier that
// interceptor.New (or DialOptions, Unary, Stream) builds with it, and adds
// that Retrier to the ones whose budgets the gauges read. rec holds the
// Retrier weakly: once the Retrier's connection is closed and dropped, its
// gauges go. (A Retrier whose New failed on another option is reported
// until it is collected.) Giving rec to interceptor.WithObserver instead
// records the calls but not the budget.
func (rec *Recorder) Option() interceptor.Option {
	observe := interceptor.WithObserver(rec)
	return func(r *interceptor.Retrier) error {
		if err := observe(r); err != nil {
			return err
		}
		rec.mu.Lock()
		rec.retriers = append(rec.retriers, weak.Make(r))
		rec.mu.Unlock()
		return nil
	}
}

// OnRetry counts a retry or hedge the budget refused, and adds EventRetry
// (EventHedge) for one sent to the span of ctx, if it is recording.
func (rec *Recorder) OnRetry(ctx context.Context, r interceptor.Retry) {
	if r.Throttled {
		set := rec.labels(r.Method, r.StaticMethod, r.Target, r.Conn)
		if r.Hedge {
			rec.refused.Add(ctx, 1, set.hedge...)
		} else {
			rec.refused.Add(ctx, 1, set.refused...)
		}
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	name := EventRetry
	if r.Hedge {
		name = EventHedge
	}
	span.AddEvent(name, trace.WithAttributes(
		AttemptKey.Int(r.Attempt),
		StatusKey.String(codeName(r.Code)),
		DelayKey.Float64(r.Delay.Seconds()),
		ServerDelayKey.Float64(r.Hint.Delay.Seconds()),
	))
}

// OnEnd records the call's metrics, and EventGaveUp if it gave up. A call
// with a single attempt and no wait that did not give up records nothing.
func (rec *Recorder) OnEnd(ctx context.Context, e interceptor.End) {
	if e.Reason == grpcbackoff.ReasonRejectedLocally && e.Attempts == 0 {
		rec.rejected.Add(ctx, 1, rec.labelSet(e).add...)
		return
	}
	retries := e.Attempts - 1 - e.Hedges
	gaveUp := e.GaveUp()
	if retries <= 0 && e.Hedges <= 0 && e.Delay <= 0 && !gaveUp {
		return
	}
	set := rec.labelSet(e)
	if retries > 0 {
		rec.retries.Record(ctx, int64(retries), set.record...)
	}
	if e.Hedges > 0 {
		rec.hedges.Record(ctx, int64(e.Hedges), set.record...)
	}
	if retries > 0 || e.Hedges > 0 || e.Delay > 0 {
		rec.retryDelay.Record(ctx, e.Delay.Seconds(), set.record...)
	}
	if !gaveUp {
		return
	}
	rec.gaveUp.Add(ctx, 1, rec.gaveUpOptions(set, e.Code, e.Reason)...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(EventGaveUp, trace.WithAttributes(
			AttemptsKey.Int(e.Attempts),
			StatusKey.String(codeName(e.Code)),
			ReasonKey.String(reasonName(e.Reason)),
			RetryDelayKey.Float64(e.Delay.Seconds()),
		))
	}
}

// methodLabel returns the grpc.method label of a call to method.
func (rec *Recorder) methodLabel(method string, static bool) string {
	name := strings.TrimPrefix(method, "/")
	if static || rec.methodFilter != nil && rec.methodFilter(name) {
		return name
	}
	return Other
}

// targetLabel returns the grpc.target label of raw, a ClientConn's Target(),
// with conn, that ClientConn, if known. A label is computed once from
// conn.CanonicalTarget(), and, until a call on the target brings its
// ClientConn, once from a guess (canonicalTarget).
func (rec *Recorder) targetLabel(raw string, conn *grpc.ClientConn) string {
	if v, ok := rec.targets.Load(raw); ok {
		return v.(string)
	}
	cache := &rec.targets
	if conn == nil {
		if v, ok := rec.guesses.Load(raw); ok {
			return v.(string)
		}
		cache = &rec.guesses
	}
	var canonical string
	if conn != nil {
		canonical = conn.CanonicalTarget()
	} else {
		canonical = canonicalTarget(raw)
	}
	t := canonical
	if rec.targetFilter != nil && !rec.targetFilter(t) {
		t = Other
	}
	if conn != nil {
		// The gauges read Retrier.States, which names targets by their
		// canonical form: the label of that form is this one.
		rec.guesses.LoadOrStore(canonical, t)
	}
	v, _ := cache.LoadOrStore(raw, t)
	return v.(string)
}

// canonicalTarget guesses the canonical form of raw, a ClientConn's target,
// without the ClientConn: raw itself if its scheme has a resolver registered
// globally, otherwise raw under grpc.NewClient's default scheme, "dns" (or
// the one set with resolver.SetDefaultScheme). It misses the schemes of
// resolvers given to one ClientConn only (grpc.WithResolvers).
func canonicalTarget(raw string) string {
	if raw == "" {
		return ""
	}
	if u, err := url.Parse(raw); err == nil && resolver.Get(u.Scheme) != nil {
		return resolver.Target{URL: *u}.String()
	}
	scheme := "dns"
	if s := resolver.GetDefaultScheme(); s != "passthrough" {
		scheme = s
	}
	u, err := url.Parse(scheme + ":///" + raw)
	if err != nil {
		return raw
	}
	return resolver.Target{URL: *u}.String()
}

// labelSet returns the label set of the call that ended with e.
func (rec *Recorder) labelSet(e interceptor.End) *labelSet {
	return rec.labels(e.Method, e.StaticMethod, e.Target, e.Conn)
}

// labels returns the label sets of a call of method on a ClientConn conn
// whose target is raw.
func (rec *Recorder) labels(method string, static bool, raw string, conn *grpc.ClientConn) *labelSet {
	k := labelKey{method: rec.methodLabel(method, static), target: raw}
	if v, ok := rec.sets.Load(k); ok {
		return v.(*labelSet)
	}
	target := rec.targetLabel(raw, conn)
	attrs := metric.WithAttributeSet(attribute.NewSet(MethodKey.String(k.method), TargetKey.String(target)))
	refused := func(kind string) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			MethodKey.String(k.method), TargetKey.String(target), AttemptTypeKey.String(kind)))}
	}
	v, _ := rec.sets.LoadOrStore(k, &labelSet{
		key:     k,
		target:  target,
		record:  []metric.RecordOption{attrs},
		add:     []metric.AddOption{attrs},
		refused: refused("retry"),
		hedge:   refused("hedge"),
	})
	return v.(*labelSet)
}

func (rec *Recorder) gaveUpOptions(set *labelSet, code codes.Code, reason grpcbackoff.Reason) []metric.AddOption {
	k := gaveUpKey{labelKey: set.key, code: code, reason: reason}
	if v, ok := rec.gaveUps.Load(k); ok {
		return v.([]metric.AddOption)
	}
	opts := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		MethodKey.String(set.key.method), TargetKey.String(set.target),
		StatusKey.String(codeName(code)), ReasonKey.String(reasonName(reason))))}
	v, _ := rec.gaveUps.LoadOrStore(k, opts)
	return v.([]metric.AddOption)
}

// observeBudgets reports the gauges of the live Retriers built with
// rec.Option, and forgets the others.
func (rec *Recorder) observeBudgets(o metric.Observer, available, probability metric.Float64Observable, fleet fleetCounters) {
	rec.mu.Lock()
	live := rec.retriers[:0]
	var retriers []*interceptor.Retrier
	for _, w := range rec.retriers {
		if r := w.Value(); r != nil {
			live = append(live, w)
			retriers = append(retriers, r)
		}
	}
	clear(rec.retriers[len(live):])
	rec.retriers = live
	rec.mu.Unlock()

	sums := map[string]float64{}       // retries the budgets could pay, by label
	highest := map[string]float64{}    // rejection probability, by label
	shared := map[[2]string][2]int64{} // leases and fallbacks, by label and budget name
	var order []string
	for _, r := range retriers {
		for _, s := range r.States() {
			t := rec.targetLabel(s.Target, nil)
			if sh := s.Shared; sh != nil {
				k, v := [2]string{t, sh.Name}, shared[[2]string{t, sh.Name}]
				shared[k] = [2]int64{max(v[0], sh.Leases), max(v[1], sh.Fallbacks)}
			}
			if _, ok := highest[t]; !ok {
				order = append(order, t)
			}
			highest[t] = max(highest[t], s.RejectProbability)
			if !math.IsInf(s.Retries, 1) { // +Inf: no throttle, no budget to show
				sums[t] += s.Retries
			}
		}
	}
	for _, t := range order {
		attrs := metric.WithAttributeSet(attribute.NewSet(TargetKey.String(t)))
		if v, ok := sums[t]; ok {
			o.ObserveFloat64(available, v, attrs)
		}
		o.ObserveFloat64(probability, highest[t], attrs)
	}
	counts := map[string][2]int64{}
	for k, v := range shared {
		c := counts[k[0]]
		counts[k[0]] = [2]int64{c[0] + v[0], c[1] + v[1]}
	}
	for _, t := range order {
		if c, ok := counts[t]; ok {
			attrs := metric.WithAttributeSet(attribute.NewSet(TargetKey.String(t)))
			o.ObserveInt64(fleet.leases, c[0], attrs)
			o.ObserveInt64(fleet.fallbacks, c[1], attrs)
		}
	}
}

// fleetCounters are the counters of fleet-wide budgets.
type fleetCounters struct {
	leases, fallbacks metric.Int64ObservableCounter
}

func reasonName(r grpcbackoff.Reason) string {
	if r > 0 && int(r) < len(reasonValues) {
		return reasonValues[r]
	}
	return "unknown"
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
