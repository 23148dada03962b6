package dynamic

import (
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/offheap"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// Marks written into rows during Resolve before the admission pass.
const (
	noRow       = -1 // the ID has no row (pools as zeros)
	toAdmit     = -2 // the ID reached MinCount and gets a row in the second pass
	parallelMin = 8192
)

// Table is a dynamic-ID embedding table and its RowSource. All methods are safe for concurrent use.
type Table struct {
	cfg Config
	buf *offheap.Buffer

	weights []float32 // storageRows × Stride
	state   []float32 // storageRows × StateWidth
	ids     []int64   // owner ID of each row
	last    []uint32  // low 32 bits of the step each row was last seen in training (see seenAt)
	counts  []uint32  // batches each row's ID was seen in; 0 marks a free row
	// freed is, per row, the count (Evictions) that freeing it, or the Import that last replaced it,
	// brought the table to (0 if neither). Recheck drops a row freed after the forward that resolved it
	// even when the same ID came back to the same row (a new incarnation, re-initialised): comparing
	// the row's ID alone wrote the stale gradient into it. 8 bytes per row of the bound (int64: the
	// count never wraps, so the check is exact), committed with the pages of rows ever freed.
	freed []int64
	free  []int32 // free-list stack of evicted rows (first nfree entries)

	shards [numShards]shard

	allocMu   sync.Mutex // guards highWater, nfree, free
	highWater int        // rows [0, highWater) have been handed out at least once
	nfree     int

	evictMu sync.Mutex // one eviction pass at a time; guards scratch and reserve
	scratch []candidate
	reserve []candidate // LRU candidates kept from the last full pass (see takeReserve)

	step              atomic.Uint64 // the clock: training steps so far (never wraps)
	stepIDs           atomic.Int64  // IDs resolved in training since the clock last moved (see checkRoom)
	admitted, evicted atomic.Int64
	// replaced counts the rows freed and the imports since New (Evictions): unlike evicted, an Import
	// moves it on rather than restoring it, so a forward's context from before an import sees its rows
	// as replaced (a restored count let its backward write stale gradients into the loaded IDs' rows).
	replaced atomic.Int64
	closeMu  sync.RWMutex
	closed   bool
}

// New creates a table with its storage reserved (not committed) up to the row bound.
func New(cfg Config) (*Table, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Table{cfg: c}
	l := c.layout()
	buf, err := offheap.Reserve(l.total)
	if err != nil {
		return nil, fmt.Errorf("dynamic table %q: %w", c.Name, err)
	}
	rows := c.storageRows()
	t.buf = buf
	t.weights = view[float32](buf, l.weights, rows*c.Stride)
	t.state = view[float32](buf, l.state, rows*c.StateWidth)
	t.ids = view[int64](buf, l.ids, c.MaxRows)
	t.last = view[uint32](buf, l.last, c.MaxRows)
	t.counts = view[uint32](buf, l.counts, c.MaxRows)
	t.freed = view[int64](buf, l.freed, c.MaxRows)
	t.free = view[int32](buf, l.free, c.MaxRows)
	for i := range t.shards {
		t.shards[i].sketch = newSketch(c.SketchWidth/numShards, c.Seed, c.MinCount > 1)
		t.shards[i].presize(c.MaxRows)
	}
	if c.Default != nil {
		copy(t.weights[c.MaxRows*c.Stride:], c.Default)
	}
	return t, nil
}

// view returns n values of type T at byte offset off of b.
func view[T any](b *offheap.Buffer, off, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b.Bytes()[off])), n)
}

// Config returns the table's configuration with defaults filled in.
func (t *Table) Config() Config { return t.cfg }

// Weights returns the weight storage, StorageRows × Stride floats (address stable until Close).
func (t *Table) Weights() []float32 { return t.weights }

// State returns the optimizer-state storage, StorageRows × StateWidth floats.
func (t *Table) State() []float32 { return t.state }

// StorageRows is the number of rows of Weights: the row bound, plus one for the default row.
func (t *Table) StorageRows() int { return t.cfg.storageRows() }

// DefaultRow returns the row holding the eval-mode default vector, or -1 without one.
func (t *Table) DefaultRow() int64 {
	if t.cfg.Default == nil {
		return noRow
	}
	return int64(t.cfg.MaxRows)
}

// Step returns the table's clock: the number of training steps so far.
func (t *Table) Step() int64 { return int64(t.step.Load()) }

// Advance moves the clock one step (for ManualStep tables; it also works on the others) and runs the
// MaxAge sweep when one is due.
func (t *Table) Advance() error {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return t.closedErr()
	}
	return t.tick()
}

// maxStep is the most steps a table's clock counts (a checkpoint's step past it is refused; a
// billion steps a second would take 146 years to reach it), so that it never wraps.
const maxStep = 1 << 62

func (t *Table) tick() error {
	step := t.step.Add(1)
	if step > maxStep {
		t.step.Add(^uint64(0)) // back
		return errs.Invalidf("dynamic table %q: its clock is at %d steps, the most it counts", t.cfg.Name, maxStep)
	}
	t.stepIDs.Store(0)
	if t.cfg.MaxAge > 0 && step%uint64(max(1, t.cfg.MaxAge/4)) == 0 {
		return t.evictStale(stamp(step))
	}
	return nil
}

// stamp is what a row keeps of the clock's step: its low 32 bits (4 bytes a row of the bound, not 8).
// Ages are differences of stamps, exact modulo 2^32, so the clock may pass 2^32 steps (a table
// trained for billions of steps: the 32-bit clock wrapped to 0 there, and its checkpoints, rows last
// seen "after" the step, were refused on load).
func stamp(step uint64) uint32 { return uint32(step) }

// seenAt returns the step row r was last seen at in training, from its stamp and the clock's step now
// (not before it): exact for a row seen in the last 2^32 steps.
func (t *Table) seenAt(r int, now uint64) uint64 { return now - uint64(stamp(now)-t.last[r]) }

func (t *Table) closedErr() error { return errs.Invalidf("dynamic table %q is closed", t.cfg.Name) }

// Resolve implements embedding.RowSource. In training mode it counts every ID, gives a row to each ID
// that has reached MinCount (evicting when the table is full), and stamps the rows with the current
// step; in eval mode it only looks IDs up: an ID without a row resolves to the default row or -1.
// IDs are expected to be unique within a call (the collection deduplicates); with duplicates, each
// occurrence counts as a sighting.
func (t *Table) Resolve(ids []int64, rows []int64, train bool) error {
	if len(ids) != len(rows) {
		return errs.Invalidf("dynamic table %q: %d ids but %d row slots", t.cfg.Name, len(ids), len(rows))
	}
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return t.closedErr()
	}
	if train {
		if err := t.checkRoom(ids); err != nil {
			return err
		}
	}
	if train && !t.cfg.ManualStep {
		if err := t.tick(); err != nil {
			return err
		}
	}
	step := stamp(t.step.Load())
	t.lookup(ids, rows, train, step)
	if !train {
		return nil
	}
	for i, r := range rows {
		if r == toAdmit {
			row, err := t.admit(ids[i], step)
			if err != nil {
				return err
			}
			rows[i] = int64(row)
		}
	}
	return nil
}

// checkRoom fails, before a training Resolve changes anything, when its IDs need more rows than the
// table has: those that hold a row or will be admitted, plus the rows that calls before it stamped
// in the same step (a manual-step table's earlier micro-batches). Admission would otherwise fail
// midway, having evicted rows (their trained weights lost) and admitted part of the batch for a
// step that raised. The exact count (every shard locked) runs only when the IDs of the step so far
// could exceed the bound.
func (t *Table) checkRoom(ids []int64) error {
	prior := int64(0)
	if t.cfg.ManualStep { // the clock does not move with this call: earlier calls' rows are this step's
		prior = t.stepIDs.Add(int64(len(ids))) - int64(len(ids))
	}
	if prior+int64(len(ids)) <= int64(t.cfg.MaxRows) {
		return nil
	}
	thaw := t.freeze()
	defer thaw()
	step := stamp(t.step.Load())
	stamped := 0 // rows earlier calls of this step touched (none once the clock moves)
	if t.cfg.ManualStep {
		for r := range t.highWater {
			if t.counts[r] != 0 && t.last[r] == step {
				stamped++
			}
		}
	}
	seen := make(map[int64]int, len(ids))
	for _, id := range ids {
		seen[id]++
	}
	if !t.cfg.ManualStep {
		step++ // the step this call will run at
	}
	need := stamped
	for id, n := range seen {
		h := hashID(id, t.cfg.Seed)
		s := &t.shards[shardOf(h)]
		switch r := s.get(h, id); {
		case r >= 0 && !t.stale(r, step):
			if !t.cfg.ManualStep || t.last[r] != step {
				need++
			}
		case t.cfg.MinCount <= 1 || s.sketch.estimate(h)+n >= t.cfg.MinCount:
			need++
		}
	}
	if need > t.cfg.MaxRows {
		return errs.Capacityf("dynamic table %q: this batch needs %d rows (its IDs that hold or reach a row, and "+
			"the rows this step's earlier batches hold), more than its %d; raise the row bound (num_embeddings) "+
			"above the number of distinct IDs one step can have (nothing was changed)", t.cfg.Name, need, t.cfg.MaxRows)
	}
	return nil
}

// Lookup is Resolve for callers outside a forward pass: the same rows, except that an ID without a
// row reads -1 even in eval mode when the table has a default row (Resolve hands out the default
// row there, so that it pools).
func (t *Table) Lookup(ids []int64, rows []int64, train bool) error {
	if err := t.Resolve(ids, rows, train); err != nil {
		return err
	}
	if def := t.DefaultRow(); def >= 0 {
		for i, r := range rows {
			if r == def {
				rows[i] = noRow
			}
		}
	}
	return nil
}

// lookup is Resolve's first pass: rows of known IDs (stamped and counted in training), sightings of
// unknown ones, and toAdmit marks for those that reached MinCount. The IDs are grouped by the shard
// of their hash (a stable counting sort), and each shard is locked once for its group, in index
// order within it: one lock round trip per shard instead of one per ID, and the same result, bit
// for bit, whichever goroutine takes which shard (large batches spread the shards over the workers).
func (t *Table) lookup(ids, rows []int64, train bool, step uint32) {
	g := groupByShard(ids, t.cfg.Seed)
	defer groupPool.Put(g)
	def := t.DefaultRow()
	var staleMu sync.Mutex
	var stale []int32 // rows past MaxAge the sweep has not freed yet, freed after the pass
	visit := func(lo, hi int) {
		for s, idx := range g.groups(t, lo, hi) {
			s.locked(func() {
				for _, i := range idx {
					h, id := g.hash[i], ids[i]
					r := s.get(h, id)
					if r >= 0 && t.stale(r, step) { // its ID comes back as a new one
						if train {
							t.clearRow(s, h, r)
							staleMu.Lock()
							stale = append(stale, r)
							staleMu.Unlock()
						}
						r = noRow
					}
					switch {
					case r >= 0:
						if train {
							t.touch(r, step)
						}
						rows[i] = int64(r)
					case !train:
						rows[i] = def
					case t.cfg.MinCount <= 1 || s.sketch.add(h) >= t.cfg.MinCount:
						rows[i] = toAdmit
					default:
						rows[i] = noRow
					}
				}
			})
		}
	}
	if len(ids) >= parallelMin {
		parallel.For(numShards, 1, visit)
	} else {
		visit(0, numShards)
	}
	t.freeRows(stale)
}

// Evictions implements embedding.EvictingSource: the rows freed so far, and the imports, which
// replace every row (the evictions Stats reports are another count, which an import restores).
func (t *Table) Evictions() int64 { return t.replaced.Load() }

// Recheck implements embedding.EvictingSource: rows[i] becomes −1 where ids[i] no longer holds it,
// or holds it again after the row was freed since the resolve (Evictions was since then): that
// incarnation of the ID is not the one the forward looked up. The ID's shard lock covers freed[r]
// of a row the ID holds (clearRow writes it under the owner's lock).
func (t *Table) Recheck(ids, rows []int64, since int64) {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return
	}
	g := groupByShard(ids, t.cfg.Seed)
	defer groupPool.Put(g)
	for s, idx := range g.groups(t, 0, numShards) {
		s.locked(func() {
			for _, i := range idx {
				if r := rows[i]; r >= 0 && r < int64(t.cfg.MaxRows) && (int64(s.get(g.hash[i], ids[i])) != r || t.freed[r] > since) {
					rows[i] = noRow
				}
			}
		})
	}
}

// shardGroups is a batch of IDs grouped by shard: order lists the IDs' indices shard by shard (in
// index order within one), shard s's from start[s] to start[s+1]; hash is each ID's hash.
type shardGroups struct {
	hash  []uint64
	order []int32
	start [numShards + 1]int
}

// groups yields, for each of t's shards lo..hi-1 that has IDs of the batch, the shard and its IDs'
// indices (in index order); the caller locks the shard once for its group.
func (g *shardGroups) groups(t *Table, lo, hi int) iter.Seq2[*shard, []int32] {
	return func(yield func(*shard, []int32) bool) {
		for sh := lo; sh < hi; sh++ {
			if idx := g.order[g.start[sh]:g.start[sh+1]]; len(idx) > 0 && !yield(&t.shards[sh], idx) {
				return
			}
		}
	}
}

// groupPool recycles the groupings of Resolve calls (two slices per call the size of its batch).
var groupPool = sync.Pool{New: func() any { return new(shardGroups) }}

// groupByShard hashes ids with seed and groups them by shard, in a grouping from groupPool (the
// caller puts it back).
func groupByShard(ids []int64, seed uint64) *shardGroups {
	g := groupPool.Get().(*shardGroups)
	if cap(g.hash) < len(ids) {
		g.hash, g.order = make([]uint64, len(ids)), make([]int32, len(ids))
	}
	g.hash, g.order, g.start = g.hash[:len(ids)], g.order[:len(ids)], [numShards + 1]int{}
	var next [numShards]int
	for i, id := range ids {
		h := hashID(id, seed)
		g.hash[i] = h
		g.start[shardOf(h)+1]++
	}
	for s := range numShards {
		g.start[s+1] += g.start[s]
		next[s] = g.start[s]
	}
	for i, h := range g.hash {
		s := shardOf(h)
		g.order[next[s]] = int32(i)
		next[s]++
	}
	return g
}

// touch records a training sighting of row r (caller holds the owner's shard lock).
func (t *Table) touch(r int32, step uint32) {
	t.last[r] = step
	if t.counts[r] < ^uint32(0) {
		t.counts[r]++
	}
}

// admit gives id a row (or returns the one another goroutine just gave it), evicting if full.
func (t *Table) admit(id int64, step uint32) (int32, error) {
	h := hashID(id, t.cfg.Seed)
	s := &t.shards[shardOf(h)]
	for {
		r, added := int32(noRow), false
		s.locked(func() {
			if r = s.get(h, id); r >= 0 {
				t.touch(r, step)
				return
			}
			var ok bool
			if r, ok = t.takeRow(); ok {
				s.put(h, id, r)
				t.ids[r], t.last[r], t.counts[r] = id, step, 1
				if t.cfg.MinCount > 1 { // carry the sightings before admission (a halving may have cut them)
					t.counts[r] = uint32(max(1, s.sketch.estimate(h)))
				}
				t.initRow(r, id)
				added = true
			} else {
				r = noRow
			}
		})
		if added {
			t.admitted.Add(1)
		}
		if r >= 0 {
			return r, nil
		}
		if err := t.evictFull(step); err != nil {
			return noRow, err
		}
	}
}

// takeRow pops a free row or extends the high water mark; false when the table is full.
func (t *Table) takeRow() (int32, bool) {
	t.allocMu.Lock()
	defer t.allocMu.Unlock()
	if t.nfree > 0 {
		t.nfree--
		return t.free[t.nfree], true
	}
	if t.highWater < t.cfg.MaxRows {
		t.highWater++
		return int32(t.highWater - 1), true
	}
	return 0, false
}

// initRow writes a new row: weights drawn from the per-ID generator, padding and state zero.
func (t *Table) initRow(r int32, id int64) {
	c := &t.cfg
	w := t.weights[int(r)*c.Stride : int(r+1)*c.Stride]
	InitVector(w[:c.Dim], id, c.Seed, c.InitLow, c.InitHigh)
	clear(w[c.Dim:])
	clear(t.state[int(r)*c.StateWidth : int(r+1)*c.StateWidth])
}

// InitVector fills dst with the initial weights a table seeded with seed gives id: uniform in
// [low, high) from a splitmix64 stream keyed by (seed, id). Tests and references use it to predict
// a row's starting point.
func InitVector(dst []float32, id int64, seed uint64, low, high float32) {
	x := kernels.Mix64(uint64(id)^kernels.Mix64(seed)) | 1
	span := high - low
	for j := range dst {
		x += 0x9e3779b97f4a7c15
		u := float32(kernels.Mix64(x)>>40) / (1 << 24) // [0, 1) with 24 random bits
		dst[j] = low + span*u
	}
}

// Close releases the storage. Resolve, Advance and the storage views are invalid afterwards.
func (t *Table) Close() error {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	t.weights, t.state, t.ids, t.last, t.counts, t.free, t.freed = nil, nil, nil, nil, nil, nil, nil
	return t.buf.Free()
}

// Stats describes a table's occupancy and history.
type Stats struct {
	Rows          int   // IDs holding a row now
	HighWater     int   // rows ever handed out (the committed part of the storage)
	MaxRows       int   // the row bound
	Step          int64 // training steps so far
	Admitted      int64 // IDs given a row, ever
	Evicted       int64 // rows freed by eviction, ever
	ReservedBytes int   // address space reserved for storage and metadata
	// ResidentBytes counts the reserved region's pages that are mapped (mincore): the pages rows were
	// written to, plus any untouched page something merely read (e.g. torch.save of the whole weight
	// view), which the kernel maps to its shared zero page at no memory cost.
	ResidentBytes int
}

// Stats returns the current statistics.
func (t *Table) Stats() (Stats, error) {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return Stats{}, t.closedErr()
	}
	t.allocMu.Lock()
	hw, nfree := t.highWater, t.nfree
	t.allocMu.Unlock()
	res, err := t.buf.ResidentBytes(0, t.buf.Len())
	if err != nil {
		return Stats{}, err
	}
	return Stats{
		Rows: hw - nfree, HighWater: hw, MaxRows: t.cfg.MaxRows, Step: t.Step(),
		Admitted: t.admitted.Load(), Evicted: t.evicted.Load(),
		ReservedBytes: t.buf.Len(), ResidentBytes: res,
	}, nil
}
