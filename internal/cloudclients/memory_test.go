package cloudclients

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestMemoryDecline: an adopted call's entry is forgotten when its client's
// Retryer declines the error it ended with, wrapped or not; an entry with
// no error to decline, or another error, is kept; a dropped entry leaves
// nothing to decline.
func TestMemoryDecline(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	now := time.Now()
	var m Memory
	req, other := new(int), new(int)
	k, _ := KeyOf(ctx, "t", "/s/M", req)
	k2, _ := KeyOf(ctx, "t", "/s/M", other)
	errA, errB := fmt.Errorf("a"), fmt.Errorf("b")
	m.End(ctx, k, false, true, 3, now, time.Minute, errA)
	m.End(ctx, k2, false, true, 2, now, time.Minute, nil)

	Decline(errB)
	if m.Len() != 2 {
		t.Fatalf("after declining another error: %d calls remembered, want 2", m.Len())
	}
	Decline(fmt.Errorf("wrapped: %w", errA))
	if _, ok := m.Take(k, now); ok {
		t.Errorf("the declined call is still remembered")
	}
	if n, ok := m.Take(k2, now); !ok || n != 2 {
		t.Errorf("the other call: %d, %v; want 2 retries remembered", n, ok)
	}
	if _, ok := declinable.Load(errA); ok {
		t.Errorf("a declined error is still held")
	}

	m.End(ctx, k, false, true, 1, now, time.Minute, errB)
	m.End(ctx, k, true, false, 1, now, time.Minute, nil) // the call succeeded, say: dropped
	if _, ok := declinable.Load(errB); ok {
		t.Errorf("a dropped entry's error is still held")
	}
}
