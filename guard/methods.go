package guard

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/platformkit/grpcbackoff/internal/guardcore"
)

// maxMethods is the number of method names counted apart, and samples the
// names drawn when one must give its place up.
const (
	maxMethods = 1000
	samples    = 8
)

// method is the state of one method.
type method struct {
	name       string
	registered bool
	id         uint64      // mixed into its clients' keys
	ranked     atomic.Bool // a request of it said its criticality
	counts     guardcore.Method
}

// methods is the table of the methods a Guard counts: at most maxMethods,
// the least busy of samples drawn at random giving its place up to a new
// name. A name that lost its place starts from nothing when it comes back.
// Looking a method up is a lock-free read; only a new name takes the lock.
type methods struct {
	core   *guardcore.Core
	byName sync.Map // full method name -> *method

	mu   sync.Mutex
	list []*method // every method of byName
}

// get returns the state of fullMethod at time now, made on its first
// attempt, in place of the least busy of samples others if the table is
// full.
func (t *methods) get(fullMethod string, registered bool, now time.Duration) *method {
	if v, ok := t.byName.Load(fullMethod); ok {
		return v.(*method)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.byName.Load(fullMethod); ok {
		return v.(*method)
	}
	m := &method{name: fullMethod, registered: registered, id: rand.Uint64()}
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
		t.byName.Delete(t.list[idlest].name)
		t.list[idlest] = m
	}
	t.byName.Store(fullMethod, m)
	return m
}

// find returns the state of fullMethod, or nil if it has no place.
func (t *methods) find(fullMethod string) *method {
	if v, ok := t.byName.Load(fullMethod); ok {
		return v.(*method)
	}
	return nil
}
