package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Grid is a sweep of offered load × outage length for some strategies.
type Grid struct {
	// Base is the scenario every cell starts from; each cell sets the
	// server's Limit for its load (Fleet.WithLoad), the pause, and a
	// Duration of PauseAt + pause + After.
	Base Fleet
	// Loads are offered loads as shares of the server's capacity, in (0, 1].
	Loads []float64
	// Outages are pause lengths.
	Outages []time.Duration
	// After is how long each run goes on after the resume. Default 60 s.
	After      time.Duration
	Strategies []Strategy
	// Parallel is the number of runs at once (each is single-threaded).
	Parallel int
}

// DefaultGrid returns the grid of the comparison: loads 50–90% of
// capacity, outages of 1 to 60 s, the six strategies.
func DefaultGrid() Grid {
	return Grid{
		Base:       DefaultFleet(),
		Loads:      []float64{0.5, 0.6, 0.7, 0.8, 0.9},
		Outages:    []time.Duration{1 * time.Second, 2 * time.Second, 10 * time.Second, 30 * time.Second, 60 * time.Second},
		After:      60 * time.Second,
		Strategies: Strategies(),
		Parallel:   2,
	}
}

// Validate reports what makes g unusable.
func (g Grid) Validate() error {
	var errs []error
	if len(g.Loads) == 0 || len(g.Outages) == 0 || len(g.Strategies) == 0 {
		errs = append(errs, errors.New("sim: the grid needs loads, outages and strategies"))
	}
	for _, l := range g.Loads {
		if !(l > 0 && l <= 1) {
			errs = append(errs, fmt.Errorf("sim: load %v must be in (0, 1]", l))
		}
	}
	for _, o := range g.Outages {
		if o < 0 {
			errs = append(errs, fmt.Errorf("sim: outage %v must not be negative", o))
		}
	}
	if g.After < 5*time.Second {
		errs = append(errs, fmt.Errorf("sim: after (%v) must be at least 5s, the length of a recovery", g.After))
	}
	if g.Parallel < 1 {
		errs = append(errs, fmt.Errorf("sim: parallel (%d) must be at least 1", g.Parallel))
	}
	for _, l := range g.Loads {
		for _, o := range g.Outages {
			if err := g.cell(l, o).Validate(); err != nil {
				errs = append(errs, fmt.Errorf("sim: cell load %v, outage %v: %w", l, o, err))
				return errors.Join(errs...)
			}
		}
	}
	return errors.Join(errs...)
}

func (g Grid) cell(load float64, outage time.Duration) Fleet {
	sc := g.Base.WithLoad(load)
	sc.Pause = outage
	sc.Duration = sc.PauseAt + outage + g.After
	return sc
}

// Cell is the result of one strategy in one cell.
type Cell struct {
	Load     float64
	Outage   time.Duration
	Strategy string
	Result   Result
}

// GridResult holds every cell: Cells[s][l][o] for strategy s, load l,
// outage o.
type GridResult struct {
	Grid  Grid
	Cells [][][]Cell
	// Events and Wall total the runs.
	Events int64
	Wall   time.Duration
}

// RunGrid runs every cell of g, Parallel at a time; progress, if not nil, is
// called (from one goroutine at a time) after each run with the number of
// runs done and the cell.
func RunGrid(ctx context.Context, g Grid, progress func(done, total int, c Cell)) (GridResult, error) {
	if err := g.Validate(); err != nil {
		return GridResult{}, err
	}
	start := time.Now()
	res := GridResult{Grid: g, Cells: make([][][]Cell, len(g.Strategies))}
	type job struct{ s, l, o int }
	var jobs []job
	for s := range g.Strategies {
		res.Cells[s] = make([][]Cell, len(g.Loads))
		for l := range g.Loads {
			res.Cells[s][l] = make([]Cell, len(g.Outages))
			for o := range g.Outages {
				jobs = append(jobs, job{s, l, o})
			}
		}
	}
	ch := make(chan job)
	var mu sync.Mutex
	var firstErr error
	done := 0
	var wg sync.WaitGroup
	for range g.Parallel {
		wg.Go(func() {
			for j := range ch {
				st, load, outage := g.Strategies[j.s], g.Loads[j.l], g.Outages[j.o]
				r, err := RunFleet(ctx, g.cell(load, outage), st, nil)
				r.Samples = nil // the grid keeps the summary only
				c := Cell{Load: load, Outage: outage, Strategy: st.Name, Result: r}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				res.Cells[j.s][j.l][j.o] = c
				res.Events += r.Events
				done++
				if progress != nil && err == nil {
					progress(done, len(jobs), c)
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
	if firstErr != nil {
		return GridResult{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return GridResult{}, err
	}
	res.Wall = time.Since(start)
	return res, nil
}

// Best returns, for load l and outage o, the shortest recovery of any
// strategy, and false if none recovered.
func (r GridResult) Best(l, o int) (time.Duration, bool) {
	var best time.Duration
	found := false
	for s := range r.Cells {
		c := r.Cells[s][l][o].Result
		if c.Recovered && (!found || c.RecoveredAfter < best) {
			best, found = c.RecoveredAfter, true
		}
	}
	return best, found
}

// Check compares strategy name with the best in every cell: it returns the
// cells where it did not recover within slack of the best, as text.
func (r GridResult) Check(name string, slack time.Duration) []string {
	s := -1
	for i, st := range r.Grid.Strategies {
		if st.Name == name {
			s = i
		}
	}
	if s < 0 {
		return []string{fmt.Sprintf("strategy %s is not in the grid", name)}
	}
	var bad []string
	for l, load := range r.Grid.Loads {
		for o, outage := range r.Grid.Outages {
			best, ok := r.Best(l, o)
			c := r.Cells[s][l][o].Result
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("load %.0f%%, outage %v: no strategy recovers", load*100, outage))
			case !c.Recovered:
				bad = append(bad, fmt.Sprintf("load %.0f%%, outage %v: %s does not recover, the best does in %v", load*100, outage, name, best))
			case c.RecoveredAfter > best+slack:
				bad = append(bad, fmt.Sprintf("load %.0f%%, outage %v: %s recovers in %v, the best in %v", load*100, outage, name, c.RecoveredAfter, best))
			}
		}
	}
	return bad
}
