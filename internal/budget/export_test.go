package budget

import "time"

// SetClock makes b read the time from clock, where Succeeded dates the
// successes (time.Now by default).
func SetClock(b *Budget, clock func() time.Time) { b.clock = clock }
