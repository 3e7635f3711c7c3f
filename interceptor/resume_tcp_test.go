package interceptor_test

// Issue 43 over loopback TCP: a real server restart, several, and a GOAWAY
// mid-stream, resumed onto the server that takes the port. Real time, with
// a Policy of short waits.

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/logtail"
)

// quick is the Memorystore recipe 100 times faster.
func quick() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Jitter, p.Max = 10*time.Millisecond, 10*time.Millisecond, 320*time.Millisecond
	return p
}

// TestResumeRestartTCP: 1 000 records; the server restarts once the
// caller has 300 (and, in the second case, again at 600), or drains with
// GOAWAY after sending 300 and stops 100 later (one record every 100 µs,
// so that they reach the caller as they go): the caller sees the 1 000,
// once each, in order, the last open on the last server, asking for the
// rest from where the caller was.
func TestResumeRestartTCP(t *testing.T) {
	t.Parallel()
	hold := func(n int) logtail.Fault { return logtail.Fault{After: n, Hang: true} } // until the restart
	cases := []struct {
		name     string
		faults   []logtail.Fault
		restarts []int // the caller's counts at which the test restarts the server
		every    time.Duration
		gens     int
		offsets  []int64 // the offsets the opens ask for; nil: two opens, the second past 300
	}{
		{"one restart", []logtail.Fault{hold(300)}, []int{300}, 0, 2, []int64{0, 300}},
		{"two restarts", []logtail.Fault{hold(300), hold(300)}, []int{300, 600}, 0, 3, []int64{0, 300, 600}},
		{"GOAWAY", []logtail.Fault{{After: 300, GoAway: true, Drain: 100}}, nil, 100 * time.Microsecond, 2, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := logtail.NewServerTCP(t, logtail.Options{Records: 1000, Every: tc.every, Script: logtail.Faults(tc.faults...)})
			cc, err := grpc.NewClient("passthrough:///"+srv.Addr(), append(interceptor.DialOptions(quick(), (&nextOffset{}).option(tailMethod)),
				grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			r := runTail(ctx, logtail.NewLogTailClient(cc), &logtail.TailRequest{}, tailHow{OnRecv: func(n int, _ grpc.ClientStream) {
				if slices.Contains(tc.restarts, n) {
					srv.Restart()
				}
			}})
			if r.Err != nil {
				t.Fatalf("the stream ended with %v after %d records", r.Err, len(r.Offsets))
			}
			checkRecords(t, r, 0, 1000)
			opens := srv.Opens()
			offs := openOffsets(opens)
			t.Logf("%d opens asking for offsets %v", len(opens), offs)
			if last := opens[len(opens)-1]; last.Gen != tc.gens-1 {
				t.Errorf("the last open was on server %d, want %d", last.Gen, tc.gens-1)
			}
			if tc.offsets != nil && !slices.Equal(offs, tc.offsets) || tc.offsets == nil && (len(offs) != 2 || offs[0] != 0 || offs[1] <= 300) {
				t.Errorf("opens asked for offsets %v, want %v (nil: 0, then past 300)", offs, tc.offsets)
			}
			checkPreviousAttempts(t, opens)
		})
	}
}
