package guard_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestFairnessTCP is TestFairness over loopback TCP, with grpc-go's
// built-in retry: 20 clients, one connection each, all from 127.0.0.1,
// each failing one call in 20 once, beside a client that retries a failing
// call ten times as often as they call and ignores pushback. Retries are
// over 10% of the method's attempts whenever one of the 20 fails, yet each
// of their 400 calls succeeds on its retry while the noisy client is
// refused: the guard tells clients apart by their connection's port, not
// only by their address.
func TestFairnessTCP(t *testing.T) {
	const clients, rounds = 20, 20
	g := newGuard(t, guard.Options{})
	srv := bufconntest.NewServerTCP(t, func(id string, n int) bufconntest.Step {
		if strings.HasPrefix(id, "noisy") || n == 0 && strings.HasSuffix(id, "/fails") {
			return bufconntest.Fail(status.Error(codes.Unavailable, "down"))
		}
		return bufconntest.Succeed(1)
	}, g.ServerOptions()...)
	var good []testgrpc.TestServiceClient
	for range clients {
		good = append(good, srv.Client(t, grpc.WithDefaultServiceConfig(fastGRPCRetry)))
	}
	noisy := srv.Client(t) // its retries are made by hand, and ignore pushback
	var overAtFailure int
	over := func() bool { // a count of retries would refuse
		s := g.State("/grpc.testing.TestService/UnaryCall")
		return s.Retries > (s.FirstTries+s.Retries)/10
	}
	for r := range rounds {
		for k := range 10 {
			ctx := metadata.AppendToOutgoingContext(t.Context(), bufconntest.StreamKey, fmt.Sprintf("noisy/%d/%d", r, k),
				interceptor.PreviousAttemptsKey, strconv.Itoa(1+k))
			if _, err := noisy.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable {
				t.Fatalf("noisy retry: %v, want UNAVAILABLE", err)
			}
		}
		for c, client := range good {
			id := fmt.Sprintf("good/%d/%d", c, r)
			if (r+c)%rounds == 0 {
				id += "/fails"
				if over() {
					overAtFailure++
				}
			}
			if _, err := client.UnaryCall(callIDString(t, id), &testgrpc.SimpleRequest{}); err != nil {
				t.Errorf("client %d, call %d (%s): %v", c, r, id, err)
			}
		}
	}
	if s := g.State("/grpc.testing.TestService/UnaryCall"); s.Refused < 150 {
		t.Errorf("State = %+v, want most of the noisy client's 200 retries refused", s)
	}
	if overAtFailure < clients-2 {
		t.Errorf("retries were over 10%% of the attempts at %d of the %d failures of the good clients; the case does not test fairness", overAtFailure, clients)
	}
}

// fastGRPCRetry is grpcRetry with millisecond backoffs, for real time.
const fastGRPCRetry = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["UNAVAILABLE"]}}]}`

func callIDString(t *testing.T, id string) context.Context {
	return metadata.AppendToOutgoingContext(t.Context(), bufconntest.StreamKey, id)
}
