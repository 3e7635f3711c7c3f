package fleetbudget

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// period is the tests' lease period. The leases' arithmetic runs on the
// tests' own clock; only the Redis client's timeouts, a quarter of it, are
// real, and 50 ms (a period of 200 ms) was too short for a first connection
// and script on a loaded machine (CI's two lanes).
const period = time.Second

// logs is a slog handler's output, safe for concurrent use.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.Write(p) }
func (l *logs) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }
func (l *logs) count(s string) int          { return strings.Count(l.String(), s) }

// timedOut reports whether every warning logged is a renewal that timed out
// (a quarter of its period: a loaded machine's, not the test's doing), and
// there is one.
func (l *logs) timedOut() bool {
	warned := false
	for line := range strings.Lines(l.String()) {
		if !strings.Contains(line, "level=WARN") {
			continue
		}
		if !strings.Contains(line, "i/o timeout") && !strings.Contains(line, "context deadline exceeded") {
			return false
		}
		warned = true
	}
	return warned
}

// process is one process of a fleet in a test: a Fleet without its
// goroutine, whose renewals the test makes with tick at times it chooses.
type process struct {
	f   *Fleet
	log *logs
}

func newProcess(t *testing.T, o Options) *process {
	t.Helper()
	l := &logs{}
	if o.LeasePeriod == 0 {
		o.LeasePeriod = period
	}
	o.Logger = slog.New(slog.NewTextHandler(l, nil))
	f, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &process{f: f, log: l}
}

// longRun is a Throttle with the long-run allowance alone.
func longRun(burst int) grpcbackoff.Throttle {
	return grpcbackoff.Throttle{Ratio: 0, PerSecond: 0, Burst: burst}
}

func count(b interceptor.SharedBudget, now time.Time, longRun bool) int {
	n := 0
	for range 1000 {
		var ok bool
		if longRun {
			ok = b.AllowLongRun(now)
		} else {
			ok = b.Allow(now)
		}
		if !ok {
			break
		}
		n++
	}
	return n
}

// TestFleetSharesOneBudget: two processes of a fleet share one Burst, not
// one each: alone, a process holds it all (its stock); once the Ledger has
// seen both renew, each its share; a process learns the fleet's size.
func TestFleetSharesOneBudget(t *testing.T) {
	addr, _ := server(t)
	prefix := testPrefix(t)
	a := newProcess(t, Options{URL: "redis://" + addr, Prefix: prefix})
	b := newProcess(t, Options{URL: "redis://" + addr, Prefix: prefix})
	ba, bb := a.f.Budget("dns:///backend:443", longRun(10)), b.f.Budget("dns:///backend:443", longRun(10))
	ctx := context.Background()
	now := time.Now()
	a.f.tick(ctx, now)
	if s := ba.State(now); !s.Joined || s.Leases != 1 || s.Name != "dns:///backend:443" || s.Retries != 10 {
		t.Fatalf("after a renewal: %+v, want joined with one lease holding the Burst (alone in the fleet)", s)
	}
	b.f.tick(ctx, now)
	if s := bb.State(now); s.Retries != 0 || s.FleetSize != 2 {
		t.Fatalf("the second process: %+v, want nothing left for it, a fleet of 2", s)
	}
	// Each gives back what it holds and gets its share of the Burst: half,
	// or less if the Ledger counted more renewals in this interval (the
	// server's clock counts them, and this test renews within
	// milliseconds).
	now = now.Add(period * 3 / 4)
	a.f.tick(ctx, now)
	b.f.tick(ctx, now)
	na, nb := count(ba, now, true), count(bb, now, true)
	if na+nb > 10 || na == 0 || nb == 0 || na > 5 {
		t.Errorf("the fleet's Burst of 10 paid %d and %d retries, want a share of it each", na, nb)
	}
}

// TestFleetUnreachable: with nothing listening, New returns at once, no
// call waits, each budget is on its share (the fleet's floors divided by
// FleetSize), and that is logged once.
func TestFleetUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	p := newProcess(t, Options{URL: "redis://" + addr, FleetSize: 5})
	b := p.f.Budget("t", grpcbackoff.DefaultThrottle())
	now := time.Now()
	for range 3 {
		p.f.tick(context.Background(), now)
		now = now.Add(period)
	}
	if d := time.Since(start); d > period {
		t.Errorf("construction and 3 failed renewals took %v, want under a lease period", d)
	}
	// Its share: Burst 10/5 and MinReserve 100/5 (a young budget).
	if n := count(b, now, false); n != 22 {
		t.Errorf("on its share, %d retries paid, want 22", n)
	}
	if s := b.State(now); s.Joined || s.Fallbacks != 0 || s.FleetSize != 5 {
		t.Errorf("State %+v, want not joined, fleet size 5 assumed", s)
	}
	if n := p.log.count("cannot renew"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, p.log)
	}
}

// TestFleetFaults: Redis slow (1 s), down and restarted (its memory
// lost), or answering garbage: the process falls back within one lease
// period, logs it once, never waits, and joins again when Redis answers.
func TestFleetFaults(t *testing.T) {
	for _, fault := range []string{"slow", "restart", "garbage"} {
		t.Run(fault, func(t *testing.T) {
			addr, _ := server(t)
			px := newProxy(t, addr)
			p := newProcess(t, Options{URL: "redis://" + px.addr(), Prefix: testPrefix(t), FleetSize: 1})
			b := p.f.Budget("t", grpcbackoff.DefaultThrottle())
			ctx := context.Background()
			now := time.Now()
			p.f.tick(ctx, now)
			if !b.State(now).Joined {
				t.Fatalf("not joined before the fault: %s", p.log)
			}
			switch fault {
			case "slow":
				px.set(func(p *proxy) { p.delay = time.Second })
			case "restart":
				px.set(func(p *proxy) { p.down = true })
			case "garbage":
				px.set(func(p *proxy) { p.garbage = true })
				px.cut()
			}
			for i := range 6 {
				start := time.Now()
				p.f.tick(ctx, now.Add(time.Duration(i+1)*period*3/4))
				if d := time.Since(start); d > period/2 {
					t.Errorf("a renewal took %v, want at most a quarter of the lease period", d)
				}
				if i == 0 && (!b.State(now.Add(period-time.Millisecond)).Joined || b.State(now.Add(period)).Joined) {
					// The last lease, sent at now, holds until now + period.
					t.Errorf("want joined until one period after the last lease, then fallen back")
				}
			}
			if n := p.log.count("cannot renew"); n != 1 {
				t.Errorf("logged %d times, want once:\n%s", n, p.log)
			}
			if !b.Allow(now.Add(5 * period)) {
				t.Error("on its share, a retry was refused: the share (FleetSize 1) holds the whole Throttle")
			}
			px.set(func(p *proxy) { p.delay, p.down, p.garbage = 0, false, false })
			px.cut()
			if fault == "restart" {
				if err := client(t, addr).Del(ctx, p.f.prefix+"{t}").Err(); err != nil {
					t.Fatal(err)
				}
			}
			back := now.Add(6 * period)
			p.f.tick(ctx, back)
			if s := b.State(back); !s.Joined || s.Fallbacks != 1 {
				t.Errorf("after Redis came back: %+v, want joined after 1 fallback (%s)", s, p.log)
			}
			if n := p.log.count("renewed again"); n != 1 {
				t.Errorf("the return logged %d times, want once:\n%s", n, p.log)
			}
		})
	}
}

// TestFleetRestartKeepsAge: a budget made again after Redis lost it is as
// old as it was: no new Burst, no MinReserve of a young budget.
func TestFleetRestartKeepsAge(t *testing.T) {
	addr, _ := server(t)
	p := newProcess(t, Options{URL: "redis://" + addr, Prefix: testPrefix(t)})
	b := p.f.Budget("t", grpcbackoff.DefaultThrottle())
	c := client(t, addr)
	ctx := context.Background()
	now := time.Now()
	p.f.tick(ctx, now)
	born, err := c.HGet(ctx, p.f.prefix+"{t}", "b").Int64()
	if err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, p.f.prefix+"{t}")
	b.AllowLongRun(now)
	p.f.tick(ctx, now.Add(period*3/4))
	again, err := c.HGet(ctx, p.f.prefix+"{t}", "b").Int64()
	if err != nil || again != born {
		t.Errorf("made again born at %d (%v), want %d", again, err, born)
	}
	// It holds the 9 of its Burst it held, given back and granted again.
	if n := count(b, now.Add(period), true); n != 9 {
		t.Errorf("%d long-run retries paid by a budget made again, want the 9 held before (no new Burst)", n)
	}
	if p := c.PTTL(ctx, p.f.prefix+"{t}").Val(); p <= 0 || p > time.Minute {
		t.Errorf("the budget's key lives %v, want at most a minute", p)
	}
}

// TestFleetCredentials: rejected credentials are logged once, without the
// password, and the process spends its share; the right ones join.
func TestFleetCredentials(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("fleet", "s3cret")
	bad := newProcess(t, Options{URL: "redis://fleet:wrong-pw@" + mr.Addr()})
	b := bad.f.Budget("t", grpcbackoff.DefaultThrottle())
	now := time.Now()
	for i := range 3 {
		bad.f.tick(context.Background(), now.Add(time.Duration(i)*period))
	}
	if b.State(now).Joined || bad.log.count("cannot renew") != 1 || strings.Contains(bad.log.String(), "wrong-pw") {
		t.Errorf("wrong password: joined %v; logs:\n%s\nwant one warning, no password", b.State(now).Joined, bad.log)
	}
	good := newProcess(t, Options{URL: "redis://fleet:s3cret@" + mr.Addr()})
	g := good.f.Budget("t", grpcbackoff.DefaultThrottle())
	good.f.tick(context.Background(), now)
	if !g.State(now).Joined {
		t.Errorf("right password: not joined; logs:\n%s", good.log)
	}
}

// TestFleetTLS: rediss:// with the server's CA in TLSConfig.
func TestFleetTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	mr, err := miniredis.RunTLS(&tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mr.Close)
	p := newProcess(t, Options{URL: "rediss://" + mr.Addr(), TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	b := p.f.Budget("t", grpcbackoff.DefaultThrottle())
	now := time.Now()
	p.f.tick(context.Background(), now)
	if !b.State(now).Joined {
		t.Errorf("over TLS: not joined; logs:\n%s", p.log)
	}
	untrusted := newProcess(t, Options{URL: "rediss://" + mr.Addr()})
	u := untrusted.f.Budget("t", grpcbackoff.DefaultThrottle())
	untrusted.f.tick(context.Background(), now)
	if u.State(now).Joined || untrusted.log.count("cannot renew") != 1 {
		t.Errorf("a server not trusted: joined %v; logs:\n%s", u.State(now).Joined, untrusted.log)
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestFleetCluster: a Redis Cluster (one node holding every slot).
func TestFleetCluster(t *testing.T) {
	addr := clusterServer(t)
	p := newProcess(t, Options{URL: "redis://" + addr, Cluster: true, Prefix: testPrefix(t)})
	bs := []interceptor.SharedBudget{p.f.Budget("a", grpcbackoff.DefaultThrottle()), p.f.Budget("b", grpcbackoff.DefaultThrottle())}
	now := time.Now()
	p.f.tick(context.Background(), now)
	for _, b := range bs {
		if s := b.State(now); !s.Joined {
			t.Errorf("budget %s in cluster mode: not joined; logs:\n%s", s.Name, p.log)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "neither Client nor URL"},
		{Options{URL: "redis://a:1", Client: nilClient()}, "both Client and URL"},
		{Options{URL: "http://a:1"}, "scheme must be redis or rediss"},
		{Options{URL: "redis://u:pw@a:b:c"}, "URL"},
		{Options{URL: "127.0.0.1:6379"}, `URL "127.0.0.1:6379" is not a URL: write it "redis://HOST:PORT" ("rediss://" for TLS), e.g. "redis://127.0.0.1:6379"`},
		{Options{URL: "u:pw@127.0.0.1:6379"}, `is not a URL`},
		{Options{URL: "redis://127.0.0.1:6379:6379"}, `URL "redis://127.0.0.1:6379:6379": "127.0.0.1:6379:6379" is not HOST:PORT`},
		{Options{URL: "redis://127.0.0.1:99999"}, `port "99999" is not a number from 1 to 65535`},
		{Options{URL: "redis://:6379"}, `names no host`},
		{Options{URL: "redis://a:1?addr=b:2:3", Cluster: true}, `addr="b:2:3"`},
		{Options{URL: "redis://a:1/x"}, "URL"},
		{Options{URL: "redis://a:1/-1"}, "database -1: write a database number from 0"},
		{Options{URL: "redis://a:1/3", Cluster: true}, `a Redis Cluster has database 0 alone: leave out the path "/3"`},
		{Options{URL: "redis://a:1?addr=b:2x", Cluster: true}, `addr="b:2x": port "2x" is not a number from 1 to 65535`},
		{Options{URL: "redis://a:1", TLSConfig: &tls.Config{}}, "not rediss://"},
		{Options{URL: "rediss://a:1", TLSConfig: &tls.Config{MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS12}}, "MinVersion"},
		{Options{URL: "rediss://a:1", TLSConfig: &tls.Config{Certificates: []tls.Certificate{{}}}}, "Certificates[0]"},
		{Options{URL: "redis://a:1", Names: map[string]string{"t": "x}y"}}, `Names["t"]`},
		{Options{URL: "redis://a:1", Names: map[string]string{"t": ""}}, `Names["t"]`},
		{Options{URL: "redis://a:1", Prefix: "a{b"}, "Prefix"},
		{Options{URL: "redis://a:1", LeasePeriod: time.Millisecond}, "LeasePeriod"},
		{Options{URL: "redis://a:1", FleetSize: -1}, "FleetSize (-1) must be at least 1"},
		{Options{URL: "redis://a:1", FleetSize: -1, LeasePeriod: time.Hour}, "LeasePeriod (1h0m0s)"},
		{Options{URL: "redis://a:1", FleetSize: -1, LeasePeriod: time.Hour}, "FleetSize (-1)"},
	} {
		f, err := New(tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", tc.o, err, tc.want)
		}
		// An error names the fields that are wrong, and no other: a field
		// left at its default is not one (issue 42: FleetSize -1 also
		// blamed "LeasePeriod (0s)").
		for field, set := range map[string]bool{"LeasePeriod": tc.o.LeasePeriod != 0, "FleetSize": tc.o.FleetSize != 0} {
			if err != nil && strings.Contains(err.Error(), field) && !set {
				t.Errorf("New(%+v) = %v: names %s, which is not set", tc.o, err, field)
			}
		}
		if f != nil {
			f.Close()
		}
		if err != nil && strings.Contains(err.Error(), ":pw@") {
			t.Errorf("New(%+v): the error shows the password: %v", tc.o, err)
		}
	}
}

func nilClient() *redisClient { return newRedisClient() }

// TestNames: a target is its own budget's name, percent-encoded where a
// name cannot hold it (braces, '%', characters not printable, bytes not
// UTF-8: each byte "%XX", so that two targets never share a name); Names
// renames.
func TestNames(t *testing.T) {
	f, err := build(Options{URL: "redis://127.0.0.1:1", Names: map[string]string{"dns:///a:443": "backend-a"}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for target, want := range map[string]string{
		"dns:///a:443": "backend-a", "dns:///b:443": "dns:///b:443", "": "none", "x{y}\n": "x%7By%7D%0A",
		"dns:///é:443": "dns:///é:443", "a\xffb": "a%FFb", "a\uFFFDb": "a\uFFFDb", "50%": "50%25", "a\u200bb": "a%E2%80%8Bb",
	} {
		if got := f.nameOf(target); got != want {
			t.Errorf("name of %q: %q, want %q", target, got, want)
		}
	}
}

// TestLongNames: a target whose name is longer than a key's name may be
// (256 bytes) is cut between two characters and followed by "#" and 32
// hexadecimal digits of the SHA-256 of the whole name: two long targets
// that differ only past the cut get two budgets, and the name States shows
// is valid UTF-8. (Issue 35: names were cut at 256 bytes, the two shared
// one budget, and a cut inside a character made the name invalid UTF-8.)
func TestLongNames(t *testing.T) {
	addr, _ := server(t)
	p := newProcess(t, Options{URL: "redis://" + addr, Prefix: testPrefix(t)})
	base := "dns:///" + strings.Repeat("é", 130) // 267 bytes, a 2-byte character across byte 256
	a, b := p.f.Budget(base+"-a:443", longRun(10)), p.f.Budget(base+"-b:443", longRun(10))
	now := time.Now()
	p.f.tick(context.Background(), now)
	sa, sb := a.State(now), b.State(now)
	if sa.Name == sb.Name || !sa.Joined || !sb.Joined {
		t.Errorf("two long targets: budgets %q and %q, joined %v and %v; want two, joined", sa.Name, sb.Name, sa.Joined, sb.Joined)
	}
	for _, n := range []string{sa.Name, sb.Name} {
		if len(n) > 256 || !utf8.ValidString(n) || !strings.HasPrefix(n, "dns:///éé") || !regexp.MustCompile(`#[0-9a-f]{32}$`).MatchString(n) {
			t.Errorf("name %q (%d bytes): want at most 256 bytes of UTF-8, the target's start, # and 32 hex digits", n, len(n))
		}
	}
	if na, nb := count(a, now, true), count(b, now, true); na != 10 || nb != 10 {
		t.Errorf("retries paid: %d and %d, want a Burst of 10 each (two budgets)", na, nb)
	}
}

// TestCloseStopsTheGoroutine: Close ends the renewals and waits for them.
func TestCloseStopsTheGoroutine(t *testing.T) {
	addr, _ := server(t)
	f, err := New(Options{URL: "redis://" + addr, Prefix: testPrefix(t), LeasePeriod: period})
	if err != nil {
		t.Fatal(err)
	}
	f.Budget("t", grpcbackoff.DefaultThrottle())
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	select {
	case <-f.done:
	default:
		t.Error("Close returned with the goroutine running")
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestSuccessPathAllocatesNothing: Started and Succeeded are an atomic
// addition each.
func TestSuccessPathAllocatesNothing(t *testing.T) {
	p := newProcess(t, Options{URL: "redis://127.0.0.1:1"})
	b := p.f.Budget("t", grpcbackoff.DefaultThrottle())
	if n := testing.AllocsPerRun(1000, func() { b.Started(); b.Succeeded() }); n != 0 {
		t.Errorf("Started and Succeeded allocate %v times, want 0", n)
	}
}

var _ = lease.Token

// TestDefaultLeasePeriod: the default lease period keeps Redis's load
// near one script call per 2 000 processes a second: 1 s up to a
// FleetSize of 2 000, 1 s per 2 000 above, a minute at most; a
// LeasePeriod given is kept.
func TestDefaultLeasePeriod(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want time.Duration
	}{
		{Options{}, time.Second},
		{Options{FleetSize: 2000}, time.Second},
		{Options{FleetSize: 10_000}, 5 * time.Second},
		{Options{FleetSize: 1_000_000}, time.Minute},
		{Options{FleetSize: 10_000, LeasePeriod: 2 * time.Second}, 2 * time.Second},
	} {
		tc.o.URL = "redis://127.0.0.1:1"
		f, err := build(tc.o)
		if err != nil {
			t.Fatal(err)
		}
		f.client.Close()
		if f.period != tc.want {
			t.Errorf("FleetSize %d, LeasePeriod %v: period %v, want %v", tc.o.FleetSize, tc.o.LeasePeriod, f.period, tc.want)
		}
	}
}

// TestCloseGivesBackTheLease: a process that closes its Fleet gives back
// the lease it holds, and the process that replaces it (a rolling restart)
// gets its stock at its first renewal; one that stops without closing
// keeps it until the Window forgets it.
func TestCloseGivesBackTheLease(t *testing.T) {
	addr, _ := server(t)
	th := grpcbackoff.DefaultThrottle()
	for _, closes := range []bool{true, false} {
		prefix := testPrefix(t)
		old := newProcess(t, Options{URL: "redis://" + addr, Prefix: prefix})
		old.f.Budget("t", th)
		now := time.Now()
		old.f.tick(context.Background(), now)
		if closes {
			old.f.Close()
		}
		successor := newProcess(t, Options{URL: "redis://" + addr, Prefix: prefix})
		b := successor.f.Budget("t", th)
		successor.f.tick(context.Background(), now)
		// Its stock: alone in the fleet (the old process left), the floors;
		// else nothing (the old process holds them).
		want := 0
		if closes {
			want = th.MinReserve + th.Burst
		}
		if n := count(b, now, false); n != want {
			t.Errorf("the old process closes %v: the successor paid %d retries from its first lease, want %d", closes, n, want)
		}
	}
}

// TestBudgetCostAndRefund: a fleet budget, an interceptor.CostedBudget,
// pays a retry of a cost whole and takes back the cost of a retry the
// server served.
func TestBudgetCostAndRefund(t *testing.T) {
	addr, _ := server(t)
	p := newProcess(t, Options{URL: "redis://" + addr, Prefix: testPrefix(t)})
	b := p.f.Budget("t", longRun(3)).(interceptor.CostedBudget)
	now := time.Now()
	p.f.tick(context.Background(), now) // alone: its lease holds the Burst of 3
	if !b.AllowN(now, true, 2) || b.AllowN(now, true, 2) {
		t.Fatal("a Burst of 3 paid not one retry of 2 tokens, or two")
	}
	b.Refund(now, true, 2)
	if s := b.State(now); s.Retries != 3 {
		t.Errorf("after the refund: %+v, want the 3 tokens back", s)
	}
}
