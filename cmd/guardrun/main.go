// Command guardrun measures the retry guard of package guard for real, on
// this machine: a gRPC server on 127.0.0.1, with and without the guard,
// and 50 clients of grpc-go's built-in retry (a service config's
// retryPolicy), of this library (interceptor.WithServiceConfig, the same
// policy, no budget), or both, in an outage, a pause, and the same two
// where the retries keep the server overloaded. It prints a markdown table
// (retries that reached the handler, failed calls, goodput, time to
// recover) and, with -out, writes it and a chart there.
//
//	go run ./cmd/guardrun                              # every scenario and mix (~12 min)
//	go run ./cmd/guardrun -out cmd/guardrun/results    # and write the table and the chart
//	go run ./cmd/guardrun -scenarios overload -mixes mixed
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// scenarios are the runs' scenarios, by name.
var scenarios = []scenario{
	{name: "outage", capacity: ample},
	{name: "pause", pause: true, capacity: ample},
	{name: "overload", costly: true, capacity: tight},
	{name: "overload-pause", pause: true, capacity: tight},
}

// ample is a server far above the offered load and its retries (10 000
// requests/s; a 5 s pause queues 1 000 of the 2 000 it takes); tight one
// above the offered load (300 requests/s for 200) but below the load and
// its retries. Both answer UNAVAILABLE a request not served within 1 s, and
// do its work still.
var (
	ample = Capacity{Workers: 100, Service: 10 * time.Millisecond, Queue: 2000, Timeout: time.Second}
	tight = Capacity{Workers: 3, Service: 10 * time.Millisecond, Queue: 900, Timeout: time.Second}
)

func main() {
	cfg := config{step: 250 * time.Millisecond}
	flag.IntVar(&cfg.clients, "clients", 50, "clients, one connection each")
	flag.Float64Var(&cfg.rate, "rate", 4, "calls a second each client starts, on average")
	flag.DurationVar(&cfg.deadline, "deadline", 2*time.Second, "deadline of each call")
	flag.DurationVar(&cfg.warm, "warm", 5*time.Second, "time before the trigger")
	flag.DurationVar(&cfg.trigger, "trigger", 5*time.Second, "length of the outage or pause")
	flag.DurationVar(&cfg.after, "after", 20*time.Second, "time after the trigger")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the clients' arrivals (the same for the runs with and without the guard)")
	scs := flag.String("scenarios", "outage,pause,overload,overload-pause", "scenarios to run")
	mixes := flag.String("mixes", "grpc,ours,mixed", "clients: grpc (grpc-go's built-in retry), ours (this library), mixed (half each)")
	chartMix := flag.String("chart-mix", "mixed", "the mix the chart shows")
	out := flag.String("out", "", "directory to write guardrun.md and guardrun.svg to")
	flag.Parse()
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "guardrun:", err)
		os.Exit(2)
	}
	var chosen []scenario
	for _, name := range strings.Split(*scs, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "guardrun: unknown scenario %q\n", name)
			os.Exit(2)
		}
		chosen = append(chosen, scenarios[i])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var results []*result
	for _, sc := range chosen {
		for _, m := range strings.Split(*mixes, ",") {
			for _, guarded := range []bool{false, true} {
				fmt.Fprintf(os.Stderr, "guardrun: %s, %s clients, guard %v...\n", sc.name, m, guarded)
				r, err := run(ctx, cfg, tcp(), sc, mix(m), guarded)
				if err != nil {
					fmt.Fprintln(os.Stderr, "guardrun:", err)
					os.Exit(1)
				}
				results = append(results, r)
			}
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%s\n\n", describe(cfg, chosen))
	writeTable(&table, cfg, results)
	fmt.Print(table.String())
	if *out == "" {
		return
	}
	err := errors.Join(
		os.WriteFile(filepath.Join(*out, "guardrun.md"), []byte(table.String()), 0o644),
		writeChart(filepath.Join(*out, "guardrun.svg"), cfg, chosen, mix(*chartMix), results))
	if err != nil {
		fmt.Fprintln(os.Stderr, "guardrun:", err)
		os.Exit(1)
	}
}

func (c config) validate() error {
	var errs []error
	if c.clients < 1 || c.clients > 10000 {
		errs = append(errs, fmt.Errorf("-clients (%d) must be between 1 and 10000", c.clients))
	}
	if !(c.rate > 0) || c.rate > 1000 {
		errs = append(errs, fmt.Errorf("-rate (%v) must be in (0, 1000]", c.rate))
	}
	if c.deadline <= 0 {
		errs = append(errs, fmt.Errorf("-deadline (%v) must be positive", c.deadline))
	}
	if c.warm < 0 || c.trigger < 0 || c.after < 3*time.Second {
		errs = append(errs, fmt.Errorf("-warm (%v) and -trigger (%v) must not be negative, -after (%v) at least 3s", c.warm, c.trigger, c.after))
	}
	if c.length() > 10*time.Minute {
		errs = append(errs, fmt.Errorf("a run (%v) must be at most 10m", c.length()))
	}
	return errors.Join(errs...)
}
