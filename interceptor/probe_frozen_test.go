//go:build linux

package interceptor_test

// Red-team probe of issue 34: a frozen server process (SIGSTOP) over
// loopback TCP. A write cut by AttemptTimeout is never applied twice; a
// read is retried and recovers once the process resumes.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

const probeChildEnv = "GRPCBACKOFF_PROBE_FROZEN_CHILD"

// frozenChild is the server the child process runs: UnaryCall counts the
// requests it handles; EmptyCall answers the count in a header.
type frozenChild struct {
	testgrpc.UnimplementedTestServiceServer
	applied atomic.Int32
}

func (s *frozenChild) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.applied.Add(1)
	return &testgrpc.SimpleResponse{}, nil
}

func (s *frozenChild) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	grpc.SetHeader(ctx, metadata.Pairs("applied", fmt.Sprint(s.applied.Load())))
	return &testgrpc.Empty{}, nil
}

// TestProbeFrozenChildServer is the child process's server when the
// environment asks for it; otherwise it does nothing.
func TestProbeFrozenChildServer(t *testing.T) {
	if os.Getenv(probeChildEnv) == "" {
		t.Skip("the child process of TestProbeFrozenServerProcess")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &frozenChild{})
	fmt.Printf("addr %s\n", lis.Addr())
	go srv.Serve(lis)
	// Until the parent closes stdin (or dies).
	bufio.NewReader(os.Stdin).ReadString('\n')
	srv.Stop()
}

// startFrozenChild starts the child process and returns its address and
// its process.
func startFrozenChild(t *testing.T) (string, *os.Process) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestProbeFrozenChildServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), probeChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return addr, cmd.Process
		}
	}
	t.Fatal("the child process gave no address")
	return "", nil
}

// TestProbeFrozenServerProcess: a child process serves gRPC over loopback
// TCP and is frozen (SIGSTOP) with a connection open. With AttemptTimeout
// 200 ms and 3 attempts: a write (CallNotIdempotent) is cut once and not
// resent (it sits in the frozen process's socket and is applied when the
// process resumes): applied once in all; a read is cut and retried, and
// succeeds once the process resumes (SIGCONT after 500 ms), its deadline
// 10 s.
func TestProbeFrozenServerProcess(t *testing.T) {
	addr, proc := startFrozenChild(t)
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts, p.AttemptTimeout = 50*time.Millisecond, 50*time.Millisecond, 0, 3, 200*time.Millisecond
	cc, err := grpc.NewClient("passthrough:///"+addr, append(interceptor.DialOptions(p, interceptor.WithoutThrottle()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.EmptyCall(ctx, &testgrpc.Empty{}); err != nil { // the connection is up
		t.Fatal(err)
	}
	applied := func() string {
		var md metadata.MD
		if _, err := c.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Header(&md)); err != nil {
			t.Fatal(err)
		}
		return strings.Join(md.Get("applied"), ",")
	}

	// The write.
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	_, werr := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, interceptor.CallNotIdempotent())
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := applied(); got != "1" && got != "0" {
		t.Errorf("the write cut by AttemptTimeout while the server was frozen: err %v; applied %s times once it resumed, want at most once", werr, got)
	}

	// The read.
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := time.AfterFunc(500*time.Millisecond, func() { proc.Signal(syscall.SIGCONT) })
	defer resumed.Stop()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	// A read of the service: UnaryCall as idempotent.
	_, rerr := c.UnaryCall(rctx, &testgrpc.SimpleRequest{}, interceptor.CallIdempotent(), interceptor.CallMaxAttempts(20))
	if rerr != nil {
		t.Errorf("a read while the server was frozen for 500 ms (AttemptTimeout 200 ms, 20 attempts): %v; want success once it resumed", rerr)
	}
	t.Logf("write: %v; read: %v", werr, rerr)
}
