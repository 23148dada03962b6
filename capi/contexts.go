package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

// dedupCounts is what a forward context (pooled or sequence) reports per table.
type dedupCounts interface {
	Unique(t int) int
	Lookups(t int) int
}

// writeCounts writes, for each of nt tables, the distinct IDs then the lookups of ctx into the
// caller's 2·nt int64 values at countsPtr.
func writeCounts(ctx dedupCounts, nt int, countsPtr unsafe.Pointer, n C.int64_t) error {
	counts, err := viewSlice[int64](countsPtr, int64(n), "counts")
	if err != nil {
		return err
	}
	if len(counts) != 2*nt {
		return errs.Invalidf("counts: %d values, need %d", len(counts), 2*nt)
	}
	for t := 0; t < nt; t++ {
		counts[t] = int64(ctx.Unique(t))
		counts[nt+t] = int64(ctx.Lookups(t))
	}
	return nil
}

// gradBuffers views the caller's per-table buffers of a non-fused backward: rowsPtrs[t] (unique[t]
// int64 row indices) and valsPtrs[t] (unique[t]·dims[t] float32 gradients), ntables of each.
func gradBuffers(ctx dedupCounts, dims []int, rowsPtrs, valsPtrs unsafe.Pointer, ntables C.int64_t) ([][]int64, [][]float32, error) {
	nt := len(dims)
	if int(ntables) != nt {
		return nil, nil, errs.Invalidf("backward: %d gradient buffers for %d tables", ntables, nt)
	}
	rp, err := viewSlice[unsafe.Pointer](rowsPtrs, int64(ntables), "grad_rows")
	if err != nil {
		return nil, nil, err
	}
	vp, err := viewSlice[unsafe.Pointer](valsPtrs, int64(ntables), "grad_values")
	if err != nil {
		return nil, nil, err
	}
	rows, vals := make([][]int64, nt), make([][]float32, nt)
	for t, dim := range dims {
		u := int64(ctx.Unique(t))
		if rows[t], err = viewSlice[int64](rp[t], u, "grad_rows"); err != nil {
			return nil, nil, err
		}
		if vals[t], err = viewGrid[float32](vp[t], u, int64(dim), "grad_values"); err != nil {
			return nil, nil, err
		}
		if rows[t] == nil {
			rows[t], vals[t] = []int64{}, []float32{}
		}
	}
	return rows, vals, nil
}

// batchArgs views a KeyedJaggedTensor batch passed as pointer/count pairs (key→feature map, values,
// lengths, optional weights) as an embedding.Batch; a non-null weights pointer with no values is an
// empty weighted batch.
func batchArgs(keyFeaturePtr unsafe.Pointer, nkeys C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	lengthsPtr unsafe.Pointer, nlengths C.int64_t, weightsPtr unsafe.Pointer, nweights C.int64_t) (embedding.Batch, error) {
	var b embedding.Batch
	var err error
	if b.KeyFeature, err = viewSlice[int64](keyFeaturePtr, int64(nkeys), "key_features"); err != nil {
		return b, err
	}
	if b.Values, err = viewSlice[int64](valuesPtr, int64(nvalues), "values"); err != nil {
		return b, err
	}
	if b.Lengths, err = viewSlice[int64](lengthsPtr, int64(nlengths), "lengths"); err != nil {
		return b, err
	}
	if b.Weights, err = optionalSlice[float32](weightsPtr, int64(nweights), "weights"); err != nil {
		return b, err
	}
	if weightsPtr != nil && b.Weights == nil {
		b.Weights = []float32{}
	}
	return b, nil
}

// The forward exports' train argument: an evaluation forward (nothing admitted, IDs without a row
// read the default vector), a training one (IDs counted, admitted, the clock advanced), or the
// recomputation of a training forward in backward (activation checkpointing: an evaluation forward
// whose IDs without a row read zeros, as in the forward it recomputes; embedding.ResolveRecompute).
const (
	forwardEval      = 0
	forwardTrain     = 1
	forwardRecompute = 2
)

// checkForwardMode refuses a train argument other than those three.
func checkForwardMode(train C.int32_t) error {
	if train < forwardEval || train > forwardRecompute {
		return errs.Invalidf("forward: train is %d; it is 0 (eval), 1 (train) or 2 (a recomputation in backward)", train)
	}
	return nil
}

// checkForward checks a forward's mode, and that it has somewhere to put the context it keeps:
// before the forward runs, since a training one changes the tables.
func checkForward(train, keep C.int32_t, ctxOut *C.uintptr_t) error {
	if err := checkForwardMode(train); err != nil {
		return err
	}
	if keep != 0 && ctxOut == nil {
		return errs.Invalidf("forward: null context pointer")
	}
	return nil
}

// forwardInto runs the pooled forward of b into the caller's out buffer (nout floats) and, with
// keep, hands back the context backward needs as a handle in *ctxOut.
func forwardInto(c *embedding.Collection, b embedding.Batch, outPtr unsafe.Pointer, nout C.int64_t, train, keep C.int32_t, ctxOut *C.uintptr_t) error {
	if err := checkForward(train, keep, ctxOut); err != nil {
		return err
	}
	out, err := viewSlice[float32](outPtr, int64(nout), "out")
	if err != nil {
		return err
	}
	b.Recompute = train == forwardRecompute
	ctx, err := c.Forward(b, out, train == forwardTrain, keep != 0)
	if err != nil {
		return err
	}
	if keep != 0 {
		*ctxOut = newHandle(&ebcContext{c: c, ctx: ctx})
	}
	return nil
}
