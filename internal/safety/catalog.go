// Package safety is what is known of whether a method may be sent again
// after a failure the server may have applied (interceptor.Safety): from
// the Retrier's options (Catalog: WithSafety, a service config's retryPolicy)
// and from the method's descriptor (Describe: idempotency_level,
// google.api.http and the words of a POST's name). In the engine's layers
// it sits above the settings it reads (internal/settings) and below the
// plan and the decision of a call (internal/loop), which add what a call's
// own options state.
package safety

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff/internal/settings"
)

// Catalog is what one Retrier knows of its methods' safety, first to last as
// interceptor.Safety says: what its options state of a method (Stated,
// then a service config's retryPolicy naming it in Settings), of its
// service (Stated), then what the method's descriptor says (Describe),
// learnt once per method. Its fields are set before the first call; it is
// then safe for concurrent use.
type Catalog struct {
	Stated   map[string]Level // WithSafety, by method or service name
	Settings *settings.Table  // the Retrier's entries: a service config's retryPolicy states its methods Idempotent

	known sync.Map // method -> Knowledge, learnt on its first need
}

// State records what WithSafety states of name, a method or a service.
func (b *Catalog) State(name string, l Level) {
	if b.Stated == nil {
		b.Stated = make(map[string]Level)
	}
	b.Stated[name] = l
}

// Of returns what is known of method, learnt once.
func (b *Catalog) Of(method string) Knowledge {
	if k, ok := b.known.Load(method); ok {
		return k.(Knowledge)
	}
	k := b.learn(method)
	b.known.Store(method, k)
	return k
}

// learn finds what the Retrier's options and the method's descriptor say of
// method.
func (b *Catalog) learn(method string) Knowledge {
	if s, ok := b.Stated[method]; ok {
		return Knowledge{s, "WithSafety(" + method + ")"}
	}
	if b.Settings != nil {
		if e := b.Settings.Named(method); e != nil && e.Config && e.Policy != nil {
			return Knowledge{Idempotent, "a service config's retryPolicy for it (WithServiceConfig)"}
		}
	}
	if svc := settings.ServiceOf(method); svc != "" {
		if s, ok := b.Stated[svc]; ok {
			return Knowledge{s, "WithSafety(" + svc + ")"}
		}
	}
	return Describe(method)
}

// NotIdempotent reports whether name, a method "/pkg.Service/Method" or a
// service "/pkg.Service/", is known not to be idempotent: a service is
// when one of its methods is.
func (b *Catalog) NotIdempotent(name string) bool {
	if !strings.HasSuffix(name, "/") {
		return b.Of(name).Level == NotIdempotent
	}
	if s, ok := b.Stated[name]; ok {
		return s == NotIdempotent
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(strings.Trim(name, "/")))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		return false
	}
	for i := range sd.Methods().Len() {
		if b.NotIdempotent(name + string(sd.Methods().Get(i).Name())) {
			return true
		}
	}
	return false
}
