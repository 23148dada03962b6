package dynamic

import "github.com/recgo/recgo/kernels"

// sketchDepth is the number of hash rows of each count-min sketch.
const sketchDepth = 4

// minSketchShardWidth is the smallest per-shard sketch row.
const minSketchShardWidth = 64

// sketch is a count-min sketch of 8-bit saturating counters with conservative update: an increment
// raises only the counters that hold the current minimum, which keeps over-counting (from hash
// collisions) far below the plain sketch's. After resetEvery additions every counter is halved, so
// the sketch forgets IDs that stopped appearing and never fills up.
type sketch struct {
	cells []uint8 // sketchDepth rows of width counters
	width int     // power of two
	adds  int
	seed  uint64
}

func newSketch(width int, seed uint64, counting bool) sketch {
	s := sketch{width: width, seed: seed}
	if counting {
		s.cells = make([]uint8, sketchDepth*width)
	}
	return s
}

// resetEvery is the number of additions after which the counters are halved.
func (s *sketch) resetEvery() int { return 10 * s.width }

// indices returns the counter of each hash row for an ID with table hash h. Each row takes 32 bits
// of its own from two independent mixes: with one mix's halves combined per row (lo + d·hi), two IDs
// that met in rows 0 and 1 met in every row, about one pair in 2048 on a 64-wide shard, and such a
// pair was admitted at half its min_count.
func (s *sketch) indices(h uint64) [sketchDepth]int {
	g := [2]uint64{kernels.Mix64(h ^ 0x9e3779b97f4a7c15), kernels.Mix64(h ^ 0xc2b2ae3d27d4eb4f)}
	mask := uint64(s.width - 1)
	var idx [sketchDepth]int
	for d := range sketchDepth {
		idx[d] = d*s.width + int((g[d/2]>>(32*(d%2)))&mask)
	}
	return idx
}

// estimate returns the (over-)estimated count of the ID with hash h.
func (s *sketch) estimate(h uint64) int {
	m := uint8(255)
	for _, i := range s.indices(h) {
		m = min(m, s.cells[i])
	}
	return int(m)
}

// add counts one sighting of the ID with hash h and returns its new estimate.
func (s *sketch) add(h uint64) int {
	idx := s.indices(h)
	m := uint8(255)
	for _, i := range idx {
		m = min(m, s.cells[i])
	}
	if m == 255 {
		return 255
	}
	for _, i := range idx {
		if s.cells[i] == m {
			s.cells[i] = m + 1
		}
	}
	s.adds++
	if s.adds >= s.resetEvery() {
		for i := range s.cells {
			s.cells[i] >>= 1
		}
		s.adds /= 2
	}
	return int(m) + 1
}
