package sim

import (
	"testing"
	"time"
)

func TestRecovery(t *testing.T) {
	mk := func(ok, conc []int) []Sample {
		s := make([]Sample, len(ok))
		for i := range s {
			s[i] = Sample{Second: i, OK: ok[i], Concurrency: conc[i]}
		}
		return s
	}
	// offered 100/s, limit 30; recovery from second 2 (the run 2–6).
	s := mk([]int{0, 0, 95, 90, 88, 92, 95, 99}, []int{90, 40, 20, 20, 20, 20, 20, 20})
	if ok, d := Recovery(s, 0, 30, 100); !ok || d != 2*time.Second {
		t.Errorf("Recovery = %v, %v; want true, 2s", ok, d)
	}
	// Concurrency over the limit in one second breaks the run.
	s = mk([]int{95, 95, 95, 95, 95, 95}, []int{20, 20, 20, 31, 20, 20})
	if ok, _ := Recovery(s, 0, 30, 100); ok {
		t.Error("recovered although no 5 s run stayed under the limit")
	}
	// Goodput under 90% on average.
	s = mk([]int{89, 89, 89, 89, 89, 89}, []int{20, 20, 20, 20, 20, 20})
	if ok, _ := Recovery(s, 0, 30, 100); ok {
		t.Error("recovered with 89% goodput")
	}
}
