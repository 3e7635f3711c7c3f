//go:build linux

package fleetbudget_test

// Red-team probe of issue 35, item 6: one log line per outage, against a
// real redis-server of the probe's own, paused (SIGSTOP) and then killed
// and restarted on its port.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/fleetbudget"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// goRedisLines counts what go-redis logs on its process-wide logger.
type goRedisLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *goRedisLines) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *goRedisLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// startRedis starts redis-server on addr (no persistence) and returns its
// command; it is killed at the test's end.
func startRedis(t *testing.T, addr string) *exec.Cmd {
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--bind", host, "--port", port, "--save", "", "--appendonly", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Skipf("redis-server: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() })
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return cmd
		}
	}
	t.Fatalf("redis-server on %s did not answer", addr)
	return nil
}

// TestProbeOneLogLinePerRealOutage: a process joined to a real Redis;
// Redis is paused for 2 s (SIGSTOP: connections stay open, nothing
// answers), then resumed; later killed for 2 s and restarted on the same
// port. README: "logs it once (slog, Warn; and once Info when it joins
// again)", "One log line per outage from the whole module", go-redis
// logging nothing; each outage ends with the process joined again.
func TestProbeOneLogLinePerRealOutage(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	gl := &goRedisLines{}
	redis.SetLogger(gl)
	defer redis.SetLogger(&goRedisLines{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv := startRedis(t, addr)
	logs := new(syncBuffer)
	fleet, err := fleetbudget.New(fleetbudget.Options{URL: "redis://" + addr, LeasePeriod: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), fleet.Option())
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	joined := func() bool {
		r.Unary()(t.Context(), "/pkg.Svc/Get", nil, nil, nil, ok)
		return r.States()[0].Shared.Joined
	}
	waitJoined := func(want bool, within time.Duration) bool {
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if joined() == want {
				return true
			}
		}
		return false
	}
	hold := func(d time.Duration) { // calls meanwhile, as traffic would
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			joined()
		}
	}
	if !waitJoined(true, 5*time.Second) {
		t.Fatalf("never joined:\n%s", logs)
	}

	srv.Process.Signal(syscall.SIGSTOP)
	hold(2 * time.Second)
	fellBack := !joined()
	srv.Process.Signal(syscall.SIGCONT)
	back := waitJoined(true, 3*time.Second)
	t.Logf("paused: fell back %v, joined again %v", fellBack, back)

	srv.Process.Kill()
	srv.Wait()
	hold(2 * time.Second)
	fellBack2 := !joined()
	startRedis(t, addr)
	back2 := waitJoined(true, 3*time.Second)
	t.Logf("killed and restarted: fell back %v, joined again %v", fellBack2, back2)

	warns, infos := strings.Count(logs.String(), "cannot renew"), strings.Count(logs.String(), "renewed again")
	if !fellBack || !back || !fellBack2 || !back2 || warns != 2 || infos != 2 || len(gl.get()) != 0 {
		t.Errorf("two outages: fell back %v/%v, joined again %v/%v; %d warnings, %d returns, %d lines of go-redis; want true, true, 2, 2, 0. Logs:\n%s\ngo-redis:\n%s",
			fellBack, fellBack2, back, back2, warns, infos, len(gl.get()), logs, strings.Join(gl.get(), "\n"))
	}
}
