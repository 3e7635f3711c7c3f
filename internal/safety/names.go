package safety

import "strings"

// Named returns, for a method whose name is that of a standard method that
// reads, the rule that says so; ok is false for every other name. Google's
// API design guide (AIP-130 to AIP-136, AIP-231) maps these methods to HTTP
// GET, which changes nothing on the server:
//
//   - Get<Resource> (AIP-131), List<Resources> (AIP-132),
//     BatchGet<Resources> (AIP-231), and Search<Resources>, the guide's
//     custom method for a List beyond one collection (AIP-136, and its
//     standard methods' chapter): each reads.
//
// The name must have the guide's form: the verb, as a camel word of its own
// ("Get", "GetOrder", not "Getaway"), then the name of a resource, which is
// nouns (GetIamPolicy, ListInstances, BatchGetDocuments, SearchCatalog). A
// list of the verbs of change is never whole, so the rule does not rest on
// one: a name that does a second thing says so with a conjunction
// (GetOrCreateCart, GetAndDecrementStock, GetOrMintToken), and no name with
// one is a standard read, whatever its second verb; the words after the verb
// must also hold no verb of change (GetNextTicket, ListClaimTasks), so a
// name that drops the conjunction is still a write. A read whose resource's
// name holds such a word (GetUpdateStatus) is then treated as a write: not
// resent after a failure that may have applied, as a bare client would not
// resend it, where a write taken for a read would be applied twice.
//
// Not reads, and so not resent when nothing else says they may be: Create
// (AIP-133; a second one may make a second resource), Update (AIP-134) and
// Delete (AIP-135). The guide maps those to PATCH and DELETE, which the
// google.api.http rule takes as idempotent where a method has the binding;
// a name alone does not say the method follows the guide's semantics (an
// Update that increments, a Delete whose repeat answers NOT_FOUND for a
// delete that succeeded). Any other verb (custom methods, AIP-136) says
// nothing by its name outside Google's APIs (see Describe).
func Named(method string) (rule string, ok bool) {
	_, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if name == "" {
		return "", false
	}
	words := camelWords(name)
	verb := words[0]
	if verb == "Batch" && len(words) > 1 && words[1] == "Get" {
		verb = "BatchGet"
		words = words[1:]
	}
	aip, ok := standardReads[verb]
	if !ok {
		return "", false
	}
	for _, w := range words[1:] {
		if conjunctions[w] || changes[w] || takes[w] {
			return "", false
		}
	}
	return "a standard read by its name (" + verb + ", " + aip + ")", true
}

// standardReads are the verbs of Named, with the guide's rule for each.
var standardReads = map[string]string{
	"Get":      "AIP-131",
	"List":     "AIP-132",
	"BatchGet": "AIP-231",
	"Search":   "AIP-136",
}

// conjunctions join a second action to a name's first: GetOrCreate,
// GetAndReset, FetchThenLock, GetElseInsert, GetIfAbsentPut.
var conjunctions = map[string]bool{
	"And": true, "Or": true, "Then": true, "Else": true, "Also": true, "Plus": true,
	"If": true, "Unless": true, "Nor": true,
}

// takes are verbs of change beside changes (describe.go) that a name
// starting with a verb of reading may hold without a conjunction
// (ListClaimTasks, GetRenewLease), and words of taking a fresh one
// (GetNextId, GetNewToken): a name holding one is not a standard read. The
// words are those seldom a resource's noun, so that reads (GetRun, GetGrant,
// GetIssue, GetTrigger) keep their names' rule.
var takes = map[string]bool{
	"Put": true, "Upsert": true, "Replace": true, "Reset": true, "Clear": true, "Pop": true,
	"Take": true, "Claim": true, "Consume": true, "Lock": true, "Unlock": true, "Reserve": true,
	"Acquire": true, "Allocate": true, "Assign": true, "Mark": true, "Move": true, "Save": true,
	"Send": true, "Decrement": true, "Register": true, "Init": true, "Initialize": true,
	"Provision": true, "Mint": true, "Swap": true, "Renew": true, "Submit": true, "Ack": true,
	"Acknowledge": true, "Enqueue": true, "Dequeue": true, "Evict": true, "Purge": true,
	"Drain": true, "Revoke": true, "Rotate": true, "Bump": true, "Invoke": true,
	"Execute": true, "Approve": true, "Reject": true, "Refresh": true, "Next": true, "New": true,
}
