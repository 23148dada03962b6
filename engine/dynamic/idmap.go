package dynamic

import (
	"math"
	"sync"

	"github.com/recgo/recgo/kernels"
)

// numShards is the number of lock-striped shards of the ID map (a power of two).
const (
	shardBits = 6
	numShards = 1 << shardBits
)

// SketchShards is the number of per-shard sketch counters a snapshot carries (Snapshot.SketchAdds).
const SketchShards = numShards

// SketchDepth is the number of hash rows of the admission sketch (Snapshot.Sketch holds
// SketchDepth·SketchWidth counters).
const SketchDepth = sketchDepth

// shard is one stripe of the ID map: an open-addressing table with linear probing (each slot an
// ID beside its row+1, 0 meaning empty, so a probe reads one cache line) and the count-min sketch of
// the pending IDs that hash to it. Everything in a shard, and the metadata of the rows its IDs own,
// is guarded by mu.
type shard struct {
	mu     sync.Mutex
	slots  []slot
	n      int
	sketch sketch
	_      [64]byte // keep neighbouring shards' locks off one cache line
}

// locked runs f holding s's lock, released however f ends: a panic (a bug) recovered at the C ABI
// must not leave the shard locked, or the next call on the table would hang.
func (s *shard) locked(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// slot is one entry of a shard's table.
type slot struct {
	key int64
	val uint32 // row+1; 0 = empty slot
}

const minMapCap = 16

// slot returns where the probe for hash h starts.
func (s *shard) home(h uint64) int { return int(h & uint64(len(s.slots)-1)) }

// get returns id's row, or -1.
func (s *shard) get(h uint64, id int64) int32 {
	if len(s.slots) == 0 {
		return -1
	}
	mask := len(s.slots) - 1
	for i := s.home(h); ; i = (i + 1) & mask {
		e := &s.slots[i]
		if e.val == 0 {
			return -1
		}
		if e.key == id {
			return int32(e.val - 1)
		}
	}
}

// put inserts id → row; id must not be present.
func (s *shard) put(h uint64, id int64, row int32) {
	if (s.n+1)*4 > len(s.slots)*3 {
		s.grow()
	}
	mask := len(s.slots) - 1
	i := s.home(h)
	for s.slots[i].val != 0 {
		i = (i + 1) & mask
	}
	s.slots[i] = slot{id, uint32(row) + 1}
	s.n++
}

// presize gives an empty shard room for the entries it can expect when the table holds bound IDs
// spread over numShards shards (mean plus six standard deviations, at most 3/4 full), so a table
// that fills up does not keep rehashing (and growing its heap) long after. More entries still fit:
// put grows the table when needed.
func (s *shard) presize(bound int) {
	s.slots, s.n = make([]slot, shardSlots(bound)), 0
}

// shardSlots is the slots presize gives each shard for a table of bound IDs.
func shardSlots(bound int) int {
	mean := float64(bound) / numShards
	return nextPow2(int((mean + 6*math.Sqrt(mean) + 8) * 4 / 3))
}

// grow doubles the table (or creates it) and reinserts every entry.
func (s *shard) grow() {
	old := s.slots
	s.slots, s.n = make([]slot, max(minMapCap, 2*len(old))), 0
	for _, e := range old {
		if e.val != 0 {
			s.put(hashID(e.key, s.seed()), e.key, int32(e.val-1))
		}
	}
}

// del removes id with backward-shift deletion, so no tombstones build up under constant
// insert/evict churn and probe sequences stay short. It reports whether id was present.
func (s *shard) del(h uint64, id int64) bool {
	if len(s.slots) == 0 {
		return false
	}
	mask := len(s.slots) - 1
	i := s.home(h)
	for ; s.slots[i].key != id; i = (i + 1) & mask {
		if s.slots[i].val == 0 {
			return false
		}
	}
	if s.slots[i].val == 0 {
		return false
	}
	for j := (i + 1) & mask; s.slots[j].val != 0; j = (j + 1) & mask {
		k := s.home(hashID(s.slots[j].key, s.seed()))
		// The entry at j may move back to i only if its home slot k is not cyclically in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		s.slots[i] = s.slots[j]
		i = j
	}
	s.slots[i] = slot{}
	s.n--
	return true
}

// seed returns the hash seed this shard's table uses (stored in the sketch to keep shards small).
func (s *shard) seed() uint64 { return s.sketch.seed }

// hashID hashes an ID with a table's seed. The top shardBits bits pick the shard, the low bits the slot.
func hashID(id int64, seed uint64) uint64 { return kernels.Mix64(uint64(id) ^ seed) }

func shardOf(h uint64) int { return int(h >> (64 - shardBits)) }
