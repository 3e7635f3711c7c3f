package guardcore

// A tally is what Counts hold over a window: first tries, retries arrived,
// retries refunded (served, see Core.Served), retries expected (failures let
// through whose retries have not come) and answers shed (RESOURCE_EXHAUSTED
// from the handler).
type tally struct {
	first, retries, refunds, pending, shed int64
	expired, saved, unrefunded             int64 // calls that ended failed, served by a retry refunded, and not (Core.spacing)
	failures                               int64 // retriable failures, let through or refused
	since                                  int64 // the epoch of the oldest bucket with an attempt
}

func (t *tally) add(o tally) {
	if t.first+t.retries == 0 || o.first+o.retries > 0 && o.since < t.since {
		t.since = o.since
	}
	t.first += o.first
	t.retries += o.retries
	t.refunds += o.refunds
	t.pending += o.pending
	t.shed += o.shed
	t.expired += o.expired
	t.saved += o.saved
	t.unrefunded += o.unrefunded
	t.failures += o.failures
}

// unserved returns the retries that arrived and were not refunded: failed,
// in flight, or served while they counted (see Core.Served).
func (t tally) unserved() int64 { return max(t.retries-t.refunds, 0) }

// doing returns the share of the arrived retries that were not refunded, 1
// when none arrived: the weight of a retry still expected.
func (t tally) doing() float64 {
	if t.retries == 0 {
		return 1
	}
	return float64(t.unserved()) / float64(t.retries)
}

// failing returns the share of the calls that retried and ended that did
// harm: those that ended failed (their failure let through in the window but
// before the horizon, and no retry since), and those served by a retry that
// counted (the server past what it serves); of those and the calls a
// refunded retry served in the horizon. It is 1 when none ended. Unlike
// doing, it leaves out the calls still under way, but learns of a call
// that ended failed only a horizon later.
func (t tally) failing() float64 {
	bad := t.expired + t.unrefunded
	if bad+t.saved == 0 {
		return 1
	}
	return float64(bad) / float64(bad+t.saved)
}

// harm returns the retries that do harm: those arrived and not refunded,
// and those expected, each weighted by the share of the arrived ones that
// were not refunded (in an outage, all of them; at a server that serves its
// retries, few).
func (t tally) harm() float64 { return float64(t.unserved()) + t.doing()*float64(t.pending) }

// attempts returns the attempts the harm is a share of: the first tries,
// the retries arrived, and the expected ones as harm weighs them.
func (t tally) attempts() float64 {
	return float64(t.first+t.retries) + t.doing()*float64(t.pending)
}

// over reports whether t's failures, each weighted by the share of the
// calls that ended that did harm (failing), are at least floor and more than
// share of its attempts: the retries they ask for do more harm than the
// share allows, and the guard holds them back.
func (t tally) over(share float64, floor int64) bool {
	d := float64(t.failures) * t.failing()
	return d >= float64(floor) && d > share*t.attempts()
}

// overloaded reports whether the answers t shed are at least floor and more
// than share of its attempts: the server is past what it serves, by its
// own measure.
func (t tally) overloaded(share float64, floor int64) bool {
	return t.shed >= floor && float64(t.shed) > share*float64(t.first+t.retries)
}
