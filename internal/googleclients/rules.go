package googleclients

import (
	"slices"
	"strings"
)

// rule is who retries what for the calls of one method made by one kind of
// client: the codes left to the client, which the library gives one
// attempt, and so retries every other code of its Policy itself.
type rule struct {
	client  bool   // the header is a Google client's: it has a gapic/ or gccl/ token
	codes   uint32 // codes left to the client (it retries them, or refuses them on purpose): bit 1<<code
	hinted  uint32 // codes the client retries only when the error carries RetryInfo
	opening bool   // a stream whose client retry covers only its opening
	once    uint32 // codes left to the client too on a subscription with exactly-once delivery (pubsub.go)
	known   bool   // the method is in the data
	source  string // where codes come from, for Explain
}

// genClient is a generated client of clientdata_gen.go.
type genClient struct {
	module        string // "cloud.google.com/go/redis"
	moduleVersion string // "v1.29.0", as googleclients/go.mod pins it
	pkg           string // "cloud.google.com/go/redis/apiv1"
	name          string // "CloudRedisClient"
	gapic         string // "1.29.0": its gapic/ token
}

// genMethod is what one generated client's default CallOptions retry for
// one method.
type genMethod struct {
	method string // full gRPC method: "/google.cloud.redis.v1.CloudRedis/GetInstance"
	codes  uint32 // bit 1<<code
	client uint8  // index in genClients
	stream bool   // a stream: its retry covers only the opening
	safety int8   // what its descriptor tells: 1 idempotent, 2 not idempotent, 0 unknown (interceptor.Safety)
	why    uint8  // the reason of safety, in genWhy
}

// serviceRule is what the data knows of one service, for its unknown
// methods.
type serviceRule struct {
	name   string // "/google.pubsub.v1.Publisher/", as a method's prefix
	codes  uint32 // every code any pinned client retries for a method of it
	source string
}

var (
	// genSources are the sources of genClients' entries, by index.
	genSources = func() (s [len(genClients)]string) {
		for i, c := range genClients {
			s[i] = c.pkg + " " + c.moduleVersion + " CallOptions (" + c.name + ")"
		}
		return s
	}()
	// services are the services of the data, sorted by name.
	services = servicesOf()
	// anyCodes are the codes any pinned client retries for any method.
	anyCodes = func() (codes uint32) {
		for _, s := range services {
			codes |= s.codes
		}
		return codes
	}()
)

const (
	sourceShared  = "the union of the CallOptions of the pinned clients of this method (none, or several, sends the call's gapic/ version)"
	sourceUnknown = "unknown service: every code any pinned client retries for any method"
)

// servicesOf returns the services of genMethods and handEntries, sorted.
func servicesOf() []serviceRule {
	var out []serviceRule
	add := func(method string, codes uint32) {
		name := serviceOf(method)
		i, found := searchServices(out, name)
		if !found {
			out = append(out, serviceRule{})
			copy(out[i+1:], out[i:])
			out[i] = serviceRule{name: name}
		}
		out[i].codes |= codes
	}
	for _, m := range genMethods {
		add(m.method, m.codes)
	}
	for _, h := range handEntries {
		add(h.method, h.codes)
	}
	for i := range out {
		out[i].source = "unknown method of " + strings.Trim(out[i].name, "/") +
			": every code any pinned client retries for that service"
	}
	return out
}

// serviceOf returns the prefix of method up to its last '/', included:
// "/pkg.Service/".
func serviceOf(method string) string {
	return method[:strings.LastIndexByte(method, '/')+1]
}

// searchServices returns the index of name in s, sorted, or where to insert
// it.
func searchServices(s []serviceRule, name string) (int, bool) {
	lo, hi := 0, len(s)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s[mid].name < name {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(s) && s[lo].name == name
}

// genRange returns the entries of method in genMethods: [lo, hi).
func genRange(method string) (lo, hi int) {
	lo, hi = 0, len(genMethods)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if genMethods[mid].method < method {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	hi = lo
	for hi < len(genMethods) && genMethods[hi].method == method {
		hi++
	}
	return lo, hi
}

// handIndex returns the index of method's entry in handEntries, or -1.
func handIndex(method string) int {
	lo, hi := 0, len(handEntries)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if handEntries[mid].method < method {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(handEntries) && handEntries[lo].method == method {
		return lo
	}
	return -1
}

// clientTokens returns the version of the gapic/ token of an
// x-goog-api-client value, whether it has one, and whether it has a gccl/
// token: only Google's clients send them. A token is a space-separated
// name/version pair; gccl-attempt-count/1 and the like are not gccl/.
func clientTokens(header string) (gapic string, hasGapic, hasGccl bool) {
	for header != "" {
		tok := header
		if i := strings.IndexByte(header, ' '); i >= 0 {
			tok, header = header[:i], header[i+1:]
		} else {
			header = ""
		}
		if v, ok := strings.CutPrefix(tok, "gapic/"); ok && !hasGapic {
			gapic, hasGapic = v, true
		} else if strings.HasPrefix(tok, "gccl/") {
			hasGccl = true
		}
	}
	return gapic, hasGapic, hasGccl
}

// lookup returns the rule of a call of method whose x-goog-api-client value
// is header. A header without a gapic/ or gccl/ token is not a Google
// client's (the zero rule). With a gccl/ token, a hand-written client's
// entry for the method wins. Otherwise a method known for one generated
// client keeps its entry whatever the call's gapic/ version; one that
// several share takes the entry of the client at the call's gapic/
// version, or the union of the entries of those at that version, or of all
// if none is. An unknown method leaves to the client every code that any
// pinned client retries for its service, or, for an unknown service, for
// any method. It allocates nothing.
func lookup(method, header string) rule {
	gapic, hasGapic, hasGccl := clientTokens(header)
	if !hasGapic && !hasGccl {
		return rule{}
	}
	if hasGccl {
		if i := handIndex(method); i >= 0 {
			return handRule(&handEntries[i])
		}
	}
	lo, hi := genRange(method)
	switch {
	case hi-lo == 1:
		return genRule(&genMethods[lo])
	case hi > lo:
		n, at := 0, lo
		for i := lo; i < hi; i++ {
			if genClients[genMethods[i].client].gapic == gapic {
				n, at = n+1, i
			}
		}
		if n == 1 {
			return genRule(&genMethods[at])
		}
		r := rule{client: true, known: true, opening: genMethods[lo].stream, source: sourceShared}
		for i := lo; i < hi; i++ {
			if n == 0 || genClients[genMethods[i].client].gapic == gapic {
				r.codes |= genMethods[i].codes
			}
		}
		r.opening = r.opening && r.codes != 0
		return r
	}
	if i, found := searchServices(services, serviceOf(method)); found {
		return rule{client: true, codes: services[i].codes, source: services[i].source}
	}
	return rule{client: true, codes: anyCodes, source: sourceUnknown}
}

func genRule(m *genMethod) rule {
	return rule{client: true, known: true, codes: m.codes, opening: m.stream && m.codes != 0,
		source: genSources[m.client]}
}

func handRule(h *handEntry) rule {
	return rule{client: true, known: true, codes: h.codes, hinted: h.hinted, opening: h.opening,
		once: h.exactlyOnce, source: h.source}
}

// explainRules returns what the calls of method get from each kind of
// client that may make them: first a call that is no Google client's; then
// each pinned generated client of the method, at its gapic/ version, and,
// if several share it, a client at another version; then the hand-written
// client of the method, with its gccl/ token; or, for a method the data
// does not know, the rule of an unknown method.
func explainRules(method string) []rule {
	out := []rule{{source: "no Google client's call (no gapic/ or gccl/ token in x-goog-api-client): the Policy alone"}}
	lo, hi := genRange(method)
	for i := lo; i < hi; i++ {
		out = append(out, genRule(&genMethods[i]))
	}
	if hi-lo > 1 {
		out = append(out, lookup(method, "gapic/0.0.0-not-pinned"))
	}
	if i := handIndex(method); i >= 0 {
		out = append(out, handRule(&handEntries[i]))
	}
	if len(out) == 1 {
		out = append(out, lookup(method, "gapic/0.0.0-not-pinned"))
	}
	return out
}

// methodsOf returns the methods the data knows of service
// ("google.pubsub.v1.Publisher"), sorted: what cmd/backoffplan -service
// lists, whatever the binary links.
func methodsOf(service string) []string {
	prefix := "/" + service + "/"
	var out []string
	for _, m := range genMethods {
		if strings.HasPrefix(m.method, prefix) && (len(out) == 0 || out[len(out)-1] != m.method) {
			out = append(out, m.method)
		}
	}
	for _, h := range handEntries {
		if i, found := slices.BinarySearch(out, h.method); strings.HasPrefix(h.method, prefix) && !found {
			out = slices.Insert(out, i, h.method)
		}
	}
	return out
}
