package settings

import (
	"strings"
	"time"
)

// Entry is what the Retrier's options say of one name: a method
// "/pkg.Service/Method", a service "/pkg.Service/", or the default (""). A
// name has a retry Policy, a Hedging, or no retry; a service config entry
// may also bound its calls with a timeout.
type Entry struct {
	Set     bool          // a retry setting was given: Policy, Hedge, or no retry
	Policy  *Policy       // with Set and Hedge nil: the Policy; nil: no retry
	Hedge   *Hedging      // with Set: hedged instead
	Timeout time.Duration // bound on each call of the name; 0: none
	Config  bool          // from WithServiceConfig: a Policy of its states the name safe to retry
}

// SetPolicy gives e the retry Policy p (nil: no retry).
func (e *Entry) SetPolicy(p *Policy) { e.Set, e.Policy, e.Hedge, e.Config = true, p, nil, false }

// SetHedge hedges e as h says.
func (e *Entry) SetHedge(h *Hedging) { e.Set, e.Policy, e.Hedge, e.Config = true, nil, h, false }

// Level is where a method's settings come from.
type Level int8

const (
	FromDefault Level = iota // the Policy given to New, or a default service config entry
	FromService              // an entry for "/pkg.Service/"
	FromMethod               // an entry for the method itself
)

// Table is the entries of a Retrier's options: Base, the default, and
// those of methods and services. It is filled in by the options, before
// the first call, and only read afterwards.
type Table struct {
	Base    Entry
	entries map[string]*Entry
}

// Entry returns the entry of name, made on first use. Only options call
// it, before the first call.
func (t *Table) Entry(name string) *Entry {
	if name == "" {
		return &t.Base
	}
	if t.entries == nil {
		t.entries = make(map[string]*Entry)
	}
	e := t.entries[name]
	if e == nil {
		e = &Entry{}
		t.entries[name] = e
	}
	return e
}

// Plain reports whether t has the default entry alone: every method gets
// Base, without a lookup.
func (t *Table) Plain() bool { return t.entries == nil }

// Named returns the entry of name, nil if no option named it.
func (t *Table) Named(name string) *Entry { return t.entries[name] }

// All calls f with the default entry and each named one.
func (t *Table) All(f func(name string, e *Entry)) {
	f("", &t.Base)
	for name, e := range t.entries {
		f(name, e)
	}
}

// Resolved is what applies to a method.
type Resolved struct {
	Policy  *Policy       // the retry Policy (for a hedged method, its failures'); nil: no retry
	Hedge   *Hedging      // non-nil: the method is hedged
	Timeout time.Duration // bound on each call; 0: none
	From    Level         // whose entry gave the Policy or the Hedging
	Config  bool          // that entry is WithServiceConfig's (Entry.Config)
}

// Resolve returns the settings of method from the entries that apply: its
// own, its service's, then the default, the first that has a setting
// deciding; a hedged method's failures answer to the Policy of the next
// entry that has one. It allocates nothing; without per-method options it
// reads no map.
func (t *Table) Resolve(method string) Resolved {
	if t.entries == nil {
		return Resolved{t.Base.Policy, t.Base.Hedge, t.Base.Timeout, FromDefault, t.Base.Config}
	}
	var r Resolved
	decided := false
	take := func(e *Entry, l Level) (done bool) {
		if e == nil || !e.Set {
			return false
		}
		if !decided {
			decided = true
			r = Resolved{e.Policy, e.Hedge, e.Timeout, l, e.Config}
			return e.Hedge == nil
		}
		if e.Hedge == nil { // the Policy a hedged method's failures answer to
			r.Policy = e.Policy
			return true
		}
		return false
	}
	if take(t.entries[method], FromMethod) {
		return r
	}
	if svc := ServiceOf(method); svc != "" && take(t.entries[svc], FromService) {
		return r
	}
	take(&t.Base, FromDefault)
	return r
}

// RetryFrom returns the name whose entry gives a hedged method the Policy
// its failures answer to: the method's, its service's, or "" for the
// default.
func (t *Table) RetryFrom(method string) string {
	for _, name := range [...]string{method, ServiceOf(method)} {
		if e := t.entries[name]; name != "" && e != nil && e.Set && e.Hedge == nil {
			return name
		}
	}
	return ""
}

// ServiceOf returns the service name "/pkg.Service/" of a method
// "/pkg.Service/Method", or "" if method has no service part.
func ServiceOf(method string) string {
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		return method[:i+1]
	}
	return ""
}
