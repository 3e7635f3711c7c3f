// Package fleetbudget keeps a gRPC client's retry budgets on Redis, shared
// by every process of a fleet: the processes that use one budget name
// follow one grpcbackoff.Throttle together, as if they were one process,
// so that its floors (MinReserve, PerSecond, Burst) are the fleet's and do
// not multiply with the number of processes.
//
//	fleet, err := fleetbudget.New(fleetbudget.Options{URL: "rediss://10.0.0.3:6378"})
//	defer fleet.Close()
//	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), fleet.Option())
//
// Each backend target's budget is named after the target (its canonical
// form, as TargetState.Target: "dns:///redis.googleapis.com:443"), unless
// Options.Names names it otherwise. A call never waits for Redis: each
// process spends a lease of the fleet's budget, which a goroutine renews in
// the background every 3/4 of Options.LeasePeriod with one script call per
// budget (lease.Ledger.Renew, in Lua, on the server's clock). A lease holds
// the process's stock (its share of the fleet's floors among the processes
// that renew, and what its own successes earned: alone, a process holds
// the whole Throttle) and the retries it told of before they are due (the
// budgets are interceptor.DeferredBudgets: a retry is paid when its backoff
// ends). A process that cannot renew its lease falls back, when it expires,
// to its share of the budget (the Throttle on its own calls, the fleet's
// floors divided by the last fleet size it saw), logs that once, and joins
// again when Redis answers. See README.md for the design and its bound.
//
// Redis ≥ 5 and Valkey ≥ 7, standalone or cluster (Memorystore for Redis,
// Redis Cluster and Valkey included), through go-redis v9: the client most
// Go services already hold, whose own options carry TLS and AUTH, which
// never dials at construction, and which falls back to RESP2 where HELLO is
// unknown.
package fleetbudget

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// Options configure a Fleet. Exactly one of Client and URL is set.
type Options struct {
	// Client is the Redis client to use: a *redis.Client, a
	// *redis.ClusterClient or any redis.UniversalClient, with its own TLS
	// and AUTH options. The Fleet does not close it. Set its
	// ContextTimeoutEnabled, or a ReadTimeout under a quarter of
	// LeasePeriod, so that a slow server does not hold up the renewals of
	// other budgets (a process falls back on time either way).
	Client redis.UniversalClient
	// URL is the server to connect to, when Client is nil:
	// "redis://[[user]:password@]host:port[/db]", or "rediss://" for TLS;
	// with Cluster, "redis://host:port?addr=host2:port2" lists the nodes,
	// and no db: a cluster has database 0 alone (go-redis's ParseURL and
	// ParseClusterURL).
	URL string
	// Cluster says URL names a Redis Cluster (cluster mode enabled).
	Cluster bool
	// TLSConfig, with a rediss:// URL, replaces the default TLS
	// configuration (the system's roots, the host's name), e.g. to trust
	// Memorystore's server CA.
	TLSConfig *tls.Config

	// Prefix starts every key: a budget is one hash, PREFIX{NAME}, which
	// expires when no process renewed it for two Windows (and a minute).
	// Default "grpcbackoff:budget:".
	Prefix string
	// Names maps targets (as TargetState.Target) to budget names; a target
	// not in it is its own name (percent-encoded where a name cannot hold
	// it, and hashed beyond 256 bytes: see README.md). Processes that share
	// a name share a budget. A name is 1 to 256 bytes of printable
	// characters without braces.
	Names map[string]string
	// LeasePeriod is how long a lease is valid, between 100 ms and a
	// minute; each process renews its leases every 3/4 of it, one script
	// call per budget, and sooner, once a renewal, for a retry due before
	// the next renewal could pay it. Default 1 s, or 1 s per 2 000
	// processes of FleetSize when that is longer (README.md says what it
	// costs Redis).
	LeasePeriod time.Duration
	// FleetSize is the number of processes a process assumes share a
	// budget until Redis has told it (if Redis cannot be reached from its
	// start), and what the default LeasePeriod is sized to: set it to the
	// fleet's size. Default 1000.
	FleetSize int
	// Logger logs the fallbacks and the returns, once each; nil:
	// slog.Default().
	Logger *slog.Logger
}

// Fleet is a set of retry budgets shared through Redis, one per budget
// name. Give its Option to every Retrier of the process; Close it when the
// process no longer calls. It is safe for concurrent use.
type Fleet struct {
	client redis.UniversalClient
	owned  bool
	where  string // for logs and String: the URL, redacted, or "a redis.UniversalClient"
	prefix string
	names  map[string]string
	period time.Duration
	size   int
	log    *slog.Logger

	mu      sync.Mutex
	budgets map[string]*budget // by name
	order   []*budget

	wake        chan struct{}
	loopStarted atomic.Bool
	cancel      context.CancelFunc
	done        chan struct{}
	once        sync.Once

	failing bool           // the last renewal failed, and that was logged; the loop's
	faults  map[string]int // budgets whose renewals Redis refused, by error; the loop's

	// probe dials the server (its addresses, with the client's TLS) as
	// the client would, without the client: while Redis cannot be
	// reached, the renewals wait for probe to answer before they give the
	// address back to the client, which logs each dial it fails on its
	// own logger (redis.SetLogger, the process's). nil for a client of
	// another kind. unreachable is the loop's.
	probe       func(ctx context.Context) error
	unreachable bool
	db          int // the database the client selects, if known
}

// New returns a Fleet, or an error naming what is wrong with o and how to
// write it. It does not reach Redis: the first renewal happens in the
// background, and until it answers every budget is on its share. So New
// checks what o says alone: the URL's form (scheme, host, a port from 1 to
// 65535, a database from 0, none with Cluster), TLSConfig, names, prefix,
// LeasePeriod and FleetSize. What only Redis can tell, New cannot: that it
// answers, the credentials, that it has the URL's database (a server has
// "databases" of them, 16 by default), the ACL's permissions. Those show
// at the renewals: each such failure is logged once, the database named,
// and the budgets are on their share until a renewal succeeds.
func New(o Options) (*Fleet, error) {
	f, err := build(o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.loopStarted.Store(true)
	go func() {
		defer close(f.done)
		f.loop(ctx)
	}()
	return f, nil
}

// build returns the Fleet of o, without its renewing goroutine.
func build(o Options) (*Fleet, error) {
	f := &Fleet{prefix: o.Prefix, names: map[string]string{}, period: o.LeasePeriod, size: o.FleetSize, log: o.Logger}
	if f.prefix == "" {
		f.prefix = "grpcbackoff:budget:"
	}
	if f.size == 0 {
		f.size = 1000
	}
	if f.period == 0 {
		// About one script call per process per period: 1 s up to 2 000
		// processes, then 1 s per 2 000, so that Redis's load stays
		// under about 2 700 calls a second per budget. (A FleetSize
		// below 1 is an error of its own: the default period is 1 s.)
		f.period = min(max(time.Second, time.Duration(f.size)*time.Second/2000), time.Minute)
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	var errs []error
	if err := checkName("Prefix", f.prefix, 64); err != nil {
		errs = append(errs, err)
	}
	for target, name := range o.Names {
		if err := checkName(fmt.Sprintf("Names[%q]", target), name, 256); err != nil {
			errs = append(errs, err)
		}
		f.names[target] = name
	}
	if f.period < 100*time.Millisecond || f.period > time.Minute {
		errs = append(errs, fmt.Errorf("fleetbudget: LeasePeriod (%v) must be between 100ms and 1m", f.period))
	}
	if f.size < 1 {
		errs = append(errs, fmt.Errorf("fleetbudget: FleetSize (%d) must be at least 1", f.size))
	}
	switch {
	case o.Client != nil && o.URL != "":
		errs = append(errs, errors.New("fleetbudget: both Client and URL are set: give one"))
	case o.Client != nil:
		if o.TLSConfig != nil || o.Cluster {
			errs = append(errs, errors.New("fleetbudget: TLSConfig and Cluster go with URL: set them on the Client"))
		}
		f.client, f.where = o.Client, "a redis.UniversalClient"
		f.probe = probeOf(o.Client, f.period/4)
		if c, ok := o.Client.(*redis.Client); ok {
			f.db = c.Options().DB
		}
	case o.URL == "":
		errs = append(errs, errors.New("fleetbudget: neither Client nor URL is set"))
	default:
		newClient, where, err := dial(o, f.period)
		if err != nil {
			errs = append(errs, err)
		}
		if len(errs) == 0 { // a client is made for valid options alone: go-redis may dial at once
			f.client, f.probe = newClient()
			f.owned = true
			if c, ok := f.client.(*redis.Client); ok {
				f.db = c.Options().DB
			}
		}
		f.where = where
	}
	f.unreachable = f.probe != nil // until a probe answers: the client dials nothing before
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	f.budgets, f.wake, f.done, f.cancel = map[string]*budget{}, make(chan struct{}, 1), make(chan struct{}), func() {}
	f.faults = map[string]int{}
	return f, nil
}

// dial checks o.URL and o.TLSConfig and returns what makes the client of
// o.URL, with timeouts of a quarter of the lease period, no retry of its own
// (the next renewal is the retry), one connection, and a dialer that fails
// quietly (see quiet).
func dial(o Options, period time.Duration) (func() (redis.UniversalClient, func(context.Context) error), string, error) {
	u, where, err := checkURL(o.URL, o.Cluster)
	if err != nil {
		return nil, where, err
	}
	if o.TLSConfig != nil {
		if u.Scheme != "rediss" {
			return nil, where, fmt.Errorf("fleetbudget: TLSConfig is set but URL %q is not rediss://", where)
		}
		if err := checkTLS(o.TLSConfig); err != nil {
			return nil, where, err
		}
	}
	tlsConfig := func(cur *tls.Config, host string) *tls.Config {
		if o.TLSConfig == nil {
			return cur
		}
		c := o.TLSConfig.Clone()
		if c.ServerName == "" {
			c.ServerName = host
		}
		return c
	}
	t := period / 4
	if o.Cluster {
		opt, err := redis.ParseClusterURL(o.URL)
		if err != nil {
			return nil, where, fmt.Errorf("fleetbudget: URL %q: %w", where, redactErr(err, o.URL))
		}
		opt.TLSConfig = tlsConfig(opt.TLSConfig, u.Hostname())
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.ContextTimeoutEnabled = t, t, t, true
		opt.MaxRetries, opt.PoolSize, opt.MaxRedirects, opt.DialerRetries = -1, 1, 3, 1
		raw := redis.NewDialer(&redis.Options{TLSConfig: opt.TLSConfig, DialTimeout: t})
		opt.Dialer = quiet(raw)
		return func() (redis.UniversalClient, func(context.Context) error) {
			return redis.NewClusterClient(opt), prober(opt.Addrs, raw, t)
		}, where, nil
	}
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, where, fmt.Errorf("fleetbudget: URL %q: %w", where, redactErr(err, o.URL))
	}
	if opt.DB < 0 {
		return nil, where, fmt.Errorf("fleetbudget: URL %q: database %d: write a database number from 0 (\"/0\", or no path, is the default)", where, opt.DB)
	}
	opt.TLSConfig = tlsConfig(opt.TLSConfig, u.Hostname())
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.ContextTimeoutEnabled = t, t, t, true
	opt.MaxRetries, opt.PoolSize, opt.DialerRetries = -1, 1, 1
	raw := redis.NewDialer(opt)
	opt.Dialer = quiet(raw)
	return func() (redis.UniversalClient, func(context.Context) error) {
		return redis.NewClient(opt), prober([]string{opt.Addr}, raw, t)
	}, where, nil
}

// redactErr returns err with raw's password, if any, replaced.
func redactErr(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil {
		return errors.New("malformed URL")
	}
	if p, ok := u.User.Password(); ok && p != "" {
		return errors.New(strings.ReplaceAll(err.Error(), p, "xxxxx"))
	}
	return err
}

// redact returns raw, which is not a URL, with what may be a password (what
// comes before an @, after "scheme://") replaced.
func redact(raw string) string {
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		scheme, _, ok := strings.Cut(raw[:i], "://")
		if ok && !strings.ContainsAny(scheme, ":/@") {
			return scheme + "://xxxxx" + raw[i:]
		}
		return "xxxxx" + raw[i:]
	}
	return raw
}

// checkURL reports what is wrong with raw, Options.URL, as far as it can be
// told without Redis, and returns it parsed and redacted (its password
// replaced, for errors and logs). An error that names a malformed URL
// gives an example of how to write it, one that checkURL accepts.
func checkURL(raw string, cluster bool) (*url.URL, string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		if scheme, rest, ok := strings.Cut(raw, "://"); ok && (scheme == "redis" || scheme == "rediss") {
			// The scheme is right: say what is wrong with the host and port.
			if err := checkHostPort(hostPortOf(rest)); err != nil {
				return nil, redact(raw), fmt.Errorf("fleetbudget: URL %q: %w: write it \"%s://HOST:PORT\", e.g. %q", redact(raw), err, scheme, exampleURL(raw))
			}
		}
		return nil, redact(raw), fmt.Errorf("fleetbudget: URL %q is not a URL: write it \"redis://HOST:PORT\" (\"rediss://\" for TLS), e.g. %q",
			redact(raw), exampleURL(raw))
	}
	where := u.Redacted()
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, where, fmt.Errorf("fleetbudget: URL %q: the scheme must be redis or rediss", where)
	}
	if err := checkHostPort(u.Host); err != nil {
		return nil, where, fmt.Errorf("fleetbudget: URL %q: %w: write it \"%s://HOST:PORT\", e.g. %q", where, err, u.Scheme, exampleURL(raw))
	}
	if cluster {
		if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
			return nil, where, fmt.Errorf("fleetbudget: URL %q: a Redis Cluster has database 0 alone: leave out the path %q", where, u.Path)
		}
		for _, a := range u.Query()["addr"] {
			if err := checkHostPort(a); err != nil {
				return nil, where, fmt.Errorf("fleetbudget: URL %q: addr=%q: %w", where, a, err)
			}
		}
	}
	return u, where, nil
}

// exampleURL returns a URL to write for raw, a malformed one: raw's scheme
// if it is rediss (else redis), and its host and port if they are valid
// (6379 for a port that is not), else "redis://10.0.0.3:6379"; never a URL
// that checkURL refuses. It leaves out raw's credentials, path and query.
func exampleURL(raw string) string {
	scheme, rest := "redis", raw
	if s, r, ok := strings.Cut(raw, "://"); ok {
		rest = r
		if s == "rediss" {
			scheme = s
		}
	}
	hostport := hostPortOf(rest)
	host, port, err := net.SplitHostPort(hostport)
	if err != nil { // "HOST", "HOST:PORT:PORT"
		host, port, _ = strings.Cut(hostport, ":")
		port, _, _ = strings.Cut(port, ":")
	}
	if !validPort(port) {
		port = "6379"
	}
	ex := scheme + "://" + net.JoinHostPort(host, port)
	if u, err := url.Parse(ex); err != nil || u.Opaque != "" || u.Host != net.JoinHostPort(host, port) || checkHostPort(u.Host) != nil {
		return scheme + "://10.0.0.3:6379"
	}
	if _, err := redis.ParseURL(ex); err != nil {
		return scheme + "://10.0.0.3:6379"
	}
	return ex
}

// hostPortOf returns what rest, a URL after its "scheme://", gives as its
// host and port: up to its path, query or fragment, without credentials.
func hostPortOf(rest string) string {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return rest
}

// checkHostPort reports what is wrong with hostport, a URL's "host:port"
// (the port may be left out: 6379).
func checkHostPort(hostport string) error {
	host, port := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.Count(hostport, ":") > 0 && !strings.HasPrefix(hostport, "[") {
		return fmt.Errorf("%q is not HOST:PORT", hostport)
	}
	if host == "" {
		return fmt.Errorf("%q names no host", hostport)
	}
	if port != "" && !validPort(port) {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// validPort reports whether port is a port number: 1 to 65535, in decimal
// digits alone (no sign, no space).
func validPort(port string) bool {
	if port == "" || len(port) > 5 || strings.ContainsFunc(port, func(r rune) bool { return r < '0' || r > '9' }) {
		return false
	}
	n, _ := strconv.Atoi(port)
	return n >= 1 && n <= 65535
}

// checkTLS reports what makes c unusable.
func checkTLS(c *tls.Config) error {
	if c.MinVersion != 0 && c.MaxVersion != 0 && c.MinVersion > c.MaxVersion {
		return fmt.Errorf("fleetbudget: TLSConfig: MinVersion (%#x) is above MaxVersion (%#x)", c.MinVersion, c.MaxVersion)
	}
	for i, cert := range c.Certificates {
		if len(cert.Certificate) == 0 || cert.PrivateKey == nil {
			return fmt.Errorf("fleetbudget: TLSConfig: Certificates[%d] has no certificate or no private key", i)
		}
	}
	return nil
}

// checkName reports why s is not a valid name or prefix of at most n bytes.
func checkName(what, s string, n int) error {
	switch {
	case s == "" || len(s) > n:
		return fmt.Errorf("fleetbudget: %s (%q) must be 1 to %d bytes", what, s, n)
	case !utf8.ValidString(s) || strings.ContainsAny(s, "{}") || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("fleetbudget: %s (%q) must be printable, without braces", what, s)
	}
	return nil
}

// maxName is the most bytes a budget name holds.
const maxName = 256

// nameOf returns the budget name of target: Names's, or the target with
// the bytes a name cannot hold percent-encoded (braces, '%', and those of
// characters that are not printable or not UTF-8), and, if that is longer
// than maxName bytes, cut (see hashed). "" is "none".
func (f *Fleet) nameOf(target string) string {
	if n, ok := f.names[target]; ok {
		return n
	}
	if target == "" {
		return "none"
	}
	var b strings.Builder
	for s := target; s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		if r == '{' || r == '}' || r == '%' || !unicode.IsPrint(r) || r == utf8.RuneError && n == 1 {
			for _, c := range []byte(s[:n]) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return hashed(b.String())
}

// hashed returns name if it holds in maxName bytes; else its first bytes,
// cut between two characters, "#" and 32 hexadecimal digits of the SHA-256
// of the whole name, maxName bytes at most: two long names that differ
// anywhere get two names.
func hashed(name string) string {
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "#" + hex.EncodeToString(sum[:16])
	cut := maxName - len(suffix)
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + suffix
}

// Option returns the option that makes a Retrier's budgets f's
// (interceptor.WithSharedBudget).
func (f *Fleet) Option() interceptor.Option { return interceptor.WithSharedBudget(f.Budget) }

// Budget returns the budget of target, made with t on its first use: the
// budget of its name, shared with every Retrier of the process that uses
// it (with the first one's Throttle). It does not reach Redis.
func (f *Fleet) Budget(target string, t grpcbackoff.Throttle) interceptor.SharedBudget {
	name := f.nameOf(target)
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.budgets[name]; b != nil {
		return b
	}
	now := time.Now()
	b := &budget{name: name, key: f.prefix + "{" + name + "}", local: lease.NewLocal(t, f.period, f.size, now),
		ttl: max(2*t.Window, time.Minute).Milliseconds(), wake: f.wakeUp}
	f.budgets[name] = b
	f.order = append(f.order, b)
	f.wakeUp()
	return b
}

// wakeUp makes the loop look at the budgets now.
func (f *Fleet) wakeUp() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// String describes f, e.g. "fleetbudget on redis://10.0.0.3:6379".
func (f *Fleet) String() string { return "fleetbudget on " + f.where }

// Close stops the renewals, gives back the leases the process holds (one
// call to Redis, within a quarter of the lease period and a second at
// most, unless Redis could not be reached), and closes the client f made
// (not one given as Options.Client). The fleet's other processes, a
// successor in a rolling restart, so get what it held at their next
// renewal, rather than when the budgets' Window forgets it. Budgets go on,
// each on its share, as if Redis could not be reached. Close returns once
// the renewing goroutine has ended.
func (f *Fleet) Close() error {
	var err error
	f.once.Do(func() {
		f.cancel()
		if f.started() {
			<-f.done
		}
		f.leave()
		if f.owned {
			err = f.client.Close()
		}
	})
	return err
}

// leave sends every budget's last renewal (lease.Local.Leave), unless
// Redis could not be reached at the last renewal. Its answers ask for
// nothing and are not applied.
func (f *Fleet) leave() {
	f.mu.Lock()
	due := slices.Clone(f.order)
	f.mu.Unlock()
	if len(due) == 0 || f.unreachable || f.client == nil {
		return
	}
	now := time.Now()
	reqs, params := requests(due, func(b *budget) lease.Request {
		return b.local.Leave(now, b.started.Swap(0), b.succeeded.Swap(0))
	})
	ctx, cancel := context.WithTimeout(context.Background(), min(f.period/4, time.Second))
	defer cancel()
	f.renew(ctx, due, params, reqs)
}

// started reports whether f's goroutine was started (New; not build).
func (f *Fleet) started() bool { return f.loopStarted.Load() }

// budget is one budget name's: the lease of this process, and the calls
// counted since the last renewal. It is an interceptor.DeferredBudget: a
// retry is asked for at the last renewal before it is due.
type budget struct {
	name, key string
	ttl       int64 // ms
	wake      func()

	started, succeeded atomic.Int64
	early              atomic.Bool // a retry wants a renewal before its time

	mu    sync.Mutex
	local *lease.Local
	next  time.Time // the next renewal (zero: at once); the loop's

	fault string // why Redis refused its last renewal, if it did; the loop's
}

var (
	_ interceptor.DeferredBudget = (*budget)(nil)
	_ interceptor.CostedBudget   = (*budget)(nil)
)

func (b *budget) Started()   { b.started.Add(1) }
func (b *budget) Succeeded() { b.succeeded.Add(1) }

// Want is always true: a retry the fleet's budget cannot pay for is
// refused when it is due (Allow).
func (b *budget) Want(now, due time.Time, longRun bool) bool {
	b.mu.Lock()
	renewNow := b.local.Want(now, due, longRun)
	b.mu.Unlock()
	if renewNow {
		b.early.Store(true)
		b.wake()
	}
	return true
}

func (b *budget) Allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.local.Allow(now)
}

func (b *budget) AllowLongRun(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.local.AllowLongRun(now)
}

// AllowN and Refund make the budget an interceptor.CostedBudget: a retry
// of cost n is n retries due together (lease.Local.AllowCost), and one the
// server served gives them back (lease.Local.Refund).
func (b *budget) AllowN(now time.Time, longRun bool, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.local.AllowCost(now, longRun, int64(n)*lease.Token)
}

func (b *budget) Refund(now time.Time, longRun bool, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.local.Refund(now, longRun, int64(n)*lease.Token)
}

func (b *budget) State(now time.Time) interceptor.SharedBudgetState {
	b.mu.Lock()
	s := b.local.State(now)
	b.mu.Unlock()
	return interceptor.SharedBudgetState{Name: b.name, Retries: s.Tokens, Joined: s.Joined, FleetSize: int(s.Size),
		Leases: s.Leases, Fallbacks: s.Fallbacks}
}

// probeOf returns a function that dials c's server as c would (its
// addresses, its dialer), or nil for a client of a kind it does not know.
func probeOf(c redis.UniversalClient, timeout time.Duration) func(context.Context) error {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		if o.Dialer == nil {
			return prober([]string{o.Addr}, redis.NewDialer(o), timeout)
		}
		return prober([]string{o.Addr}, o.Dialer, timeout)
	case *redis.ClusterClient:
		o := c.Options()
		if o.Dialer == nil {
			return prober(o.Addrs, redis.NewDialer(&redis.Options{TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout}), timeout)
		}
		return prober(o.Addrs, o.Dialer, timeout)
	}
	return nil
}

// prober returns a function that dials addrs, one after the other, with
// dialer, within timeout, and returns nil as soon as one answers.
func prober(addrs []string, dialer func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var errs []error
		for _, a := range addrs {
			conn, err := dialer(ctx, "tcp", a)
			if err == nil {
				return conn.Close()
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// quiet returns dial, but for a dial that fails: go-redis logs each such
// failure on its own logger, the process's (redis.SetLogger), so that when
// Redis goes down under a client that reached it, it would log once or
// twice before the renewals probe it (Fleet.probe). The connection quiet
// returns then fails the renewal with the dial's error, as the dial would
// have, and the fleet logs that once.
func quiet(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return failedConn{err}, nil
		}
		return c, nil
	}
}

// failedConn is a connection whose dial failed with err: it reads and
// writes nothing but err.
type failedConn struct{ err error }

func (c failedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c failedConn) Close() error                     { return nil }
func (c failedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c failedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c failedConn) SetDeadline(time.Time) error      { return nil }
func (c failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c failedConn) SetWriteDeadline(time.Time) error { return nil }
