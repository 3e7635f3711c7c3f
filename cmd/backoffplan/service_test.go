package main

import (
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

func TestServiceUnknown(t *testing.T) {
	for _, tc := range []struct{ service, want string }{
		{"no.such.Service", `backoffplan: -service "no.such.Service": no such service among the pinned Google Cloud clients', nor registered in this build`},
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
