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
	Unknown       Level = iota // nothing is known; the Policy's codes apply
	Idempotent                 // the method may be sent again after any failure
	NotIdempotent              // not sent again after a failure that may have been applied
)

// Knowledge is what is known of a method's safety, and from where.
type Knowledge struct {
	Level  Level
	Source string
}

// Describe returns what method's descriptor says of its safety; for a
// method of a pinned Google Cloud client whose generated package the binary
// does not link, what the data says its descriptor tells.
func Describe(method string) Knowledge {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		if m, ok := googledata.Pinned(method); ok {
			return Knowledge{Level(m.Safety), m.Why + " (the descriptor of the pinned client's, not linked in)"}
		}
		return Knowledge{Unknown, "no descriptor registered for " + service}
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return Knowledge{Unknown, service + " is not a service"}
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return Knowledge{Unknown, "no method " + name + " in service " + service}
	}
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	switch lvl := opts.GetIdempotencyLevel(); lvl {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return Knowledge{Idempotent, "idempotency_level " + lvl.String()}
	}
	verb, path, ok := httpBinding(opts)
	if !ok {
		return Knowledge{Unknown, "neither idempotency_level nor google.api.http"}
	}
	binding := "google.api.http " + strings.ToUpper(verb) + " " + path
	switch verb {
	case "get", "put", "patch", "delete":
		return Knowledge{Idempotent, binding}
	case "post":
	default:
		return Knowledge{Unknown, binding}
	}
	in := md.Input().Fields()
	if f := in.ByName("request_id"); f != nil && f.Kind() == protoreflect.StringKind {
		return Knowledge{Idempotent, binding + " with a request_id (AIP-155)"}
	}
	if resource, ok := strings.CutPrefix(name, "Create"); ok && resource != "" {
		id := Snake(resource) + "_id"
		if f := in.ByName(protoreflect.Name(id)); f != nil && f.Kind() == protoreflect.StringKind {
			return Knowledge{Idempotent, binding + ": Create with a user-specified " + id + " (AIP-133)"}
		}
	}
	words := camelWords(name)
	if setsState[words[0]] {
		return Knowledge{Idempotent, binding + ": " + name + " sets a state (" + words[0] + ")"}
	}
	if read, change := wordOf(words, reads), wordOf(words, changes); read != "" && change == "" {
		return Knowledge{Idempotent, binding + ": " + name + " reads (" + read + ")"}
	}
	return Knowledge{NotIdempotent, binding + ": " + name + " neither reads nor sets a state"}
}

// The words of a POST method's name (AIP-136 names custom methods verb
// first: ReadRows, GetIamPolicy, CheckAndMutateRow) that make it safe to
// send again. A method reads when its name has a word of reading (or of
// watching, or of computing without a change, as KMS's Encrypt does) and no
// word of change: ReadRows and ExecuteQuery read, ReadModifyWriteRow does
// not. A method sets a state when its name starts with a verb whose second
// application leaves what the first left: SetIamPolicy, Acknowledge,
// ModifyAckDeadline, CancelOperation. Every other POST, Publish, Commit,
// MutateRow or FailoverInstance, may apply twice.
var (
	reads = map[string]bool{
		"Get": true, "List": true, "Read": true, "Search": true, "Lookup": true,
		"Find": true, "Describe": true, "Check": true, "Test": true, "Validate": true,
		"Sample": true, "Query": true, "Fetch": true, "Watch": true, "Ping": true,
		"Generate": true,
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
