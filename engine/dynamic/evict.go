package dynamic

import (
	"fmt"
	"math"
	"slices"

	"github.com/recgo/recgo/internal/errs"
)

// candidate is a row an eviction pass may free, with its sort key (smaller goes first).
type candidate struct {
	key uint64
	row int32
}

func less(a, b candidate) bool { return a.key < b.key || (a.key == b.key && a.row < b.row) }

// evictionKey orders rows for the table's policy at clock step now: LRU by the step last seen; LFU by
// count, then staleness.
func (t *Table) evictionKey(r int, now uint64) uint64 {
	if t.cfg.Policy == LFU {
		return uint64(t.counts[r])<<32 | uint64(math.MaxUint32-(stamp(now)-t.last[r]))
	}
	return t.seenAt(r, now)
}

// hasRoom reports whether a row can be taken without evicting.
func (t *Table) hasRoom() bool {
	t.allocMu.Lock()
	defer t.allocMu.Unlock()
	return t.nfree > 0 || t.highWater < t.cfg.MaxRows
}

func (t *Table) lockAll() {
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
}

func (t *Table) unlockAll() {
	for i := range t.shards {
		t.shards[i].mu.Unlock()
	}
}

// freeze takes the eviction lock, every shard lock and the allocation lock, in that order, so that
// nothing else reads or changes the table; the returned function releases them in reverse order.
func (t *Table) freeze() (thaw func()) {
	t.evictMu.Lock()
	t.lockAll()
	t.allocMu.Lock()
	return func() {
		t.allocMu.Unlock()
		t.unlockAll()
		t.evictMu.Unlock()
	}
}

// evictFull frees the EvictFrac of rows first in the policy's order among those not seen in the
// current step. It runs when an admission finds the table full: one pass costs O(rows) (collection
// and a linear-time selection) and frees evictBatch rows, so each admission pays O(1/EvictFrac)
// amortised. It fails with a capacity error only when every row was seen in the current step.
func (t *Table) evictFull(step uint32) error {
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	if t.hasRoom() { // another goroutine's pass freed rows while this one waited
		return nil
	}
	t.lockAll()
	defer t.unlockAll()
	k := t.cfg.evictBatch()
	if t.cfg.Policy == LRU && t.takeReserve(k) {
		return nil
	}
	cands := t.collect(func(r int) bool { return t.last[r] != step })
	if len(cands) == 0 {
		return errs.Capacityf("dynamic table %q: all %d rows hold IDs of the current batch; raise the row "+
			"bound (num_embeddings) above the number of distinct IDs one batch can have", t.cfg.Name, t.cfg.MaxRows)
	}
	k = min(k, len(cands))
	if t.cfg.Policy == LRU {
		n := min(len(cands), reserveBatches*k)
		selectSmallest(cands, n)
		cands = cands[:n]
	}
	selectSmallest(cands, k)
	if t.cfg.Policy == LRU {
		t.reserve = append(t.reserve[:0], cands[k:]...)
	}
	t.release(cands[:k])
	return nil
}

// reserveBatches is how many passes' worth of LRU candidates a full pass selects: it frees the first
// batch and keeps the others for the next passes, which then cost O(reserve) instead of O(rows).
const reserveBatches = 4

// takeReserve frees the k stalest rows from the candidates a full LRU pass kept, and reports whether
// it could (caller holds evictMu and every shard lock). This is exact because LRU keys only grow: a
// kept candidate whose last step is unchanged still ranks below every row outside the reserve, and a
// row touched or admitted since has the current step or a later one, above every kept key.
func (t *Table) takeReserve(k int) bool {
	live, now := t.reserve[:0], t.step.Load()
	for _, c := range t.reserve {
		if t.counts[c.row] != 0 && t.seenAt(int(c.row), now) == c.key {
			live = append(live, c)
		}
	}
	t.reserve = live
	if len(live) < k {
		return false
	}
	selectSmallest(live, k)
	t.release(live[:k])
	t.reserve = append(live[:0], live[k:]...)
	return true
}

// evictStale frees every row not seen in the last MaxAge steps.
func (t *Table) evictStale(step uint32) error {
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	t.lockAll()
	defer t.unlockAll()
	age := uint32(t.cfg.MaxAge)
	t.release(t.collect(func(r int) bool { return step-t.last[r] > age }))
	return nil
}

// collect lists the rows in use that pass keep, in row order (caller holds every shard lock).
func (t *Table) collect(keep func(r int) bool) []candidate {
	t.allocMu.Lock()
	hw := t.highWater
	t.allocMu.Unlock()
	if t.scratch == nil {
		t.scratch = make([]candidate, 0, t.cfg.MaxRows)
	}
	cands := t.scratch[:0]
	now := t.step.Load() // under every shard lock: no row is stamped with a later step
	for r := range hw {
		if t.counts[r] != 0 && keep(r) {
			cands = append(cands, candidate{key: t.evictionKey(r, now), row: int32(r)})
		}
	}
	return cands
}

// release frees rows: removes their IDs from the map, resets their weights and state to zero, and
// pushes them on the free list so that they are reused in ascending row order (caller holds every
// shard lock).
func (t *Table) release(victims []candidate) {
	if len(victims) == 0 {
		return
	}
	rows := make([]int32, len(victims))
	for i, v := range victims {
		id := t.ids[v.row]
		h := hashID(id, t.cfg.Seed)
		t.clearRow(&t.shards[shardOf(h)], h, v.row)
		rows[i] = v.row
	}
	t.freeRows(rows)
}

// freeRows pushes cleared rows on the free list so that they are reused in ascending row order
// (whatever order they were cleared in: lookups clear stale rows shard by shard, in parallel);
// clearRow counted them as evicted.
func (t *Table) freeRows(rows []int32) {
	if len(rows) == 0 {
		return
	}
	slices.Sort(rows)
	t.allocMu.Lock()
	for i := len(rows) - 1; i >= 0; i-- {
		t.free[t.nfree] = rows[i]
		t.nfree++
	}
	t.allocMu.Unlock()
}

// clearRow removes row r's ID (hash h) from its shard s, resets the row's weights, state and
// metadata to zero, and counts it as evicted, stamping the count in freed[r] (caller holds s's lock,
// and hands r to freeRows).
func (t *Table) clearRow(s *shard, h uint64, r int32) {
	c := &t.cfg
	if !s.del(h, t.ids[r]) {
		panic(fmt.Sprintf("dynamic table %q: row %d's id %d is missing from the id map", c.Name, r, t.ids[r]))
	}
	clear(t.weights[int(r)*c.Stride : int(r+1)*c.Stride])
	clear(t.state[int(r)*c.StateWidth : int(r+1)*c.StateWidth])
	t.ids[r], t.last[r], t.counts[r] = 0, 0, 0
	t.evicted.Add(1)
	t.freed[r] = t.replaced.Add(1)
}

// stale reports whether row r was last seen more than MaxAge steps before step. The sweep (every
// MaxAge/4 steps) frees such rows; a lookup in between treats the row's ID as a new one, so no row
// outlives MaxAge by the sweep's period.
func (t *Table) stale(r int32, step uint32) bool {
	return t.cfg.MaxAge > 0 && step-t.last[r] > uint32(t.cfg.MaxAge)
}

// selectSmallest reorders a so that its first k elements are its k smallest (in any order), with
// Hoare-partition quickselect: expected O(len(a)).
func selectSmallest(a []candidate, k int) {
	if k <= 0 || k >= len(a) {
		return
	}
	lo, hi := 0, len(a)-1
	target := k - 1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// median of three as pivot
		if less(a[mid], a[lo]) {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if less(a[hi], a[lo]) {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if less(a[hi], a[mid]) {
			a[hi], a[mid] = a[mid], a[hi]
		}
		p := a[mid]
		i, j := lo, hi
		for i <= j {
			for less(a[i], p) {
				i++
			}
			for less(p, a[j]) {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case target <= j:
			hi = j
		case target >= i:
			lo = i
		default:
			return
		}
	}
}
