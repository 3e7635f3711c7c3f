package googleclients_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/platformkit/grpcbackoff/googleclients"
	gc "github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// TestTableIsThePinnedClients: for each of the pinned generated clients,
// every method of its default CallOptions (read by reflection), what the
// library's data says the client retries (the table from the service
// configs, or an override that says why the client differs from its file)
// equals what its CallOptions retry: the codes, and the longest pause of
// its gax.Backoff, which bounds how long the library remembers a call of
// it. A call is looked up as the client makes it: its gapic/ token, and its
// connection's API, the client's own service.
func TestTableIsThePinnedClients(t *testing.T) {
	stop, err := googleclients.Offline()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	d, err := googleclients.Generate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clients := googleclients.Clients()
	checked, unnamed := 0, 0
	for _, m := range d.Methods {
		c := d.Clients[m.Client]
		call := gc.Call{Method: m.Name, Header: "gl-go/1.26.0 gapic/" + c.Gapic + " gax/2.27.0 grpc/1.85.0", Stream: m.Stream,
			API: clients[m.Client].Service, APIGapic: c.Gapic}
		r := gc.Lookup(call)
		what := fmt.Sprintf("%s %s (%s)", c.Package, c.ModuleVersion, c.Name)
		if !r.Known {
			// A method its file does not name gets no retry from the
			// client generator; the library retries every code of it.
			if m.Codes != 0 {
				t.Errorf("%s: %s: not in the table; its CallOptions retry %v", what, m.Name, gc.CodeNames(m.Codes))
			}
			unnamed++
			continue
		}
		if r.Codes != m.Codes {
			t.Errorf("%s: %s: the table says %v, its CallOptions retry %v", what, m.Name, gc.CodeNames(r.Codes), gc.CodeNames(m.Codes))
			continue
		}
		if m.Codes != 0 && r.Pause != m.Backoff.Max {
			t.Errorf("%s: %s: the table's longest pause is %v, its CallOptions' gax.Backoff %+v", what, m.Name, r.Pause, m.Backoff)
		}
		if m.Stream && r.Opening != (m.Codes != 0) {
			t.Errorf("%s: %s: a stream, Opening %v", what, m.Name, r.Opening)
		}
		checked++
	}
	commit, files, err := gc.TableSource()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d methods of %d pinned clients equal to the table of %d files at googleapis %s; %d more, which their files do not name, retry nothing, as the library takes them", checked, len(d.Clients), files, commit, unnamed)
	if checked+unnamed != len(d.Methods) || commit == "" {
		t.Errorf("%d + %d methods checked of %d, commit %q: want every method of the pinned clients", checked, unnamed, len(d.Methods), commit)
	}
}

// TestTableIsTheUnpinnedClients: the same check on clients the data was not
// read from (Cloud Tasks, Cloud Scheduler, Cloud Monitoring, Dataproc):
// the table from googleapis' files says what their CallOptions retry too,
// each method looked up as its client calls it.
func TestTableIsTheUnpinnedClients(t *testing.T) {
	stop, err := googleclients.Offline()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, c := range googleclients.Unpinned() {
		info, methods, err := googleclients.ReadClient(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		known := 0
		for _, m := range methods {
			r := gc.Lookup(gc.Call{Method: m.Name, Header: "gl-go/1.26.0 gapic/" + info.Gapic + " gax/2.27.0", Stream: m.Stream,
				API: c.Service, APIGapic: info.Gapic})
			switch {
			case r.Codes != m.Codes:
				t.Errorf("%s %s: %s: the table says %v (known %v), its CallOptions retry %v", info.Package, info.ModuleVersion, m.Name, gc.CodeNames(r.Codes), r.Known, gc.CodeNames(m.Codes))
			case m.Codes != 0 && r.Pause != m.Backoff.Max:
				t.Errorf("%s %s: %s: the table's longest pause is %v, its gax.Backoff %+v", info.Package, info.ModuleVersion, m.Name, r.Pause, m.Backoff)
			case r.Known:
				known++
			}
		}
		t.Logf("%s %s (%s): %d methods, %d named by their file, equal to its CallOptions; the others retry nothing", info.Package, info.ModuleVersion, info.Name, len(methods), known)
	}
}
