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
	cells    []uint8 // sketchDepth rows of width counters
	width    int     // power of two
	adds     int
	seed     uint64
	indexing SketchIndexing // SketchV1 or SketchV2: which counters an ID's count is in
}

// SketchIndexing names how an admission sketch maps an ID's hash to its counters, so that a
// checkpoint's counters are read where they were written.
type SketchIndexing uint8

const (
	// SketchUnmarked is a checkpoint's sketch saved before the indexing was (engine files of format
	// version 1 and 2, a dynamic_meta of 10 or 11 values). Such sketches are read as SketchV1, which
	// wrote all of them up to session 43's change of the indexing. (Those written between that change
	// and the marker, within a day and by this repository's own runs only, held SketchV2 counters.)
	SketchUnmarked SketchIndexing = iota
	// SketchV1 is the indexing until session 43: row d's counter is lo + d·hi of one mix of the hash
	// (two IDs that met in rows 0 and 1 met in every row). A table keeps it for a sketch it loaded so,
	// so that an old run continues exactly.
	SketchV1
	// SketchV2 is the indexing of new tables: each row's counter takes 32 bits of two independent mixes.
	SketchV2
)

// effective returns the indexing a sketch saved with i counts by (SketchUnmarked: SketchV1).
func (i SketchIndexing) effective() SketchIndexing { return max(i, SketchV1) }

func newSketch(width int, seed uint64, counting bool) sketch {
	s := sketch{width: width, seed: seed, indexing: SketchV2}
	if counting {
		s.cells = make([]uint8, sketchDepth*width)
	}
	return s
}

// resetEvery is the number of additions after which the counters are halved.
func (s *sketch) resetEvery() int { return 10 * s.width }

// indices returns the counter of each hash row for an ID with table hash h. Under SketchV2 each row
// takes 32 bits of its own from two independent mixes: with one mix's halves combined per row
// (SketchV1's lo + d·hi), two IDs that met in rows 0 and 1 met in every row, about one pair in 2048
// on a 64-wide shard, and such a pair was admitted at half its min_count. SketchV1 stays for the
// sketches of checkpoints it wrote, whose counts sit where it put them.
func (s *sketch) indices(h uint64) [sketchDepth]int {
	var idx [sketchDepth]int
	if s.indexing == SketchV1 {
		g := kernels.Mix64(h ^ 0x9e3779b97f4a7c15)
		lo, hi := uint32(g), uint32(g>>32)|1
		for d := range sketchDepth {
			idx[d] = d*s.width + int((lo+uint32(d)*hi)&uint32(s.width-1))
		}
		return idx
	}
	g := [2]uint64{kernels.Mix64(h ^ 0x9e3779b97f4a7c15), kernels.Mix64(h ^ 0xc2b2ae3d27d4eb4f)}
	mask := uint64(s.width - 1)
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
