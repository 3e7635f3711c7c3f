package resume

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Table is a Retrier's resume rules: by the name each was given for (a
// method "/pkg.Service/Method" or a service "/pkg.Service/"), and, once
// Check has run, by method. Its Set and Check run before the first call; it
// is then only read, and safe for concurrent use.
type Table struct {
	given   map[string]given
	methods map[string]Rule // Check's: the rule of each method a rule covers
}

// given is a rule as given, and the methods it covers.
type given struct {
	r       Rule
	methods []string
}

// Set adds r, given for name, covering methods (see Methods); a later rule
// for the same name replaces it.
func (t *Table) Set(name string, r Rule, methods []string) {
	if t.given == nil {
		t.given = make(map[string]given)
	}
	t.given[name] = given{r, methods}
}

// Covers reports whether a rule given for a method, or for its service,
// covers method: the Retrier's safety catalog takes such a method as
// safe to open again where nothing else knows it (a rule opens it again by
// design). It reads the rules as given, before Check.
func (t *Table) Covers(method string) bool {
	for _, g := range t.given {
		if slices.Contains(g.methods, method) {
			return true
		}
	}
	return false
}

// Methods returns the methods a rule r given for name covers, from their
// descriptors in files: the method itself, which must be a server stream
// (not a client stream, nor bidi, nor unary) of r's request and response
// types; or, for a service, each of its server streams of those types, of
// which there must be one. Its error names the rule and says why not.
func Methods(files *protoregistry.Files, name string, r Rule) ([]string, error) {
	req, resp, err := r.Types()
	if err != nil {
		return nil, fmt.Errorf("interceptor: WithResume(%q): %w", name, err)
	}
	service, method, _ := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	d, err := files.FindDescriptorByName(protoreflect.FullName(service))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		return nil, fmt.Errorf("interceptor: WithResume(%q): no descriptor of the service %s is registered, so New cannot tell the kind of its methods: "+
			"link its generated package in, or register its file in protoregistry.GlobalFiles", name, service)
	}
	if method != "" {
		md := sd.Methods().ByName(protoreflect.Name(method))
		if md == nil {
			return nil, fmt.Errorf("interceptor: WithResume(%q): the service %s has no method %s", name, service, method)
		}
		if !md.IsStreamingServer() || md.IsStreamingClient() {
			return nil, fmt.Errorf("interceptor: WithResume(%q): the method is %s: only a server stream (one request, a stream of responses) is resumed", name, kind(md))
		}
		if md.Input().FullName() != req.FullName() || md.Output().FullName() != resp.FullName() {
			return nil, fmt.Errorf("interceptor: WithResume(%q): the method takes %s and returns a stream of %s; the rule's types are %s and %s",
				name, md.Input().FullName(), md.Output().FullName(), req.FullName(), resp.FullName())
		}
		return []string{name}, nil
	}
	var out []string
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		if md.IsStreamingServer() && !md.IsStreamingClient() && md.Input().FullName() == req.FullName() && md.Output().FullName() == resp.FullName() {
			out = append(out, name+string(md.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("interceptor: WithResume(%q): no method of %s is a server stream that takes %s and returns a stream of %s",
			name, service, req.FullName(), resp.FullName())
	}
	return out, nil
}

// kind names the kind of method md is.
func kind(md protoreflect.MethodDescriptor) string {
	switch {
	case md.IsStreamingClient() && md.IsStreamingServer():
		return "a bidi stream"
	case md.IsStreamingClient():
		return "a client stream"
	}
	return "unary"
}

// Check resolves the rules by method, a method's own rule winning over its
// service's, and returns an error naming each rule that covers a method
// not safe to send again, as unsafe reports it: a resume sends it again
// (see interceptor.Safety). unsafe says whether the method is treated as a
// write, and whether that is known (not merely assumed, nothing marking
// it). New calls it once every option has been applied.
func (t *Table) Check(unsafe func(method string) (unsafe, known bool)) error {
	if len(t.given) == 0 {
		return nil
	}
	t.methods = make(map[string]Rule)
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(t.given)) {
		g := t.given[name]
		for _, m := range g.methods {
			if _, own := t.given[m]; own && m != name {
				continue // the method's own rule wins over its service's
			}
			switch bad, known := unsafe(m); {
			case bad && known:
				errs = append(errs, fmt.Errorf("interceptor: WithResume(%q): %s is known not to be idempotent, and a resume sends it again: "+
					"if resuming it is safe, say so with WithSafety(%q, Idempotent)", name, m, m))
			case bad:
				errs = append(errs, fmt.Errorf("interceptor: WithResume(%q): %s is treated as a write, nothing marking it safe to send again, and a resume sends it again: "+
					"if resuming it is safe, mark it in its .proto (option idempotency_level = NO_SIDE_EFFECTS, or IDEMPOTENT), or say so with WithSafety(%q, Idempotent)", name, m, m))
			default:
				t.methods[m] = g.r
			}
		}
	}
	return errors.Join(errs...)
}

// Of returns the rule of method, nil if none covers it. It allocates
// nothing; without rules it reads no map.
func (t *Table) Of(method string) Rule {
	if t.methods == nil {
		return nil
	}
	return t.methods[method]
}
