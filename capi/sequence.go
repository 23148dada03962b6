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

// ecContext is the handle target of a sequence forward pass's saved context.
type ecContext struct {
	s   *embedding.SequenceCollection
	ctx *embedding.Context
}

// Close returns the context's buffers to the collection when its handle is freed.
func (x *ecContext) Close() error {
	x.s.Release(x.ctx)
	x.ctx = nil
	return nil
}

// recgo_ec_new builds a sequence (unpooled) collection over the tables of the embedding-bag
// collection ebc: feature j (line j of featureNames) looks up ebc's table featTable[j]. The
// tables' rows, optimizer state and step counters are shared with ebc, which must outlive it.
// dedup == 0 turns off the deduplication of its lookups (embedding.Options.NoDedup).
//
//export recgo_ec_new
func recgo_ec_new(ebc C.uintptr_t, nfeat C.int64_t, featureNames *C.char, featTablePtr unsafe.Pointer, dedup C.int32_t,
	out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](ebc, "embedding collection")
		if err != nil {
			return err
		}
		featTable, err := viewSlice[int64](featTablePtr, int64(nfeat), "feature_tables")
		if err != nil {
			return err
		}
		names, err := splitNames(goString(featureNames), int(nfeat), "feature names")
		if err != nil {
			return err
		}
		feats := make([]embedding.Feature, len(featTable))
		for j := range feats {
			feats[j] = embedding.Feature{Name: names[j], Table: int(featTable[j])}
		}
		s, err := embedding.NewSequenceCollectionWithOptions(c, feats, embedding.Options{NoDedup: dedup == 0})
		if err != nil {
			return err
		}
		return putHandle(out, s)
	})
}

// recgo_ec_tables writes the ebc table index of each table the sequence collection uses, in the
// order of its counts and gradients, into out (n int64 values; n must equal their number).
//
//export recgo_ec_tables
func recgo_ec_tables(h C.uintptr_t, outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, err := lookup[*embedding.SequenceCollection](h, "sequence collection")
		if err != nil {
			return err
		}
		tables := s.Tables()
		out, err := viewSlice[int64](outPtr, int64(n), "out")
		if err != nil {
			return err
		}
		if len(out) != len(tables) {
			return errs.Invalidf("sequence tables: %d values, need %d", len(out), len(tables))
		}
		for i, t := range tables {
			out[i] = int64(t)
		}
		return nil
	})
}

// recgo_ec_forward gathers one row per ID of a KJT batch (keys mapped to features by keyFeature,
// F·B lengths) into one float32 buffer per key: outPtrs[k] holds outLens[k] values, which must be
// key k's IDs times its dim (n_k·dim_k, KJT order). With keep != 0 it writes the handle of the
// context backward needs into ctxOut.
// train is 0 (eval), 1 (train) or 2 (the recomputation of a training forward in backward; see
// forwardRecompute).
//
//export recgo_ec_forward
func recgo_ec_forward(h C.uintptr_t, keyFeaturePtr unsafe.Pointer, nkeys C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	lengthsPtr unsafe.Pointer, nlengths C.int64_t, outPtrs, outLensPtr unsafe.Pointer, nouts C.int64_t, train, keep C.int32_t,
	ctxOut *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, err := lookup[*embedding.SequenceCollection](h, "sequence collection")
		if err != nil {
			return err
		}
		b, err := batchArgs(keyFeaturePtr, nkeys, valuesPtr, nvalues, lengthsPtr, nlengths, nil, 0)
		if err != nil {
			return err
		}
		ptrs, err := viewSlice[unsafe.Pointer](outPtrs, int64(nouts), "outputs")
		if err != nil {
			return err
		}
		lens, err := viewSlice[int64](outLensPtr, int64(nouts), "output lengths")
		if err != nil {
			return err
		}
		outs := make([][]float32, len(ptrs))
		for k := range outs {
			if outs[k], err = viewSlice[float32](ptrs[k], lens[k], "output"); err != nil {
				return err
			}
		}
		if err := checkForward(train, keep, ctxOut); err != nil {
			return err
		}
		b.Recompute = train == forwardRecompute
		ctx, err := s.Forward(b, outs, train == forwardTrain, keep != 0)
		if err != nil {
			return err
		}
		if keep != 0 {
			*ctxOut = newHandle(&ecContext{s: s, ctx: ctx})
		}
		return nil
	})
}

// liveECContext is the sequence forward context behind ctxh, or an error when the handle is not
// one or its context was released.
func liveECContext(ctxh C.uintptr_t) (*ecContext, error) {
	x, err := lookup[*ecContext](ctxh, "sequence forward context")
	if err != nil {
		return nil, err
	}
	if x.ctx == nil {
		return nil, errs.Invalidf("sequence forward context: already released")
	}
	return x, nil
}

// recgo_ec_context_counts writes, for each table of the sequence collection (recgo_ec_tables
// order), the number of distinct IDs then the number of lookups of the context's batch into counts
// (2·tables int64 values).
//
//export recgo_ec_context_counts
func recgo_ec_context_counts(ctxh C.uintptr_t, countsPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		x, err := liveECContext(ctxh)
		if err != nil {
			return err
		}
		return writeCounts(x.ctx, len(x.s.Tables()), countsPtr, n)
	})
}

// recgo_ec_backward runs backward for a sequence forward context: with fused != 0 it applies the
// fused optimizer of each used table (the buffer arrays are ignored); otherwise, for each table t
// in recgo_ec_tables order, it writes the distinct rows' indices into the int64 buffer rowsPtrs[t]
// and their merged gradients into the float32 buffer valsPtrs[t] (sizes from
// recgo_ec_context_counts: unique[t] and unique[t]·dim[t] values). A fused backward leaves out
// the tables whose byte in skipPtr (nskip bytes, one per table in recgo_ec_tables order; NULL:
// none) is not 0: the loss used none of their outputs, so they take no step.
//
//export recgo_ec_backward
func recgo_ec_backward(ctxh C.uintptr_t, fused C.int32_t, gradPtr unsafe.Pointer, ngrad C.int64_t,
	rowsPtrs, valsPtrs unsafe.Pointer, ntables C.int64_t, skipPtr unsafe.Pointer, nskip C.int64_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		x, err := liveECContext(ctxh)
		if err != nil {
			return err
		}
		grad, err := viewSlice[float32](gradPtr, int64(ngrad), "grad_output")
		if err != nil {
			return err
		}
		if grad == nil {
			grad = []float32{}
		}
		if fused != 0 {
			skip, err := boolFlags(skipPtr, nskip, "skip") // nil: no table skipped
			if err != nil {
				return err
			}
			return x.s.BackwardSome(x.ctx, grad, nil, nil, skip)
		}
		dims := make([]int, len(x.s.Tables()))
		for i := range dims {
			dims[i] = x.s.TableDim(i)
		}
		rows, vals, err := gradBuffers(x.ctx, dims, rowsPtrs, valsPtrs, ntables)
		if err != nil {
			return err
		}
		return x.s.Backward(x.ctx, grad, rows, vals)
	})
}

// recgo_ebc_merged_update opens (begin != 0) or closes (begin == 0) a merged-update scope on the
// embedding-bag collection's tables (embedding.Collection.BeginMergedUpdate / EndMergedUpdate):
// inside it fused backwards, pooled or sequence, sum their merged gradients per row, and closing it
// applies one optimizer step per used table.
//
//export recgo_ebc_merged_update
func recgo_ebc_merged_update(h C.uintptr_t, begin C.int32_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return err
		}
		if begin != 0 {
			return c.BeginMergedUpdate()
		}
		return c.EndMergedUpdate()
	})
}
