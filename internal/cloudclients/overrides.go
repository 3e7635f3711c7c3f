package cloudclients

import (
	"slices"
	"strings"
	"time"
)

// Hand-maintained: where a pinned client's default CallOptions differ from
// the file of googleapis the table was generated from, each difference
// found by googleclients' TestTableIsThePinnedClients, with why. An override
// holds for the calls of the client at its gapic/ version only: other
// versions of the client get the table's answer. Keep overrides sorted by
// method, then version.

// override is what one pinned client retries for one method, where its
// file says otherwise.
type override struct {
	method string        // full gRPC method
	gapic  string        // the client's gapic/ version: "1.24.0"
	codes  uint32        // what its CallOptions retry, bit 1<<code
	pause  time.Duration // its gax.Backoff's Max
	why    string        // the client, and why it differs from the file
}

var overrides = [...]override{
	// Memorystore (Valkey), cloud.google.com/go/memorystore v1.8.0: its
	// CallOptions retry UNAVAILABLE (1 s to 10 s, ×1.3, as the file's other
	// reads) for the four ACL policy reads, which
	// google/cloud/memorystore/v1/memorystore_v1_grpc_service_config.json
	// at the table's commit does not name (it names no ACL policy method):
	// the client was generated from a later googleapis, which configured
	// them (v1.8.0, of 2026-11-05, "Update API sources and regenerate" in its
	// CHANGES.md; the table's commit is of 2026-08-22). Its other ACL
	// methods (writes) retry nothing, as the table takes them.
	{method: "/google.cloud.memorystore.v1.Memorystore/GetAclPolicy", gapic: "1.8.0", codes: bUnavailable, pause: 10 * time.Second,
		why: "cloud.google.com/go/memorystore/apiv1 v1.8.0 CallOptions: generated from a googleapis newer than the table's, whose file configures the ACL policy reads"},
	{method: "/google.cloud.memorystore.v1.Memorystore/GetAclPolicyRevision", gapic: "1.8.0", codes: bUnavailable, pause: 10 * time.Second,
		why: "cloud.google.com/go/memorystore/apiv1 v1.8.0 CallOptions: generated from a googleapis newer than the table's, whose file configures the ACL policy reads"},
	{method: "/google.cloud.memorystore.v1.Memorystore/ListAclPolicies", gapic: "1.8.0", codes: bUnavailable, pause: 10 * time.Second,
		why: "cloud.google.com/go/memorystore/apiv1 v1.8.0 CallOptions: generated from a googleapis newer than the table's, whose file configures the ACL policy reads"},
	{method: "/google.cloud.memorystore.v1.Memorystore/ListAclPolicyRevisions", gapic: "1.8.0", codes: bUnavailable, pause: 10 * time.Second,
		why: "cloud.google.com/go/memorystore/apiv1 v1.8.0 CallOptions: generated from a googleapis newer than the table's, whose file configures the ACL policy reads"},
}

// overrideFor returns the override of method at gapic/ version gapic, or nil.
func overrideFor(method, gapic string) *override {
	i, found := slices.BinarySearchFunc(overrides[:], method, func(o override, m string) int { return strings.Compare(o.method, m) })
	for ; found && i < len(overrides) && overrides[i].method == method; i++ {
		if overrides[i].gapic == gapic {
			return &overrides[i]
		}
	}
	return nil
}
