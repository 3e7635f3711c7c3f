// Command redisv1 shows grpcbackoff's retry interceptor on the real Cloud
// Redis client (cloud.google.com/go/redis/apiv1). A platform team gives every
// Google Cloud gRPC client the same options (platform.go):
//
//	platform, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy())
//	rc, err := redis.NewCloudRedisClient(ctx, platform...)
//	ps, err := pubsub.NewClient(ctx, project, platform...)
//	err = gaxretry.Adopt(ps.TopicAdminClient.CallOptions) // Pub/Sub retries by itself: hand over
//
// The story below builds its Retrier with a hook that prints every retry,
// and gives the client gaxretry.RetrierClientOptions(retrier).
//
// With no flags it needs nothing set up: it starts the in-process fake of the
// API (package redistest) and runs a short scripted story against it,
// creating, reading, listing and deleting instances while the fake answers
// UNAVAILABLE and RESOURCE_EXHAUSTED (with and without RetryInfo), and a
// failover, a write, that meets UNAVAILABLE and is not resent. It prints
// every retry and a summary, then a hedged read and the platform set-up
// with a Pub/Sub client against its fake; it takes about 5 s:
//
//	go run ./examples/redisv1
//
// The story uses the Memorystore recipe at 1/10 time scale (first retry after
// 0.1–0.2 s instead of 1–2 s) so that it is quick; -scale 1 runs it with the
// real delays and takes about 20 s.
//
// With -real it talks to the real Cloud Redis API instead, with Application
// Default Credentials and DefaultPolicy, and only lists the instances of a
// project. Creating an instance costs money, so it does that (create, get,
// delete a BASIC 1 GB instance) only when also given -create:
//
//	go run ./examples/redisv1 -real -project my-project -location us-central1
//	go run ./examples/redisv1 -real -project my-project -location us-central1 -create
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	var ue *usageError
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(os.Stdout, usage(err))
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "%v\n\n%s", err, ue.usage)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// config is what the flags ask for.
type config struct {
	real     bool
	project  string
	location string
	create   bool
	instance string
	scale    float64
}

// usageError is a bad command line: main prints it with the usage and exits 2.
type usageError struct {
	err   error
	usage string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usage returns the usage text carried by err, if any.
func usage(err error) string {
	var ue *usageError
	if errors.As(err, &ue) {
		return ue.usage
	}
	return ""
}

// parseFlags reads args. Every error it returns is a *usageError naming the
// flag and the value at fault.
func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("redisv1", flag.ContinueOnError)
	fs.BoolVar(&cfg.real, "real", false, "use the real Cloud Redis API with Application Default Credentials instead of the in-process fake")
	fs.StringVar(&cfg.project, "project", "", "with -real: the Google Cloud project (required)")
	fs.StringVar(&cfg.location, "location", "-", `with -real: the region, e.g. us-central1; "-" lists every region`)
	fs.BoolVar(&cfg.create, "create", false, "with -real: also create, read and delete a BASIC 1 GB instance (billed while it exists, usually several minutes)")
	fs.StringVar(&cfg.instance, "instance", "grpcbackoff-example", "with -real -create: the id of the instance to create")
	fs.Float64Var(&cfg.scale, "scale", 0.1, "against the fake: time scale of the Memorystore recipe (1 = real delays of 1 s, 2 s, 4 s… + up to 1 s of jitter)")

	var help strings.Builder
	fs.SetOutput(&help)
	fmt.Fprint(&help, "usage: go run ./examples/redisv1 [flags]\n\n")
	fs.PrintDefaults()
	fs.SetOutput(io.Discard) // errors are returned, not printed
	bad := func(err error) error { return &usageError{err: err, usage: help.String()} }

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, &usageError{err: flag.ErrHelp, usage: help.String()}
		}
		return cfg, bad(fmt.Errorf("redisv1: %w", err))
	}
	if fs.NArg() > 0 {
		return cfg, bad(fmt.Errorf("redisv1: unexpected argument %q: all options are flags", fs.Arg(0)))
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if !(cfg.scale > 0 && cfg.scale <= 1) { // also false for NaN
		return cfg, bad(fmt.Errorf("redisv1: invalid -scale %v: must be greater than 0 and at most 1", cfg.scale))
	}
	if _, err := scaledPolicy(cfg.scale); err != nil { // e.g. -scale 1e-10 makes Initial 0
		return cfg, bad(err)
	}
	if cfg.real {
		switch {
		case set["scale"]:
			return cfg, bad(fmt.Errorf("redisv1: -scale %v is for the fake: the real API always gets grpcbackoff.DefaultPolicy()", cfg.scale))
		case cfg.project == "":
			return cfg, bad(errors.New("redisv1: -real needs -project"))
		case strings.ContainsAny(cfg.project, "/ "):
			return cfg, bad(fmt.Errorf("redisv1: invalid -project %q: must be a project id", cfg.project))
		case cfg.location == "" || strings.ContainsAny(cfg.location, "/ "):
			return cfg, bad(fmt.Errorf("redisv1: invalid -location %q: must be a region such as us-central1, or -", cfg.location))
		case cfg.create && cfg.location == "-":
			return cfg, bad(errors.New(`redisv1: -create needs a region in -location, not "-"`))
		case set["instance"] && !cfg.create:
			return cfg, bad(fmt.Errorf("redisv1: -instance %q is only used with -create", cfg.instance))
		}
		return cfg, nil
	}
	for _, name := range []string{"project", "location", "create", "instance"} {
		if set[name] {
			return cfg, bad(fmt.Errorf("redisv1: -%s %v is only used with -real", name, fs.Lookup(name).Value))
		}
	}
	return cfg, nil
}

// run runs the command with args (without the program name), writing its
// story to stdout. A bad command line gives a *usageError.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	if cfg.real {
		return runReal(ctx, cfg, stdout)
	}
	return runFake(ctx, cfg.scale, stdout)
}
