// Package safety is what is known of whether a method may be sent again
// after a failure the server may have applied (interceptor.Safety): from
// the Retrier's options (Catalog: WithSafety, a service config's retryPolicy),
// from the method's descriptor (Descriptor: idempotency_level,
// google.api.http and the words of a POST's name), from the name of a
// standard method that reads (Named: Get, List), and, for a write, from
// its call's request (Resendable: a request_id). What none establishes is
// treated as a write. In the engine's layers
// it sits above the settings it reads (internal/settings) and below the
// plan and the decision of a call (internal/loop), which add what a call's
// own options state.
package safety

import (
	"strings"
	"sync"
	"sync/atomic"

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
//
// What it learns of the methods the program knows (see lasting) is kept;
// of any other method, whose name is the caller's (a gateway forwards the
// names its own callers send), at most recentMax are kept, and learnt
// again once forgotten: its memory is bounded whatever names calls carry.
type Catalog struct {
	Stated   map[string]Level // WithSafety, by method or service name
	Settings *settings.Table  // the Retrier's entries: a service config's retryPolicy states its methods Idempotent
	// Resumed reports whether a resume rule (WithResume) covers a method,
	// its own or its service's: nil for none.
	Resumed func(method string) bool

	known   sync.Map     // method -> Knowledge, of a method the program knows, learnt on its first need
	recent  sync.Map     // method -> Knowledge, of other methods: recentMax at most
	recents atomic.Int64 // stores into recent since it was last emptied
}

// recentMax bounds the methods a Catalog keeps that the program does not
// know, and recentName the length of a name it keeps: with their
// Knowledge, a few hundred KiB at most.
const (
	recentMax  = 512
	recentName = 256
)

// State records what WithSafety states of name, a method or a service.
func (b *Catalog) State(name string, l Level) {
	if b.Stated == nil {
		b.Stated = make(map[string]Level)
	}
	b.Stated[name] = l
}

// Of returns what is known of method, learnt once for a method the
// program knows, and allocating nothing then.
func (b *Catalog) Of(method string) Knowledge {
	if k, ok := b.known.Load(method); ok {
		return k.(Knowledge)
	}
	if k, ok := b.recent.Load(method); ok {
		return k.(Knowledge)
	}
	k := b.learn(method)
	switch {
	case b.lasting(method):
		b.known.Store(method, k)
	case len(method) <= recentName:
		if b.recents.Add(1) > recentMax { // forget them all: the names are the callers'
			b.recent.Clear()
			b.recents.Store(1)
		}
		b.recent.Store(method, k)
	}
	return k
}

// lasting reports whether the program knows method: the Retrier's options
// name it (WithSafety, an entry of its own), or a descriptor the binary
// registers or the pinned clients' data holds it. Their number is the
// program's; a name a service's entry matches is not enough, any method
// name being the caller's choice.
func (b *Catalog) lasting(method string) bool {
	if _, ok := b.Stated[method]; ok {
		return true
	}
	if b.Settings != nil && b.Settings.Named(method) != nil {
		return true
	}
	return Known(method)
}

// learn finds what the Retrier's options and the method's descriptor say of
// method: the first that knows, as interceptor.Safety lists them. Where
// nothing does, a method's own hedging entry (WithHedging, or a service
// config's hedgingPolicy, naming it) says it may be sent twice, and a
// service config's retryPolicy for its service that it may be resent (as
// grpc-go would resend it); a service's hedging and the default entry say
// nothing of its methods.
func (b *Catalog) learn(method string) Knowledge {
	if s, ok := b.Stated[method]; ok {
		return stated(s, "WithSafety("+method+")")
	}
	if b.Settings != nil {
		if e := b.Settings.Named(method); e != nil && e.Config && e.Policy != nil {
			return Knowledge{Level: Idempotent, Source: "a service config's retryPolicy for it (WithServiceConfig)"}
		}
	}
	if svc := settings.ServiceOf(method); svc != "" {
		if s, ok := b.Stated[svc]; ok {
			return stated(s, "WithSafety("+svc+")")
		}
	}
	k := Describe(method)
	if !k.Assumed {
		return k
	}
	if b.Resumed != nil && b.Resumed(method) {
		return Knowledge{Level: Idempotent, Source: "resumed by a rule (WithResume), which opens it again by design; nothing else knows it: " + k.Source}
	}
	if b.Settings == nil {
		return k
	}
	if e := b.Settings.Named(method); e != nil && e.Hedge != nil {
		return Knowledge{Level: Idempotent, Source: "hedged by an entry of its own (WithHedging or a service config's hedgingPolicy for it), which sends it twice by design; nothing else knows it: " + k.Source}
	}
	if svc := settings.ServiceOf(method); svc != "" {
		if e := b.Settings.Named(svc); e != nil && e.Config && e.Policy != nil {
			return Knowledge{Level: Idempotent, Source: "a service config's retryPolicy for its service (WithServiceConfig); nothing else knows it: " + k.Source}
		}
	}
	return k
}

// OfConn returns what is known of method when a call of it follows the
// retryPolicy that its connection's service config (its resolver's) gives
// it by an entry of level from: as a service config given to
// WithServiceConfig states it (learn), the connection's entry for the
// method states it Idempotent unless WithSafety states the method itself,
// and its service's entry only where nothing else knows; the default entry
// states nothing.
func (b *Catalog) OfConn(method string, from settings.Level) Knowledge {
	k := b.Of(method)
	if _, ok := b.Stated[method]; ok {
		return k
	}
	switch {
	case from == settings.FromMethod:
		return Knowledge{Level: Idempotent, Source: "a retryPolicy for it in the connection's service config (its resolver's)"}
	case from == settings.FromService && k.Assumed:
		if _, ok := b.Stated[settings.ServiceOf(method)]; !ok {
			return Knowledge{Level: Idempotent, Source: "a retryPolicy for its service in the connection's service config (its resolver's); nothing else knows it: " + k.Source}
		}
	}
	return k
}

// stated is what WithSafety's Level s states, from source. SafetyUnknown
// states that nothing is known: the method's descriptor and name are not
// read, and it is treated as a write.
func stated(s Level, source string) Knowledge {
	if s == Unknown {
		return Knowledge{Level: NotIdempotent, Assumed: true, ByRequest: true,
			Source: "treated as a write, resent only when its request carries a request_id (AIP-155): " + source + " states SafetyUnknown"}
	}
	return Knowledge{Level: s, Source: source}
}

// NotIdempotent reports whether name, a method "/pkg.Service/Method" or a
// service "/pkg.Service/", is not to be sent twice: a method when it is
// treated as a write (known as one, or not known), a service when
// WithSafety states it NotIdempotent or one of its methods is known not to
// be idempotent (by more than an assumption: a service-wide hedging entry
// does not hedge its methods that are merely not known).
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
		if k := b.Of(name + string(sd.Methods().Get(i).Name())); k.Level == NotIdempotent && !k.Assumed {
			return true
		}
	}
	return false
}
