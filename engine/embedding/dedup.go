package embedding

import (
	"unsafe"

	"github.com/recgo/recgo/kernels"
)

// dedupDense deduplicates with a per-table slot array indexed by ID (fixed tables only), checking
// ranges as it goes; it leaves the seen bitmap clear again, on success or failure.
func (t *Table) dedupDense(feats []int, b Batch, B int, featKey []int, offsets []int64, tc *tableCtx, src RangeSource) error {
	t.dedupMu.Lock()
	defer t.dedupMu.Unlock()
	if t.mark == nil {
		t.mark = make([]int32, t.rows)
		t.seen = make([]uint64, (t.rows+63)/64)
	}
	mark, seen := t.mark, t.seen
	defer func() {
		for _, id := range tc.uniq {
			seen[id>>6] = 0
		}
	}()
	p := 0
	for _, f := range feats {
		k := featKey[f]
		for _, id := range b.Values[offsets[k*B]:offsets[(k+1)*B]] {
			if uint64(id) >= uint64(src.Rows) {
				return src.check(id)
			}
			// The bitmap (rows/8 bytes, cache resident) says whether id was seen; only then is its
			// slot read, so a first sighting costs a store, not a load that misses.
			var u int32
			if w, bit := id>>6, uint64(1)<<(id&63); seen[w]&bit == 0 {
				seen[w] |= bit
				u = int32(len(tc.uniq))
				mark[id] = u
				tc.uniq = append(tc.uniq, id)
			} else {
				u = mark[id]
			}
			tc.inv[p] = u
			p++
		}
	}
	return nil
}

// dedupMap deduplicates arbitrary int64 IDs with the table's hash index (row sources other than
// RangeSource).
func dedupMap(feats []int, b Batch, B int, featKey []int, offsets []int64, tc *tableCtx) {
	x := &tc.index
	x.reset(len(tc.inv))
	defer x.clear()
	p := 0
	for _, f := range feats {
		k := featKey[f]
		for _, id := range b.Values[offsets[k*B]:offsets[(k+1)*B]] {
			u, fresh := x.find(id, int32(len(tc.uniq)))
			if fresh {
				tc.uniq = append(tc.uniq, id)
				if 2*len(tc.uniq) > len(x.slots) {
					x.grow(tc.uniq)
				}
			}
			tc.inv[p] = u
			p++
		}
	}
	x.lastDistinct = len(tc.uniq)
}

// idIndex maps a batch's distinct IDs to their first-seen index: open addressing with linear
// probing over a power-of-two slot array kept at most half full, each slot holding an ID beside
// its index (one cache line per probe; faster per lookup than Go's map). It is
// sized from the previous pass's distinct count (a sparse index misses cache more) and grows when
// a pass outruns it. Slots are cleared by the list of those used, so a small pass stays cheap.
type idIndex struct {
	slots        []idSlot
	used         []int32 // slots filled by the running pass
	lastDistinct int
}

type idSlot struct {
	id   int64
	next int32 // index + 1; 0 marks an empty slot
}

// reset readies the index for a pass of n lookups (all slots are empty between passes).
func (x *idIndex) reset(n int) {
	want := nextPow2(max(1024, min(2*x.lastDistinct, 2*n)))
	if len(x.slots) < want || len(x.slots) > 4*want {
		x.slots = make([]idSlot, want)
	}
	x.used = x.used[:0]
}

// prefetch hints the slots where find will look for ids first (scratch: room for their slot
// numbers; negative ids skipped).
func (x *idIndex) prefetch(ids, scratch []int64) {
	if len(x.slots) == 0 {
		return
	}
	mask := uint64(len(x.slots) - 1)
	scratch = scratch[:len(ids)]
	for i, id := range ids {
		scratch[i] = int64(kernels.Mix64(uint64(id)) & mask)
		if id < 0 {
			scratch[i] = -1
		}
	}
	kernels.PrefetchLines(unsafe.Pointer(unsafe.SliceData(x.slots)), scratch, int64(unsafe.Sizeof(idSlot{})), 1)
}

// find returns id's index, inserting it with index next when absent (fresh reports that).
func (x *idIndex) find(id int64, next int32) (u int32, fresh bool) {
	slots, mask := x.slots, uint64(len(x.slots)-1)
	for i := kernels.Mix64(uint64(id)) & mask; ; i = (i + 1) & mask {
		s := &slots[i]
		if s.next == 0 { // empty: a first sighting
			s.id, s.next = id, next+1
			x.used = append(x.used, int32(i))
			return next, true
		}
		if s.id == id {
			return s.next - 1, false
		}
	}
}

// grow doubles the slot array and re-inserts the pass's distinct IDs (uniq, in index order).
func (x *idIndex) grow(uniq []int64) {
	x.slots = make([]idSlot, 2*len(x.slots))
	x.used = x.used[:0]
	for u, id := range uniq {
		x.find(id, int32(u))
	}
}

// clear empties the slots the last pass used.
func (x *idIndex) clear() {
	for _, i := range x.used {
		x.slots[i] = idSlot{}
	}
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
