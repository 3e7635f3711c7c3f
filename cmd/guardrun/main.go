// Command guardrun measures the retry guard of package guard for real, on
// this machine: a gRPC server on 127.0.0.1, with and without the guard,
// and 100 clients of grpc-go's built-in retry (a service config's
// retryPolicy), of this library (interceptor.WithServiceConfig, the same
// policy, no budget), or both: a flaky but healthy server (20% and 40% of
// requests failing at random), an outage with patient callers, a server
// the retries keep overloaded, a brownout with sheddable and critical
// calls, and pauses. It prints a markdown table (retries that reached the
// handler, failed calls, goodput, time to recover, the densest 100 ms of
// retries while over) and, with -out, writes it and a chart there.
//
//	go run ./cmd/guardrun                              # the default scenarios and mixes (~11 min)
//	go run ./cmd/guardrun -out cmd/guardrun            # and write the table and the chart
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

	"google.golang.org/grpc/codes"
)

// short is a run of 15 s whose trigger lasts 10 s from the start: the
// flaky server and the brownout, as the issue measured them (2 000 calls in
// the trigger); long one of 30 s whose trigger lasts 5 s from 5 s.
var (
	short = timing{warm: 0, trigger: 10 * time.Second, after: 5 * time.Second}
	long  = timing{warm: 5 * time.Second, trigger: 5 * time.Second, after: 20 * time.Second}
)

// scenarios are the runs' scenarios, by name; the first five run by
// default.
var scenarios = []scenario{
	{name: "flaky-20", flaky: 0.2, capacity: ample, timing: short},
	{name: "flaky-40", flaky: 0.4, capacity: ample, timing: short},
	{name: "outage", patient: true, capacity: ample, timing: long},
	{name: "overload", costly: true, capacity: tight, timing: long},
	{name: "brownout", brownout: 0.4, capacity: ample, timing: short},
	{name: "pause", pause: true, capacity: ample, timing: long},
	{name: "overload-pause", pause: true, capacity: tight, timing: long},
}

// ample is a server far above the offered load and its retries (10 000
// requests/s; a 5 s pause queues 1 000 of the 2 000 it takes), answering
// UNAVAILABLE past its queue or its 1 s; tight one above the offered load
// (300 requests/s for 200) but below the load and its retries, which sheds
// with RESOURCE_EXHAUSTED, its own measure of overload. Both do the work of
// a request answered or given up.
var (
	ample = Capacity{Workers: 100, Service: 10 * time.Millisecond, Queue: 2000, Timeout: time.Second, Shed: codes.Unavailable}
	tight = Capacity{Workers: 3, Service: 10 * time.Millisecond, Queue: 900, Timeout: time.Second, Shed: codes.ResourceExhausted}
)

func main() {
	cfg := config{step: 100 * time.Millisecond}
	var over timing
	flag.IntVar(&cfg.clients, "clients", 100, "clients, one connection each")
	flag.Float64Var(&cfg.rate, "rate", 2, "calls a second each client starts, on average")
	flag.DurationVar(&cfg.deadline, "deadline", 2*time.Second, "deadline of each call")
	flag.DurationVar(&over.warm, "warm", 0, "time before the trigger (default: the scenario's)")
	flag.DurationVar(&over.trigger, "trigger", 0, "length of the trigger (default: the scenario's)")
	flag.DurationVar(&over.after, "after", 0, "time after the trigger (default: the scenario's)")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the clients' arrivals (the same for the runs with and without the guard)")
	scs := flag.String("scenarios", "flaky-20,flaky-40,outage,overload,brownout", "scenarios to run: flaky-20, flaky-40, outage, overload, brownout, pause, overload-pause")
	mixes := flag.String("mixes", "grpc,ours,mixed", "clients: grpc (grpc-go's built-in retry), ours (this library), mixed (half each)")
	chartMix := flag.String("chart-mix", "mixed", "the mix the chart shows")
	out := flag.String("out", "", "directory to write guardrun.md and guardrun.svg to")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var chosen []scenario
	for _, name := range strings.Split(*scs, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "guardrun: unknown scenario %q\n", name)
			os.Exit(2)
		}
		sc := scenarios[i]
		if set["warm"] {
			sc.timing.warm = over.warm
		}
		if set["trigger"] {
			sc.timing.trigger = over.trigger
		}
		if set["after"] {
			sc.timing.after = over.after
		}
		c := cfg
		c.timing = sc.timing
		if err := c.validate(); err != nil {
			fmt.Fprintf(os.Stderr, "guardrun: %s: %v\n", sc.name, err)
			os.Exit(2)
		}
		chosen = append(chosen, sc)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var results []*result
	for _, sc := range chosen {
		for _, m := range strings.Split(*mixes, ",") {
			for _, guarded := range []bool{false, true} {
				fmt.Fprintf(os.Stderr, "guardrun: %s, %s clients, guard %v...\n", sc.name, m, guarded)
				c := cfg
				c.timing = sc.timing
				r, err := run(ctx, c, tcp(), sc, mix(m), guarded)
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
	writeTable(&table, results)
	fmt.Print(table.String())
	if *out == "" {
		return
	}
	err := errors.Join(
		os.WriteFile(filepath.Join(*out, "guardrun.md"), []byte(table.String()), 0o644),
		writeChart(filepath.Join(*out, "guardrun.svg"), chosen, mix(*chartMix), results))
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
