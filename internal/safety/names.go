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
// The name must start with the verb, as a word of its own ("Get",
// "GetOrder", not "Getaway"), and hold no word of change ("GetOrCreateUser",
// "GetAndReset" change). Not reads, and so not resent when nothing else says they may
// be: Create (AIP-133; a second one may make a second resource), Update
// (AIP-134) and Delete (AIP-135). The guide maps those to PATCH and DELETE,
// which the google.api.http rule takes as idempotent where a method has the
// binding; a name alone does not say the method follows the guide's
// semantics (an Update that increments, a Delete whose repeat answers
// NOT_FOUND for a delete that succeeded), and a write resent after it
// applied is the harm this package exists to prevent. Any other verb
// (custom methods, AIP-136) says nothing without a binding.
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
	if !ok || wordOf(words[1:], changes) != "" || wordOf(words[1:], takes) != "" {
		return "", false
	}
	return "a standard read by its name (" + verb + ", " + aip + ")", true
}

// takes are words of change beside changes that a name starting with a
// verb of reading may hold: GetAndReset, ListAndClaim, GetOrPut.
var takes = map[string]bool{
	"Put": true, "Upsert": true, "Replace": true, "Reset": true, "Clear": true, "Pop": true,
	"Take": true, "Claim": true, "Consume": true, "Lock": true, "Reserve": true, "Acquire": true,
	"Allocate": true, "Assign": true, "Mark": true, "Move": true, "Save": true, "Send": true,
}

// standardReads are the verbs of Named, with the guide's rule for each.
var standardReads = map[string]string{
	"Get":      "AIP-131",
	"List":     "AIP-132",
	"BatchGet": "AIP-231",
	"Search":   "AIP-136",
}
