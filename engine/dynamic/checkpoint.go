package dynamic

import (
	"math"
	"slices"

	"github.com/recgo/recgo/internal/errs"
)

// Snapshot is a table's complete state, as plain slices (what a checkpoint stores). Rows are listed
// up to the high water mark; a free row has ID 0, count 0 and last step 0.
type Snapshot struct {
	Dim, StateWidth, MaxRows, SketchWidth int // the shape it must be loaded into
	Step                                  int64
	IDs                                   []int64   // owner ID per row, len HighWater
	Counts                                []int64   // batches seen per row (0: free)
	LastSeen                              []int64   // last training step per row
	Free                                  []int64   // the free list, bottom to top (next reused last)
	Weights                               []float32 // HighWater × Dim (padding is not saved)
	State                                 []float32 // HighWater × StateWidth
	Sketch                                []uint8   // counters of every shard's sketch (nil when MinCount <= 1)
	SketchAdds                            []int64   // additions since the last halving, per shard (nil likewise)
	Admitted, Evicted                     int64
	// Seed is the seed of the table it was taken from, which positions the sketch's counters (an ID's
	// hash); SeedKnown is false for a checkpoint written before it was saved (accepted as before).
	Seed      uint64
	SeedKnown bool
	// SketchIndexing is how the sketch's counters were placed (SketchUnmarked, for a checkpoint
	// written before it was saved, reads as SketchV1). A table takes the indexing of the sketch it
	// imports, except that a sketch with no count (none, or all zeros) takes SketchV2: nothing in it
	// depends on the indexing, so the table moves to the current one there and nowhere else.
	SketchIndexing SketchIndexing
}

// HighWater returns the number of rows the snapshot holds.
func (s *Snapshot) HighWater() int { return len(s.IDs) }

// Export copies the table's state. Concurrent Resolve calls wait until it is done.
func (t *Table) Export() (*Snapshot, error) {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return nil, t.closedErr()
	}
	defer t.freeze()()
	c := &t.cfg
	hw, now := t.highWater, t.step.Load()
	s := &Snapshot{
		Dim: c.Dim, StateWidth: c.StateWidth, MaxRows: c.MaxRows, SketchWidth: c.SketchWidth,
		Step: int64(now), IDs: append([]int64(nil), t.ids[:hw]...),
		Counts: make([]int64, hw), LastSeen: make([]int64, hw), Free: make([]int64, t.nfree),
		Weights: make([]float32, hw*c.Dim), State: append([]float32(nil), t.state[:hw*c.StateWidth]...),
		Admitted: t.admitted.Load(), Evicted: t.evicted.Load(), Seed: c.Seed, SeedKnown: true,
		SketchIndexing: t.shards[0].sketch.indexing,
	}
	for r := range hw {
		if t.counts[r] != 0 {
			s.Counts[r], s.LastSeen[r] = int64(t.counts[r]), int64(t.seenAt(r, now))
		}
		copy(s.Weights[r*c.Dim:(r+1)*c.Dim], t.weights[r*c.Stride:])
	}
	for i := range s.Free {
		s.Free[i] = int64(t.free[i])
	}
	if c.MinCount > 1 {
		s.Sketch = make([]uint8, 0, sketchDepth*c.SketchWidth)
		s.SketchAdds = make([]int64, numShards)
		for i := range t.shards {
			s.Sketch = append(s.Sketch, t.shards[i].sketch.cells...)
			s.SketchAdds[i] = int64(t.shards[i].sketch.adds)
		}
	}
	return s, nil
}

// validate checks that s is a consistent snapshot for a table of configuration c (defaults filled).
func (s *Snapshot) validate(c *Config) error {
	bad := func(format string, args ...any) error {
		return errs.Invalidf("dynamic table %q: checkpoint: "+format, append([]any{c.Name}, args...)...)
	}
	hw := len(s.IDs)
	switch {
	case s.Dim != c.Dim || s.StateWidth != c.StateWidth || s.MaxRows != c.MaxRows:
		return bad("shape dim=%d state_width=%d rows=%d does not match the table's dim=%d state_width=%d rows=%d",
			s.Dim, s.StateWidth, s.MaxRows, c.Dim, c.StateWidth, c.MaxRows)
	case hw > c.MaxRows:
		return bad("%d rows exceed the row bound %d", hw, c.MaxRows)
	case len(s.Counts) != hw || len(s.LastSeen) != hw:
		return bad("%d ids but %d counts and %d last-seen steps", hw, len(s.Counts), len(s.LastSeen))
	case len(s.Weights) != hw*c.Dim || len(s.State) != hw*c.StateWidth:
		return bad("%d weights and %d state values for %d rows of dim %d and state width %d",
			len(s.Weights), len(s.State), hw, c.Dim, c.StateWidth)
	case s.Step < 0 || s.Step > maxStep:
		return bad("step %d out of range [0, %d]", s.Step, int64(maxStep))
	case len(s.Free) > hw:
		return bad("free list of %d rows is longer than the %d rows", len(s.Free), hw)
	case len(s.SketchAdds) != numShards && !(len(s.SketchAdds) == 0 && s.Sketch == nil):
		return bad("%d sketch addition counters, expected %d", len(s.SketchAdds), numShards)
	case s.Admitted < 0 || s.Evicted < 0:
		return bad("negative admitted/evicted totals")
	case s.SketchIndexing > SketchV2:
		return bad("sketch indexing %d is unknown (this recgo knows %d and %d)", s.SketchIndexing, SketchV1, SketchV2)
	case s.SeedKnown && s.Seed != c.Seed && len(s.Sketch) != 0:
		// the ID map and the rows are rebuilt under the table's seed, but the sketch's counters sit
		// where the saved seed hashed the pending IDs: loaded, they would count for other IDs
		return bad("its admission sketch was hashed with seed %d, the table's seed is %d (its counts would land "+
			"on other IDs): load it into a table of seed %d", s.Seed, c.Seed, s.Seed)
	}
	if c.MinCount > 1 {
		if s.SketchWidth != c.SketchWidth || len(s.Sketch) != sketchDepth*c.SketchWidth {
			return bad("sketch of width %d (%d counters) does not match the table's width %d (min_count differs?)",
				s.SketchWidth, len(s.Sketch), c.SketchWidth)
		}
		for i, a := range s.SketchAdds {
			if a < 0 || a >= int64(10*c.SketchWidth/numShards) {
				return bad("sketch addition counter %d of shard %d out of range", a, i)
			}
		}
	} else if len(s.Sketch) != 0 {
		return bad("has a min-count sketch but the table admits IDs at once (min_count differs?)")
	}
	isFree := make([]bool, hw)
	for _, r := range s.Free {
		if r < 0 || r >= int64(hw) || isFree[r] {
			return bad("free list entry %d is out of range or repeated", r)
		}
		isFree[r] = true
	}
	seen := make(map[int64]struct{}, hw-len(s.Free))
	for r := range hw {
		n, last := s.Counts[r], s.LastSeen[r]
		if isFree[r] {
			if n != 0 || last != 0 || s.IDs[r] != 0 {
				return bad("free row %d has id %d, count %d, last step %d (expected zeros)", r, s.IDs[r], n, last)
			}
			continue
		}
		if n <= 0 || n > math.MaxUint32 || last < 0 || last > s.Step {
			return bad("row %d has count %d and last step %d (step is %d)", r, n, last, s.Step)
		}
		if s.Step-last > math.MaxUint32 { // a row keeps the step's low 32 bits: its age must fit them
			return bad("row %d was last seen at step %d, more than 2^32 - 1 steps before the step %d", r, last, s.Step)
		}
		if _, dup := seen[s.IDs[r]]; dup {
			return bad("id %d owns more than one row", s.IDs[r])
		}
		seen[s.IDs[r]] = struct{}{}
	}
	return nil
}

// Check returns the error Import would return for s without changing the table: a load that checks
// every table first changes none when one is refused (Import after a nil Check does not fail, unless
// the table is closed in between).
func (t *Table) Check(s *Snapshot) error {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return t.closedErr()
	}
	return s.validate(&t.cfg)
}

// Import replaces the table's state with s after checking it; on error the table is unchanged.
// Concurrent Resolve calls wait until it is done (none runs half before and half after it).
func (t *Table) Import(s *Snapshot) error {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	if t.closed {
		return t.closedErr()
	}
	c := &t.cfg
	if err := s.validate(c); err != nil {
		return err
	}
	defer t.freeze()()

	hw := len(s.IDs)
	// Clear the rows handed out so far (those above read as zeros already, untouched), so that rows
	// above the new high water mark read as fresh.
	clear(t.weights[:t.highWater*c.Stride])
	clear(t.state[:t.highWater*c.StateWidth])
	clear(t.ids[:t.highWater])
	clear(t.last[:t.highWater])
	clear(t.counts[:t.highWater])
	// every row a forward before the import resolved is replaced: its backward drops their gradients
	replacedAt := t.replaced.Add(1)
	for r := range t.highWater {
		t.freed[r] = replacedAt
	}
	t.reserve = t.reserve[:0] // the kept candidates describe rows this import replaces
	for i := range t.shards {
		sh := &t.shards[i]
		sh.presize(c.MaxRows)
		clear(sh.sketch.cells)
		sh.sketch.adds = 0
	}
	for r := range hw {
		copy(t.weights[r*c.Stride:r*c.Stride+c.Dim], s.Weights[r*c.Dim:(r+1)*c.Dim])
		t.ids[r], t.counts[r], t.last[r] = s.IDs[r], uint32(s.Counts[r]), stamp(uint64(s.LastSeen[r]))
		if s.Counts[r] != 0 {
			h := hashID(s.IDs[r], c.Seed)
			t.shards[shardOf(h)].put(h, s.IDs[r], int32(r))
		}
	}
	copy(t.state, s.State)
	for i, r := range s.Free {
		t.free[i] = int32(r)
	}
	t.highWater, t.nfree = hw, len(s.Free)
	indexing := SketchV2 // for a sketch with no count (see Snapshot.SketchIndexing)
	if slices.ContainsFunc(s.Sketch, func(c uint8) bool { return c != 0 }) {
		indexing = s.SketchIndexing.effective()
	}
	w := len(s.Sketch) / numShards
	for i := range t.shards {
		sk := &t.shards[i].sketch
		sk.indexing = indexing
		if c.MinCount > 1 {
			copy(sk.cells, s.Sketch[i*w:(i+1)*w])
			sk.adds = int(s.SketchAdds[i])
		}
	}
	t.step.Store(uint64(s.Step))
	// The rows the snapshot's step already stamped stand for the IDs of the step so far (a manual-step
	// table saved between micro-batches): checkRoom's fast path then counts them, as it counted the
	// IDs before the save (with 0, a batch past the bound admitted part of itself before it raised).
	stamped := int64(0)
	for r := range t.highWater {
		if t.counts[r] != 0 && t.last[r] == stamp(uint64(s.Step)) {
			stamped++
		}
	}
	t.stepIDs.Store(stamped)
	t.admitted.Store(s.Admitted)
	t.evicted.Store(s.Evicted)
	return nil
}
