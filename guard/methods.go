package guard

import (
	"crypto/sha256"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/platformkit/grpcbackoff/internal/guardcore"
)

// maxMethods is the number of method names counted apart, and samples the
// names drawn when one must give its place up. maxName is the longest name
// kept whole: a longer one (only a client's can be, behind an
// unknown-service handler: grpc-go takes a :path up to its 16 MiB header
// list) is keyed by its SHA-256 digest, and keeps its first maxName bytes
// for the logs and marks. The longest of the 7 893 methods Google's 467
// service configs name is 117 bytes.
const (
	maxMethods = 1000
	samples    = 8
	maxName    = 1024
)

// method is the state of one method.
type method struct {
	name       string // its full name, or the first maxName bytes of a longer one
	key        any    // its key in the table: the name, or the longer one's digest
	registered bool
	id         uint64      // mixed into its clients' keys
	ranked     atomic.Bool // a request of it said its criticality
	counts     guardcore.Method
}

// digest is the key of a name longer than maxName: a type of its own, so
// that no name kept whole is ever equal to it.
type digest [sha256.Size]byte

// keyOf returns the table's key of fullMethod: fullMethod itself up to
// maxName bytes, its digest beyond (digestOf). Two methods share a place
// only if their names are equal, or if both are longer than maxName and
// their SHA-256 digests collide.
func keyOf(fullMethod string) any {
	if len(fullMethod) <= maxName {
		return fullMethod
	}
	return digestOf(fullMethod)
}

// digestOf returns the SHA-256 digest of name, hashed through a buffer,
// not a copy of the name.
func digestOf(name string) digest {
	h := sha256.New()
	var buf [4096]byte
	for len(name) > 0 {
		n := copy(buf[:], name)
		h.Write(buf[:n])
		name = name[n:]
	}
	var d digest
	h.Sum(d[:0])
	return d
}

// methods is the table of the methods a Guard counts: at most maxMethods,
// the least busy of samples drawn at random giving its place up to a new
// name; each holds at most maxName bytes of its name. A name that lost its
// place starts from nothing when it comes back. Looking a method up is a
// lock-free read; only a new name takes the lock.
type methods struct {
	core   *guardcore.Core
	byName sync.Map // keyOf(full method name) -> *method

	mu   sync.Mutex
	list []*method // every method of byName
}

// get returns the state of fullMethod at time now, made on its first
// attempt, in place of the least busy of samples others if the table is
// full.
func (t *methods) get(fullMethod string, registered bool, now time.Duration) *method {
	if m := t.find(fullMethod); m != nil {
		return m
	}
	key := keyOf(fullMethod)
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.byName.Load(key); ok {
		return v.(*method)
	}
	name := fullMethod
	if len(name) > maxName {
		name = strings.Clone(name[:maxName]) // not the whole name's bytes
	}
	m := &method{name: name, key: key, registered: registered, id: rand.Uint64()}
	if len(t.list) < maxMethods {
		t.list = append(t.list, m)
	} else {
		idlest, least := 0, int64(-1)
		for range samples {
			i := rand.IntN(len(t.list))
			if a := t.core.Activity(&t.list[i].counts, now); least < 0 || a < least {
				idlest, least = i, a
			}
		}
		t.byName.Delete(t.list[idlest].key)
		t.list[idlest] = m
	}
	t.byName.Store(key, m)
	return m
}

// find returns the state of fullMethod, or nil if it has no place. A name
// kept whole is looked up as it is (keyOf would make it escape: an
// allocation on every call).
func (t *methods) find(fullMethod string) *method {
	var v any
	var ok bool
	if len(fullMethod) <= maxName {
		v, ok = t.byName.Load(fullMethod)
	} else {
		v, ok = t.byName.Load(digestOf(fullMethod))
	}
	if !ok {
		return nil
	}
	return v.(*method)
}
