package feature

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/offheap"
	"unsafe"
)

// Output is a result in KeyedJaggedTensor layout (Values feature-major, then Lengths with entry
// f·B+b, then Weights when any output feature is weighted) in one buffer outside the Go heap, so
// Python can wrap it as tensors without a copy. Close hands the memory back to a small pool, so the
// next batch's output reuses already-mapped pages.
type Output struct {
	buf     *offheap.Buffer
	Values  []int64
	Lengths []int64
	Weights []float32 // nil when no output feature is weighted; else NumValues weights
}

// outputPool keeps a few freed output buffers per power-of-two size class.
var outputPool = struct {
	sync.Mutex
	free map[int][]*offheap.Buffer
}{free: map[int][]*offheap.Buffer{}}

const outputsPerClass = 2

// Assemble copies the result into a pooled off-heap Output and releases the result's buffers.
func (r *Result) Assemble() (*Output, error) {
	nv, nl := r.NumValues(), len(r.keys)*r.size
	words := nv + nl
	weighted := r.Weighted()
	if weighted {
		words += (nv + 1) / 2
	}
	if r.limit > 0 && int64(words) > r.limit {
		what := fmt.Sprintf("%d values and %d lengths", nv, nl)
		if weighted {
			what = fmt.Sprintf("%d values, %d lengths and %d weights (two to a word)", nv, nl, nv)
		}
		return nil, errs.Capacityf("feature output: %s take %d 8-byte words, past the limit of %d per buffer (max_values); raise max_values or split the batch", what, words, r.limit)
	}
	k := bits.Len(uint(max(words, 1) - 1))
	outputPool.Lock()
	var buf *offheap.Buffer
	if list := outputPool.free[k]; len(list) > 0 {
		buf, outputPool.free[k] = list[len(list)-1], list[:len(list)-1]
	}
	outputPool.Unlock()
	if buf == nil {
		var err error
		if buf, err = offheap.Alloc(8 << k); err != nil {
			return nil, errs.Capacityf("feature output of %d values: %v", nv, err)
		}
	}
	all := offheap.AsInt64s(buf)
	o := &Output{buf: buf, Values: all[:nv:nv], Lengths: all[nv : nv+nl : nv+nl]}
	if err := r.CopyTo(o.Values, o.Lengths); err != nil {
		_ = o.Close()
		return nil, err
	}
	if weighted {
		o.Weights = []float32{}
		if nv > 0 {
			o.Weights = unsafe.Slice((*float32)(unsafe.Pointer(&all[nv+nl])), nv)
		}
		if err := r.CopyWeightsTo(o.Weights); err != nil {
			_ = o.Close()
			return nil, err
		}
	}
	r.Release()
	return o, nil
}

// Close returns the buffer to the pool (or unmaps it when the pool is full). The slices must not
// be used afterwards.
func (o *Output) Close() error {
	buf := o.buf
	o.buf, o.Values, o.Lengths, o.Weights = nil, nil, nil, nil
	if buf == nil || buf.Len() == 0 {
		return nil
	}
	k := bits.Len(uint(buf.Len()/8)) - 1
	outputPool.Lock()
	if len(outputPool.free[k]) < outputsPerClass {
		outputPool.free[k] = append(outputPool.free[k], buf)
		buf = nil
	}
	outputPool.Unlock()
	if buf != nil {
		return buf.Free()
	}
	return nil
}
