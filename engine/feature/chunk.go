package feature

import "github.com/recgo/recgo/internal/parallel"

// chunkValues is the number of input values a sample chunk aims at (4 MiB of IDs): small enough
// that a chunk's intermediate values stay in the CPU's caches from one fused group to the next,
// large enough that the per-group bookkeeping of thousands of fields stays small.
const chunkValues = 1 << 19

// chunk is a sub-batch of consecutive samples [first, first+batch.Size).
type chunk struct {
	first int
	batch Batch
}

// split cuts b into sample chunks of about chunkValues values (at least two per worker when the
// batch holds more than a couple of tiles of work). It returns nil when one chunk suffices or when
// the batch is malformed, leaving the one-chunk path to report the error.
func (e *Engine) split(b Batch) []chunk {
	total := 0
	for i := range b.Inputs {
		total += b.Inputs[i].count()
	}
	if total < 2*minChunk || b.Size < 2 {
		return nil
	}
	k := min(max(total/chunkValues, 2*parallel.Workers()), b.Size, 256)
	if k < 2 {
		return nil
	}
	bounds := make([]int, k+1) // sample boundaries
	for c := range bounds {
		bounds[c] = c * b.Size / k
	}
	chunks := make([]chunk, k)
	for c := range chunks {
		chunks[c] = chunk{first: bounds[c], batch: Batch{Size: bounds[c+1] - bounds[c], Inputs: make([]Input, len(b.Inputs))}}
	}
	ok := make([]bool, len(b.Inputs))
	parallel.ForEach(len(b.Inputs), 16, func(i int) {
		ok[i] = splitInput(&b.Inputs[i], b.Size, bounds, chunks, i)
	})
	for _, good := range ok {
		if !good {
			return nil
		}
	}
	return chunks
}

// offsetsAt returns, for each bound (ascending indices into lens), the sum of lens before it, and
// the total; ok is false on a negative length.
func offsetsAt(lens []int64, bounds []int) (at []int, total int, ok bool) {
	at = make([]int, len(bounds))
	c := 0
	for j, l := range lens {
		for c < len(bounds) && bounds[c] == j {
			at[c] = total
			c++
		}
		if l < 0 {
			return nil, 0, false
		}
		total += int(l)
	}
	for ; c < len(bounds); c++ {
		at[c] = total
	}
	return at, total, true
}

// splitInput slices input i at the sample bounds into each chunk; false if it is malformed.
func splitInput(in *Input, size int, bounds []int, chunks []chunk, i int) bool {
	n := in.count()
	elem := bounds // element offset of each bound (dense: one value per sample)
	if in.Lengths == nil {
		if n != size {
			return false
		}
	} else {
		var total int
		var ok bool
		if len(in.Lengths) != size {
			return false
		}
		if elem, total, ok = offsetsAt(in.Lengths, bounds); !ok || total != n {
			return false
		}
	}
	var byteAt []int
	if in.Kind == KindBytes {
		var total int
		var ok bool
		if len(in.ByteLens) != n {
			return false
		}
		if byteAt, total, ok = offsetsAt(in.ByteLens, elem); !ok || total != len(in.Bytes) {
			return false
		}
	}
	for c := range chunks {
		lo, hi := elem[c], elem[c+1]
		sub := Input{Kind: in.Kind}
		if in.Lengths != nil {
			sub.Lengths = in.Lengths[bounds[c]:bounds[c+1]:bounds[c+1]]
		}
		switch in.Kind {
		case KindInt64:
			sub.Ints = in.Ints[lo:hi:hi]
		case KindFloat32:
			sub.F32 = in.F32[lo:hi:hi]
		case KindFloat64:
			sub.F64 = in.F64[lo:hi:hi]
		case KindBytes:
			sub.ByteLens = in.ByteLens[lo:hi:hi]
			sub.Bytes = in.Bytes[byteAt[c]:byteAt[c+1]:byteAt[c+1]]
		default:
			return false
		}
		chunks[c].batch.Inputs[i] = sub
	}
	return true
}
