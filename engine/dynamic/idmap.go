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

// shard is one stripe of the ID map: an open-addressing table with linear probing (keys and row+1
// values, 0 meaning empty) and the count-min sketch of the pending IDs that hash to it. Everything in
// a shard, and the metadata of the rows its IDs own, is guarded by mu.
type shard struct {
	mu     sync.Mutex
	keys   []int64
	vals   []uint32 // row+1; 0 = empty slot
	n      int
	sketch sketch
	_      [64]byte // keep neighbouring shards' locks off one cache line
}

const minMapCap = 16

// slot returns where the probe for hash h starts.
func (s *shard) slot(h uint64) int { return int(h & uint64(len(s.keys)-1)) }

// get returns id's row, or -1.
func (s *shard) get(h uint64, id int64) int32 {
	if len(s.keys) == 0 {
		return -1
	}
	mask := len(s.keys) - 1
	for i := s.slot(h); ; i = (i + 1) & mask {
		v := s.vals[i]
		if v == 0 {
			return -1
		}
		if s.keys[i] == id {
			return int32(v - 1)
		}
	}
}

// put inserts id → row; id must not be present.
func (s *shard) put(h uint64, id int64, row int32) {
	if (s.n+1)*4 > len(s.keys)*3 {
		s.grow()
	}
	mask := len(s.keys) - 1
	i := s.slot(h)
	for s.vals[i] != 0 {
		i = (i + 1) & mask
	}
	s.keys[i], s.vals[i] = id, uint32(row)+1
	s.n++
}

// presize gives an empty shard room for the entries it can expect when the table holds bound IDs
// spread over numShards shards (mean plus six standard deviations, at most 3/4 full), so a table
// that fills up does not keep rehashing (and growing its heap) long after. More entries still fit:
// put grows the table when needed.
func (s *shard) presize(bound int) {
	mean := float64(bound) / numShards
	want := (mean + 6*math.Sqrt(mean) + 8) * 4 / 3
	s.keys, s.vals, s.n = make([]int64, nextPow2(int(want))), make([]uint32, nextPow2(int(want))), 0
}

// grow doubles the table (or creates it) and reinserts every entry.
func (s *shard) grow() {
	keys, vals := s.keys, s.vals
	size := max(minMapCap, 2*len(keys))
	s.keys, s.vals, s.n = make([]int64, size), make([]uint32, size), 0
	for i, v := range vals {
		if v != 0 {
			s.put(hashID(keys[i], s.seed()), keys[i], int32(v-1))
		}
	}
}

// del removes id with backward-shift deletion, so no tombstones build up under constant
// insert/evict churn and probe sequences stay short. It reports whether id was present.
func (s *shard) del(h uint64, id int64) bool {
	if len(s.keys) == 0 {
		return false
	}
	mask := len(s.keys) - 1
	i := s.slot(h)
	for ; s.keys[i] != id; i = (i + 1) & mask {
		if s.vals[i] == 0 {
			return false
		}
	}
	if s.vals[i] == 0 {
		return false
	}
	for j := (i + 1) & mask; s.vals[j] != 0; j = (j + 1) & mask {
		k := s.slot(hashID(s.keys[j], s.seed()))
		// The entry at j may move back to i only if its home slot k is not cyclically in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		s.keys[i], s.vals[i] = s.keys[j], s.vals[j]
		i = j
	}
	s.vals[i] = 0
	s.n--
	return true
}

// seed returns the hash seed this shard's table uses (stored in the sketch to keep shards small).
func (s *shard) seed() uint64 { return s.sketch.seed }

// hashID hashes an ID with a table's seed. The top shardBits bits pick the shard, the low bits the slot.
func hashID(id int64, seed uint64) uint64 { return kernels.Mix64(uint64(id) ^ seed) }

func shardOf(h uint64) int { return int(h >> (64 - shardBits)) }
