package guardcore

import (
	"sync"
	"testing"
)

// adds is a sequence of attempts for a window: n attempts, retries or first
// tries, in epoch e.
type adds []struct {
	e     int64
	retry bool
	n     int
}

func TestWindowSum(t *testing.T) {
	tests := []struct {
		name               string
		adds               adds
		at                 int64
		wantFirst, wantRet int64
	}{
		{"empty", nil, 100, 0, 0},
		{"one bucket", adds{{100, false, 3}, {100, true, 2}}, 100, 3, 2},
		{"every bucket of the window", adds{{91, false, 1}, {95, true, 4}, {100, false, 5}}, 100, 6, 4},
		{"a bucket one past the window", adds{{90, false, 7}, {91, true, 1}}, 100, 0, 1},
		{"all gone after a window", adds{{100, false, 3}, {100, true, 3}}, 110, 0, 0},
		{"a slot reused starts from zero", adds{{90, true, 50}, {100, false, 1}}, 100, 1, 0},
		{"a slot reused after many windows", adds{{5, true, 50}, {1005, true, 2}}, 1005, 0, 2},
		{"a future epoch is not read", adds{{101, true, 9}}, 100, 0, 0},
		{"early epochs", adds{{0, false, 1}, {3, true, 1}}, 3, 1, 1},
		{"the epoch tag wraps", adds{{epochMask - 1, false, 2}, {epochMask, true, 1}, {epochMask + 1, true, 1}}, epochMask + 1, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w Window
			for _, a := range tt.adds {
				for range a.n {
					w.add(a.e, a.retry)
				}
			}
			if f, r := w.sum(tt.at); f != tt.wantFirst || r != tt.wantRet {
				t.Errorf("sum(%d) = %d first tries, %d retries; want %d, %d", tt.at, f, r, tt.wantFirst, tt.wantRet)
			}
		})
	}
}

func TestWindowSaturates(t *testing.T) {
	var w Window
	w.b[7].Store(7<<(2*countBits) | countMax<<countBits | countMax)
	w.add(7, true)
	w.add(7, false)
	if f, r := w.sum(7); f != countMax || r != countMax {
		t.Errorf("sum = %d, %d after adding to full counts; want %d, %d", f, r, countMax, countMax)
	}
	w.add(8, true) // the next bucket is not touched by the full one
	if f, r := w.sum(8); f != countMax || r != countMax+1 {
		t.Errorf("sum = %d, %d; want %d, %d", f, r, countMax, countMax+1)
	}
}

// TestWindowConcurrentAdds checks that adds racing each other and the
// reuse of a slot for a new epoch lose no count.
func TestWindowConcurrentAdds(t *testing.T) {
	var w Window
	w.add(3, true) // epoch 3's slot is reused by epoch 13, below
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				w.add(13, (g+i)%3 == 0)
			}
		})
	}
	wg.Wait()
	f, r := w.sum(13)
	var wantR int64
	for g := range 8 {
		for i := range 1000 {
			if (g+i)%3 == 0 {
				wantR++
			}
		}
	}
	if f+r != 8000 || r != wantR {
		t.Errorf("sum = %d first tries, %d retries; want %d, %d", f, r, 8000-wantR, wantR)
	}
}
