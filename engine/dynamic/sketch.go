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

// index returns the counter of hash row d for an ID with table hash h.
func (s *sketch) index(h uint64, d int) int {
	g := kernels.Mix64(h ^ 0x9e3779b97f4a7c15)
	lo, hi := uint32(g), uint32(g>>32)|1
	return d*s.width + int((lo+uint32(d)*hi)&uint32(s.width-1))
}

// estimate returns the (over-)estimated count of the ID with hash h.
func (s *sketch) estimate(h uint64) int {
	m := uint8(255)
	for d := range sketchDepth {
		m = min(m, s.cells[s.index(h, d)])
	}
	return int(m)
}

// add counts one sighting of the ID with hash h and returns its new estimate.
func (s *sketch) add(h uint64) int {
	var idx [sketchDepth]int
	m := uint8(255)
	for d := range sketchDepth {
		idx[d] = s.index(h, d)
		m = min(m, s.cells[idx[d]])
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
