package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func lineOf(out, prefix string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

func TestServiceExplainsEveryMethod(t *testing.T) {
	args := []string{"-service", "google.cloud.redis.v1.CloudRedis", "-attempts", "5"}
	status, out, errOut := runPlan(t, args...)
	if status != 0 || errOut != "" {
		t.Fatalf("run(%q) = %d, stderr %q", args, status, errOut)
	}
	if n := strings.Count(out, "/google.cloud.redis.v1.CloudRedis/"); n != 11 {
		t.Errorf("run(%q): %d method lines, want the 11 of CloudRedis\n%s", args, n, out)
	}
	failover := lineOf(out, "/google.cloud.redis.v1.CloudRedis/FailoverInstance: ")
	if !strings.Contains(failover, "up to 5 attempts on RESOURCE_EXHAUSTED (UNAVAILABLE only when the connection could not be made)") ||
		!strings.Contains(failover, "not idempotent: google.api.http POST") || !strings.Contains(failover, "FailoverInstance neither reads nor sets a state") {
		t.Errorf("FailoverInstance line = %q", failover)
	}
	get := lineOf(out, "/google.cloud.redis.v1.CloudRedis/GetInstance: ")
	if !strings.Contains(get, "up to 5 attempts on UNAVAILABLE, RESOURCE_EXHAUSTED") || !strings.Contains(get, "idempotent: google.api.http GET") {
		t.Errorf("GetInstance line = %q", get)
	}

	status, out, _ = runPlan(t, append(args, "-nonidempotent-retries")...)
	failover = lineOf(out, "/google.cloud.redis.v1.CloudRedis/FailoverInstance: ")
	if status != 0 || !strings.Contains(failover, "on UNAVAILABLE, RESOURCE_EXHAUSTED") || !strings.Contains(failover, "WithNonIdempotentRetries") {
		t.Errorf("with -nonidempotent-retries: FailoverInstance line = %q", failover)
	}
}

// -service covers every service of the pinned Google Cloud clients,
// whatever this build links (it links none of Pub/Sub), and says, code by
// code, who retries the calls of their clients. (Issue 26: it refused
// google.pubsub.v1.Publisher.)
func TestServiceOfAPinnedClient(t *testing.T) {
	status, out, errOut := runPlan(t, "-service", "google.pubsub.v1.Publisher")
	if status != 0 || errOut != "" {
		t.Fatalf("-service google.pubsub.v1.Publisher: status %d, stderr %q", status, errOut)
	}
	get := lineOf(out, "/google.pubsub.v1.Publisher/GetTopic: ")
	if !strings.Contains(get, "UNAVAILABLE by the client's own retry, one attempt each here; RESOURCE_EXHAUSTED by this library") ||
		!strings.Contains(get, "idempotent: google.api.http GET") {
		t.Errorf("GetTopic line = %q", get)
	}
	publish := lineOf(out, "/google.pubsub.v1.Publisher/Publish: ")
	if !strings.Contains(publish, "not idempotent") {
		t.Errorf("Publish line = %q, want it not idempotent", publish)
	}
}

// A bad argument exits 2: a name that is no service's full name, or one
// this build registers as something else.
func TestServiceBadArgument(t *testing.T) {
	for _, tc := range []struct{ service, want string }{
		{"NoPackage", `backoffplan: -service "NoPackage": not a service's full name (package.Service)`},
		{"google.pubsub.v1.Publisher/GetTopic", `backoffplan: -service "google.pubsub.v1.Publisher/GetTopic": not a service's full name (package.Service)`},
		{"google.cloud.redis.v1.Instance", `backoffplan: -service "google.cloud.redis.v1.Instance": a message, not a service`},
	} {
		status, out, errOut := runPlan(t, "-service", tc.service)
		if out != "" {
			t.Errorf("-service %s: stdout %q, want nothing before the error", tc.service, out)
		}
		if status != 2 || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("-service %s: status %d, stderr %q, want 2 and %q", tc.service, status, errOut, tc.want)
		}
	}
}

// An unknown service is no bad argument: -service says so, and what the
// library does with its calls. (Issue 33: it exited 2 for any service but
// the pinned clients'.)
func TestServiceUnknown(t *testing.T) {
	status, out, errOut := runPlan(t, "-service", "no.such.Service")
	line := lineOf(out, "no.such.Service: ")
	if status != 0 || errOut != "" || !strings.Contains(line, "no googleapis service config names this service") ||
		!strings.Contains(line, "GetResource: up to 8 attempts on UNAVAILABLE, RESOURCE_EXHAUSTED") || !strings.Contains(line, "no code left to its client") ||
		!strings.Contains(line, "any other: /no.such.Service/{method}: up to 8 attempts on RESOURCE_EXHAUSTED (UNAVAILABLE only when the connection could not be made)") {
		t.Errorf("-service no.such.Service: status %d, stderr %q, line %q", status, errOut, line)
	}
}

// Every service of googleapis' service configs is known, per method and
// code, whatever this build links: Cloud Tasks (no pinned client), and a
// service its file configures whole.
func TestServiceOfTheTable(t *testing.T) {
	status, out, errOut := runPlan(t, "-service", "google.cloud.tasks.v2.CloudTasks")
	if status != 0 || errOut != "" || strings.Count(out, "/google.cloud.tasks.v2.CloudTasks/") != 18 {
		t.Fatalf("-service google.cloud.tasks.v2.CloudTasks: status %d, stderr %q\n%s", status, errOut, out)
	}
	get := lineOf(out, "/google.cloud.tasks.v2.CloudTasks/GetQueue: ")
	if !strings.Contains(get, "cloudtasks_grpc_service_config.json") || !strings.Contains(get, "UNAVAILABLE by the client's own retry, one attempt each here; RESOURCE_EXHAUSTED by this library") {
		t.Errorf("GetQueue line = %q", get)
	}
	update := lineOf(out, "/google.cloud.tasks.v2.CloudTasks/UpdateQueue: ")
	if !strings.Contains(update, "every code by this library") {
		t.Errorf("UpdateQueue line = %q", update)
	}
	status, out, _ = runPlan(t, "-service", "google.monitoring.dashboard.v1.DashboardsService")
	other := lineOf(out, "every other method of google.monitoring.dashboard.v1.DashboardsService")
	if status != 0 || !strings.Contains(other, "the whole service") || !strings.Contains(other, "UNAVAILABLE by the client's own retry") {
		t.Errorf("-service DashboardsService: status %d, other methods %q", status, other)
	}
}

// -conn-config explains each method on a connection whose resolver
// publishes the service config of the file: the owners' retryPolicy for
// FailoverInstance replaces the Policy, names its source and states the
// method resendable; a method it does not name keeps the Retrier's Policy.
// -xds says what grpc-go's own retry takes there, known only per call.
// (Issue 45.)
func TestServiceOnAConnection(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "sc.json")
	if err := os.WriteFile(doc, []byte(`{"methodConfig": [{"name": [{"service": "google.cloud.redis.v1.CloudRedis", "method": "FailoverInstance"}],
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE", "INTERNAL"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	status, out, errOut := runPlan(t, "-service", "google.cloud.redis.v1.CloudRedis", "-conn-config", doc)
	if status != 0 || errOut != "" {
		t.Fatalf("-conn-config: status %d, stderr %q", status, errOut)
	}
	failover := lineOf(out, "/google.cloud.redis.v1.CloudRedis/FailoverInstance: ")
	if !strings.Contains(failover, "up to 4 attempts on INTERNAL, UNAVAILABLE [the connection's service config from its resolver") ||
		!strings.Contains(failover, "idempotent: a retryPolicy for it in the connection's service config") {
		t.Errorf("-conn-config: FailoverInstance line = %q", failover)
	}
	if get := lineOf(out, "/google.cloud.redis.v1.CloudRedis/GetInstance: "); !strings.Contains(get, "[the Retrier's Policy]") {
		t.Errorf("-conn-config: GetInstance line = %q", get)
	}

	status, out, errOut = runPlan(t, "-service", "google.cloud.redis.v1.CloudRedis", "-xds")
	get := lineOf(out, "/google.cloud.redis.v1.CloudRedis/GetInstance: ")
	if status != 0 || errOut != "" || !strings.Contains(get, "grpc-go's own retry: the failures of a call that its xDS route's retry_policy retries") ||
		!strings.Contains(get, "known only when the call is made") {
		t.Errorf("-xds: status %d, stderr %q, GetInstance line = %q", status, errOut, get)
	}
}

// A -conn-config that grpc-go refuses, or that cannot be read, or one
// without -service, is an error naming it.
func TestServiceOnAConnectionBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": "four"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-service", "google.cloud.redis.v1.CloudRedis", "-conn-config", bad}, "-conn-config " + bad + ": grpc-go refuses the service config"},
		{[]string{"-service", "google.cloud.redis.v1.CloudRedis", "-conn-config", bad + ".missing"}, "-conn-config: open " + bad + ".missing"},
		{[]string{"-xds"}, "-conn-config and -xds explain the methods of a -service"},
	} {
		if status, _, errOut := runPlan(t, c.args...); status != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and %q", c.args, status, errOut, c.want)
		}
	}
}
