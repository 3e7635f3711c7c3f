package googleclients_test

// The scenarios of every Google client family (scenario_pubsub_test.go,
// scenario_bigtable_test.go, scenario_spanner_test.go, scenario_lro_test.go) run each client on its main
// paths twice: alone, and with the platform's standard options (one
// ClientOptions slice, and Adopt where the README shows it), against its
// in-process fake behind a bufconntest.Proxy, and compare what reaches the wire.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	btadmin "cloud.google.com/go/bigtable/admin/apiv2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// quick retries 4 times after 50, 100, 200, 200 ms: well within a 3 s
// deadline, so that the attempts end by MaxAttempts, not by the deadline.
func quick() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = 50*time.Millisecond, 200*time.Millisecond, 0, 5
	return p
}

// fakeEndpoint reaches an in-process fake server over loopback TCP.
func fakeEndpoint(addr string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// standard returns the platform's options: ClientOptions(quick()).
func standard(t *testing.T, opts ...interceptor.Option) []option.ClientOption {
	t.Helper()
	cos, err := gaxretry.ClientOptions(quick(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cos
}

// counted returns the platform's options, and what their Retrier retried.
func counted(t *testing.T) ([]option.ClientOption, *retried) {
	r := &retried{n: make(map[string]int)}
	return standard(t, interceptor.WithObserver(r)), r
}

// retried counts the retries a Retrier decided, by method.
type retried struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *retried) OnRetry(_ context.Context, e interceptor.Retry) {
	if !e.Throttled {
		r.mu.Lock()
		r.n[e.Method]++
		r.mu.Unlock()
	}
}

func (r *retried) OnEnd(context.Context, interceptor.End) {}

// of returns the retries of the methods whose name ends with suffix.
func (r *retried) of(suffix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bufconntest.SumBySuffix(r.n, suffix)
}

// with returns the options of a client of the fake at addr: the platform's
// options (none for the client alone) and the fake's endpoint.
func with(platform []option.ClientOption, addr string) []option.ClientOption {
	return append(append([]option.ClientOption(nil), platform...), fakeEndpoint(addr)...)
}

// unavailableFirst fails the first n attempts of the methods whose name ends
// with suffix with UNAVAILABLE.
func unavailableFirst(suffix string, n int) func(string, int) error {
	return func(method string, i int) error {
		if strings.HasSuffix(method, suffix) && i <= n {
			return status.Error(codes.Unavailable, "fake outage")
		}
		return nil
	}
}

// unavailableFor fails the attempts of the methods whose name ends with
// suffix with UNAVAILABLE for d from now: an outage. The attempts a client
// makes in it depend on its backoff's jitter; what the standard options must
// not change is who retries (see checkClientOnly).
func unavailableFor(suffix string, d time.Duration) func(string, int) error {
	return failFor(suffix, d, codes.Unavailable)
}

// failFor fails the attempts of the methods whose name ends with suffix with
// code for d from now.
func failFor(suffix string, d time.Duration, code codes.Code) func(string, int) error {
	end := time.Now().Add(d)
	return func(method string, _ int) error {
		if strings.HasSuffix(method, suffix) && time.Now().Before(end) {
			return status.Error(code, "fake outage")
		}
		return nil
	}
}

// checkClientOnly checks that a Google client that retries a method in its
// own code stays its only retry layer with the standard options: their
// Retrier retried none of its calls, so each of the client's attempts is
// one attempt on the wire, as alone. It logs the attempts on the wire.
func checkClientOnly(t *testing.T, what, suffix string, r *retried, alone, standard int) {
	t.Helper()
	t.Logf("%s: %d attempts alone, %d with the standard options", what, alone, standard)
	if n := r.of(suffix); n != 0 {
		t.Errorf("%s: the standard options retried %d times under the client's own retries (%d attempts on the wire, %d alone)", what, n, standard, alone)
	}
}

func TestAdoptBadInput(t *testing.T) {
	type wrongField struct{ Name string }
	var nilPtr *btadmin.BigtableTableAdminCallOptions
	cases := []struct {
		in   any
		want string
	}{
		{nil, "gaxretry: Adopt(<nil>): want a non-nil pointer to a client's CallOptions struct"},
		{nilPtr, "gaxretry: Adopt(*admin.BigtableTableAdminCallOptions): want a non-nil pointer to a client's CallOptions struct"},
		{btadmin.BigtableTableAdminCallOptions{}, "gaxretry: Adopt(admin.BigtableTableAdminCallOptions): want a non-nil pointer to a client's CallOptions struct"},
		{&wrongField{}, "gaxretry: Adopt(*googleclients_test.wrongField): field Name is string, want an exported []gax.CallOption"},
	}
	for _, tc := range cases {
		if err := gaxretry.Adopt(tc.in); err == nil || err.Error() != tc.want {
			t.Errorf("Adopt(%T) = %v, want %q", tc.in, err, tc.want)
		}
	}
}
