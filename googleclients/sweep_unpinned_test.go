package googleclients_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/googleclients"
	"github.com/platformkit/grpcbackoff/interceptor"
	gc "github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// TestSweepUnpinnedClients: issue 33's sweep of clients outside the pinned
// set, whose data the library takes from googleapis' service configs alone
// (Cloud Tasks v2, Cloud Scheduler, Cloud Monitoring v3 and dashboards,
// Dataproc's cluster controller, their mixins included), every RPC method
// under the three faults of TestSweepGeneratedClients, with its checks,
// and Explain equal to the wire: a code Explain leaves to the client is
// retried by the client alone (each of its attempts one on the wire), a
// code it gives this library by the library alone (one attempt of the
// client, 3 on the wire for ×2). (Before issue 33: RESOURCE_EXHAUSTED
// retried by nobody on all 57 methods, UNAVAILABLE by nobody on 6 safe
// ones, Explain wrong for GetQueue, CreateTask, GetJob, RunJob.)
func TestSweepUnpinnedClients(t *testing.T) {
	explain, err := interceptor.New(sweepPolicy())
	if err != nil {
		t.Fatal(err)
	}
	clients := googleclients.Unpinned()
	results := make([][]swept, len(clients))
	inBubbles(t, len(clients), func(i int) string { return clients[i].Service }, func(t *testing.T, i int) {
		results[i] = sweepClient(t, sweepFamily{Client: clients[i]}, explain, nil, faultU2, faultRE2, faultOutage)
	})
	if t.Failed() {
		return
	}
	n := 0
	for _, res := range results {
		for _, s := range res {
			n++
			checkSwept(t, s, sweepPolicy().MaxAttempts, slices.Contains(s.decision.Codes, codes.Unavailable))
			checkExplained(t, s)
		}
	}
	t.Logf("%d methods of %d clients swept", n, len(clients))
}

// explained returns the codes Explain says the client of s's method retries
// by itself, for the call the sweep makes: a service client's own call, for
// a mixin's method.
func explained(s swept) []codes.Code {
	for _, c := range s.decision.Clients {
		if !gc.IsMixin(s.method) || strings.HasPrefix(c.Client, "a service client's own call") {
			return c.Codes
		}
	}
	return nil
}

// checkExplained asserts that Explain says, for U×2 and RE×2, who retried
// on the wire.
func checkExplained(t *testing.T, s swept) {
	t.Helper()
	what := s.client + "." + s.rpc.name + " (" + s.method + ")"
	theirs := explained(s)
	for _, f := range []struct {
		fault string
		code  codes.Code
	}{{faultU2, codes.Unavailable}, {faultRE2, codes.ResourceExhausted}} {
		o := s.options[f.fault]
		switch {
		case slices.Contains(theirs, f.code):
			if o.err != nil || o.invocations != o.wire || o.wire != 3 {
				t.Errorf("%s, %s: %v; Explain says the client retries %v: want 3 attempts, each the client's", what, f.fault, o, f.code)
			}
		case slices.Contains(s.decision.Codes, f.code):
			if o.err != nil || o.invocations != 1 || o.wire != 3 {
				t.Errorf("%s, %s: %v; Explain says this library retries %v: want 3 attempts on the wire, 1 of the client", what, f.fault, o, f.code)
			}
		default:
			if o.wire != 1 {
				t.Errorf("%s, %s: %v; Explain says nobody retries %v: want 1 attempt", what, f.fault, o, f.code)
			}
		}
	}
}

// TestSweepUnknownMethods measures the rule for a method the table does not
// know (a client newer than googleapis' files), both ways, on Cloud Tasks
// and Cloud Scheduler with every method of theirs hidden from the table:
// the library's rule, every code of the Policy retried here (UNAVAILABLE
// too), against leaving UNAVAILABLE to the client (the Policy without
// UNAVAILABLE: the same calls then). It asserts the rule's bounds:
// RESOURCE_EXHAUSTED and UNAVAILABLE ×2 recovered wherever the client or
// Safety allows; in the outage at most the client's attempts +
// MaxAttempts − 1 on the wire, the memory of the client's call keeping two
// layers from multiplying; and it logs the figures of both ways for
// gaxretry/README.md.
func TestSweepUnknownMethods(t *testing.T) {
	var clients []googleclients.Client
	for _, c := range googleclients.Unpinned() {
		if c.Service == "google.cloud.tasks.v2.CloudTasks" || c.Service == "google.cloud.scheduler.v1.CloudScheduler" {
			clients = append(clients, c)
		}
	}
	var hide []string
	for _, c := range clients {
		ms, _ := gc.Methods(c.Service)
		hide = append(hide, ms...)
	}
	defer gc.HideForTest(hide)()

	leaveU := sweepPolicy()
	leaveU.Codes = []codes.Code{codes.ResourceExhausted}
	type way struct {
		name    string
		results [][]swept
	}
	ways := []*way{{name: "rule: every code here"}, {name: "UNAVAILABLE left to the client"}}
	for i, w := range ways {
		p := sweepPolicy()
		if i == 1 {
			p = leaveU
		}
		explain, err := interceptor.New(p)
		if err != nil {
			t.Fatal(err)
		}
		w.results = make([][]swept, len(clients))
		inBubbles(t, len(clients), func(j int) string { return w.name + "/" + clients[j].Service }, func(t *testing.T, j int) {
			w.results[j] = sweepClientWith(t, sweepFamily{Client: clients[j]}, explain, p, nil, faultU2, faultRE2, faultOutage)
		})
	}
	if t.Failed() {
		return
	}
	maxAttempts := sweepPolicy().MaxAttempts
	var table strings.Builder
	fmt.Fprintf(&table, "\n| way | methods | U×2 recovered (alone) | RE×2 recovered | two layers in U×2 | outage: most attempts on the wire (client's own) | outage recovered (alone) |\n|---|---|---|---|---|---|---|\n")
	for i, w := range ways {
		var methods, uRec, uAlone, reRec, twoLayers, wire, own, outRec, outAlone int
		for _, res := range w.results {
			for _, s := range res {
				methods++
				a, o := s.alone, s.options
				if o[faultU2].err == nil {
					uRec++
				}
				if a[faultU2].err == nil {
					uAlone++
				}
				if o[faultRE2].err == nil {
					reRec++
				}
				if x := o[faultU2]; x.invocations > 1 && x.wire > x.invocations {
					twoLayers++
				}
				if x := o[faultOutage]; x.wire > wire {
					wire, own = x.wire, x.invocations
				}
				if o[faultOutage].err == nil {
					outRec++
				}
				if a[faultOutage].err == nil {
					outAlone++
				}
				if i > 0 {
					continue
				}
				what := s.client + "." + s.rpc.name
				libU := slices.Contains(s.decision.Codes, codes.Unavailable)
				if u := o[faultU2]; (a[faultU2].err == nil || libU) && u.err != nil {
					t.Errorf("%s, U×2: %v; want recovered (alone: %v; Explain: %s)", what, u, a[faultU2], brief(s.decision))
				}
				if re := o[faultRE2]; re.err != nil {
					t.Errorf("%s, RE×2: %v; want recovered", what, re)
				}
				if out := o[faultOutage]; out.wire > out.invocations+maxAttempts-1 {
					t.Errorf("%s, outage: %v; want at most the client's attempts + MaxAttempts − 1", what, out)
				}
			}
		}
		fmt.Fprintf(&table, "| %s | %d | %d (%d) | %d | %d | %d (%d) | %d (%d) |\n", w.name, methods, uRec, uAlone, reRec, twoLayers, wire, own, outRec, outAlone)
	}
	t.Log(table.String())
}
