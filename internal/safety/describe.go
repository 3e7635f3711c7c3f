package safety

import (
	"strings"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/platformkit/grpcbackoff/internal/googledata"
)

// Level is what is known of a method: the values of interceptor.Safety.
type Level int8

const (
	Unknown       Level = iota // nothing is known: the method is treated as a write (see Knowledge.Assumed)
	Idempotent                 // the method may be sent again after any failure
	NotIdempotent              // not sent again after a failure that may have been applied
)

// Knowledge is what is known of a method's safety, and from where. Of a
// Catalog, its Level is Idempotent or NotIdempotent, never Unknown.
type Knowledge struct {
	Level  Level
	Source string
	// Assumed says that nothing established the Level: a method no rule
	// knows is treated as a write (NotIdempotent), but it is not known not
	// to be idempotent, so a service-wide hedging entry skips it where New
	// would refuse it for a method known not to be.
	Assumed bool
	// ByRequest says that a call of a write may be resent after all when
	// its request carries a non-empty request_id (AIP-155: the server
	// deduplicates), or sets ID (see Resendable). False for a write someone
	// stated (WithSafety, CallNotIdempotent).
	ByRequest bool
	// ID is, for a Google API's create with an ID of the caller's choosing
	// (AIP-133: "instance_id"), the field whose value, set in a call's
	// request, makes the call one create of one resource: a resend after a
	// create that applied answers ALREADY_EXISTS. "" for any other method.
	ID protoreflect.Name
}

// Describe returns what is known of method's safety without the Retrier's
// options: what its descriptor says (Descriptor), else, for a method of a
// Google API (a google.* package), what the words of its name say (see
// reads), else the name of a standard method that reads (Named), else that
// it is treated as a write.
func Describe(method string) Knowledge {
	k, ok := Descriptor(method)
	if ok {
		return k
	}
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if strings.HasPrefix(service, "google.") && name != "" {
		if why, ok := byWords(name); ok {
			return Knowledge{Level: Idempotent, Source: why + ", by the words of a Google API's method (AIP-136); " + k.Source}
		}
	}
	if n, ok := Named(method); ok {
		return Knowledge{Level: Idempotent, Source: n + "; " + k.Source}
	}
	return Knowledge{Level: NotIdempotent, Assumed: true, ByRequest: true,
		Source: "treated as a write, resent only when its request carries a request_id (AIP-155): " + k.Source + ", and its name is no standard read (Get, List, BatchGet, Search)"}
}

// Descriptor returns what method's descriptor says of its safety, ok false
// when it says nothing (Source then says why); for a method of a pinned
// Google Cloud client whose generated package the binary does not link,
// what the data says its descriptor tells. The rules:
// idempotency_level NO_SIDE_EFFECTS and IDEMPOTENT, and the google.api.http
// verbs GET, PUT and DELETE (HTTP's idempotent ones, RFC 9110), are
// Idempotent, and so is PATCH in a Google API (a google.* package), where it
// is an Update of the fields of its mask (AIP-134); elsewhere PATCH, which
// may apply twice (RFC 5789), is NotIdempotent. A POST, HTTP's verb
// that may apply twice, is Idempotent when its name is a standard read's
// (Named); in a Google API (a google.* package), designed to its guide,
// also when its name starts with a verb that sets a state or reads with no
// word of change (see reads). Any other POST is NotIdempotent, resent only
// when its request carries a request_id (AIP-155) or, for a Google API's
// create with a user-specified ID (AIP-133), sets that ID (Knowledge.ID).
func Descriptor(method string) (Knowledge, bool) {
	k, ok := Registered(method)
	if !ok && strings.HasPrefix(k.Source, "no descriptor registered") {
		if m, found := googledata.Pinned(method); found {
			k := Knowledge{Level: Level(m.Safety), Source: m.Why + " (the descriptor of the pinned client's, not linked in)"}
			k.ByRequest = k.Level == NotIdempotent
			k.ID = protoreflect.Name(m.ID)
			return k, k.Level != Unknown
		}
	}
	return k, ok
}

// Known reports whether a descriptor the binary registers, or the pinned
// clients' data, holds method.
func Known(method string) bool {
	if _, found := googledata.Pinned(method); found {
		return true
	}
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	return err == nil && ok && sd.Methods().ByName(protoreflect.Name(name)) != nil
}

// Registered is Descriptor for the descriptors the binary registers
// (protoregistry.GlobalFiles) alone: the generator of the pinned clients'
// data writes what it says.
func Registered(method string) (Knowledge, bool) {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return Knowledge{Source: "no descriptor registered for " + service}, false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return Knowledge{Source: service + " is not a service"}, false
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return Knowledge{Source: "no method " + name + " in service " + service}, false
	}
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	switch lvl := opts.GetIdempotencyLevel(); lvl {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return Knowledge{Level: Idempotent, Source: "idempotency_level " + lvl.String()}, true
	}
	verb, path, ok := httpBinding(opts)
	if !ok {
		return Knowledge{Source: "neither idempotency_level nor google.api.http"}, false
	}
	binding := "google.api.http " + strings.ToUpper(verb) + " " + path
	google := strings.HasPrefix(service, "google.")
	switch {
	case verb == "get" || verb == "put" || verb == "delete":
		return Knowledge{Level: Idempotent, Source: binding}, true
	case verb == "patch" && google:
		return Knowledge{Level: Idempotent, Source: binding + ": an Update of the fields of its mask (AIP-134)"}, true
	case verb == "patch":
		// HTTP's PATCH may apply twice (RFC 5789); only Google's design
		// makes it a set.
		k := Knowledge{Level: NotIdempotent, ByRequest: true, Source: binding + ": PATCH may apply twice outside Google's APIs (RFC 5789)"}
		if stringField(md.Input().Fields(), "request_id") {
			k.Source += "; resent when its request carries a request_id (AIP-155)"
		}
		return k, true
	case verb != "post":
		return Knowledge{Source: binding + ", a verb of its own"}, false
	}
	in := md.Input().Fields()
	k := Knowledge{Level: NotIdempotent, ByRequest: true}
	switch {
	case !google:
		// The words of a custom method's name are Google's design: a POST
		// of another API reads only by a standard read's name.
		if rule, ok := Named(method); ok {
			return Knowledge{Level: Idempotent, Source: binding + ": " + rule}, true
		}
		k.Source = binding + ": " + name + " is no standard read (Get, List, BatchGet, Search)"
	case stringField(in, createID(name)):
		k.ID = createID(name)
		k.Source = binding + ": Create with a user-specified " + string(k.ID) + " (AIP-133), resent when its request sets it"
	default:
		if why, ok := byWords(name); ok {
			return Knowledge{Level: Idempotent, Source: binding + ": " + why}, true
		}
		k.Source = binding + ": " + name + " neither reads nor sets a state"
	}
	if stringField(in, "request_id") {
		k.Source += "; resent when its request carries a request_id (AIP-155)"
	}
	return k, true
}

// createID returns the field of a create's user-specified ID (AIP-133) for
// the method name "Create<Resource>": "<resource>_id"; "" for another name.
func createID(name string) protoreflect.Name {
	resource, ok := strings.CutPrefix(name, "Create")
	if !ok || resource == "" {
		return ""
	}
	return protoreflect.Name(Snake(resource) + "_id")
}

// stringField reports whether fields holds a singular string field name.
func stringField(fields protoreflect.FieldDescriptors, name protoreflect.Name) bool {
	f := fields.ByName(name)
	return name != "" && f != nil && f.Kind() == protoreflect.StringKind && f.Cardinality() != protoreflect.Repeated
}

// byWords returns why the name of a Google API's custom method says it may
// be sent again (see reads), or false.
func byWords(name string) (string, bool) {
	words := camelWords(name)
	if setsState[words[0]] {
		return name + " sets a state (" + words[0] + ")", true
	}
	if read, change := wordOf(words, reads), wordOf(words, changes); read != "" && change == "" {
		return name + " reads (" + read + ")", true
	}
	return "", false
}

// The words of a POST method's name (AIP-136 names custom methods verb
// first: ReadRows, GetIamPolicy, CheckAndMutateRow) that make it safe to
// send again. A method reads when its name has a word of reading (or of
// watching, or of computing without a change, as KMS's Encrypt does) and no
// word of change: ReadRows and ExecuteQuery read, ReadModifyWriteRow does
// not. A method sets a state when its name starts with a verb whose second
// application leaves what the first left: SetIamPolicy, Acknowledge,
// ModifyAckDeadline, CancelOperation. Every other POST, Publish, Commit,
// MutateRow or FailoverInstance, may apply twice. These words are read only
// in the names of Google's APIs, designed to its guide: a method whose
// google.api.http binding is a POST, and a method of a google.* package
// with no binding (StreamingPull, ReadObject, WaitOperation); any other
// method with no binding is known by its name only when it is a standard
// read (Named).
var (
	reads = map[string]bool{
		"Get": true, "List": true, "Read": true, "Search": true, "Lookup": true,
		"Find": true, "Describe": true, "Check": true, "Test": true, "Validate": true,
		"Sample": true, "Query": true, "Fetch": true, "Watch": true, "Ping": true,
		"Generate": true,
		"Wait":     true,                                       // Operations' WaitOperation (AIP-151): waits for an operation's end
		"Pull":     true,                                       // leases messages; those of a lost answer are delivered again
		"Listen":   true,                                       // Firestore's Listen: watches documents
		"Tail":     true,                                       // Logging's TailLogEntries: watches log entries
		"Encrypt":  true, "Decrypt": true, "Decapsulate": true, // compute with a key, change nothing
	}
	changes = map[string]bool{
		"Write": true, "Mutate": true, "Modify": true, "Update": true, "Set": true,
		"Create": true, "Delete": true, "Insert": true, "Add": true, "Remove": true,
		"Append": true, "Increment": true, "Commit": true, "Publish": true,
		"Apply": true, "Dml": true,
	}
	setsState = map[string]bool{
		"Set": true, "Modify": true, "Acknowledge": true, "Cancel": true,
		"Rollback": true, "Seek": true, "Detach": true, "Undelete": true,
	}
)

// wordOf returns the first of words that set holds, or "".
func wordOf(words []string, set map[string]bool) string {
	for _, w := range words {
		if set[w] {
			return w
		}
	}
	return ""
}

// camelWords splits "GetIamPolicy" into "Get", "Iam", "Policy". It returns
// at least one word.
func camelWords(name string) []string {
	var words []string
	start := 0
	for i, c := range name {
		if i > start && unicode.IsUpper(c) {
			words = append(words, name[start:i])
			start = i
		}
	}
	return append(words, name[start:])
}

// httpBinding returns the verb ("get", "post", ..., or a custom kind) and the
// path of the google.api.http option in opts, read through protoreflect so
// that this module needs no import of the annotations package: the option is
// known when some linked package registered the extension.
func httpBinding(opts *descriptorpb.MethodOptions) (verb, path string, ok bool) {
	if opts == nil {
		return "", "", false
	}
	xt, err := protoregistry.GlobalTypes.FindExtensionByName("google.api.http")
	if err != nil || !proto.HasExtension(opts, xt) {
		return "", "", false
	}
	rule := opts.ProtoReflect().Get(xt.TypeDescriptor()).Message()
	fields := rule.Descriptor().Fields()
	for _, v := range []protoreflect.Name{"get", "put", "post", "delete", "patch"} {
		if f := fields.ByName(v); f != nil && rule.Has(f) {
			return string(v), rule.Get(f).String(), true
		}
	}
	if f := fields.ByName("custom"); f != nil && rule.Has(f) {
		c := rule.Get(f).Message()
		cf := c.Descriptor().Fields()
		if k, p := cf.ByName("kind"), cf.ByName("path"); k != nil && p != nil {
			return strings.ToLower(c.Get(k).String()), c.Get(p).String(), true
		}
	}
	return "", "", false
}

// Snake turns "InstanceConfig" into "instance_config".
func Snake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}
