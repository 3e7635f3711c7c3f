package guardcore

// The cells of (method, client) pairs: rows of CellsPerRow Counts each, a
// pair counting in one cell of every row, chosen by bits of its key. Pairs
// that fall in one cell share its counts; a pair is near (Core.Failed) only
// if every one of its cells is, so an honest client is judged by the
// counts of a noisy one only where it shares a cell with one in every row:
// with k noisy pairs, for a pair about (k/CellsPerRow)^rows of the time (a
// count-min sketch, read as such). There is no table to fill: past
// CellsPerRow pairs, sharing grows with the pairs, for all alike.
const (
	CellsPerRow = 4096
	rows        = 2
)

// A Client is the cells of a (method, client) pair.
type Client [rows]*Counts

// Client returns the cells of the pair whose key is key, as Count does,
// without counting: for the answer of an attempt Count counted.
func (c *Core) Client(key uint64) Client { return c.client(key) }

// client returns the cells of the pair whose key is key.
func (c *Core) client(key uint64) Client {
	return Client{&c.cells[0][key%CellsPerRow], &c.cells[1][(key>>32)%CellsPerRow]}
}

// noisy reports whether the pair whose cells are cl is noisy in epoch e,
// beside the method whose ranks hold ts: in every cell, its harm more than
// ClientMinRetries past noisyFactor times its fair part of the method's
// harm (the part its first tries are of the method's), its expected
// retries weighted as the method's are. (ClientMinRetries past, not only
// more than: a pair of few calls, whose few retries under way are many
// times its fair part by chance, is not noisy.) A client whose
// retries come as the guard paces them gets about its fair part; one that
// ignores pushback, or only retries, gets far more.
func (c *Core) noisy(cl Client, e int64, ts [Ranks]tally) bool {
	var all tally
	for _, t := range ts {
		all.add(t)
	}
	for _, cell := range cl {
		t := cell.tally(e)
		// The cell's expected retries weigh as the method's do: its own
		// few arrived retries say little.
		h := float64(t.unserved()) + all.doing()*float64(t.pending)
		fair := all.harm() * float64(t.first) / max(float64(all.first), 1)
		if h <= noisyFactor*fair+float64(c.clientMin) {
			return false
		}
	}
	return true
}

// noisyFactor is how many times its fair part of a method's harm makes a
// pair noisy.
const noisyFactor = 4
