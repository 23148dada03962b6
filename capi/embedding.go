package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

// ebcContext is the handle target of a forward pass's saved context.
type ebcContext struct {
	c   *embedding.Collection
	ctx *embedding.Context
}

// Close returns the context's buffers to the collection when its handle is freed.
func (x *ebcContext) Close() error {
	x.c.Release(x.ctx)
	x.ctx = nil
	return nil
}

func optConfig(kind C.int32_t, lr, eps, beta1, beta2, wd C.double) embedding.OptimizerConfig {
	return embedding.OptimizerConfig{Kind: embedding.OptimizerKind(kind), LR: float64(lr), Eps: float64(eps),
		Beta1: float64(beta1), Beta2: float64(beta2), WeightDecay: float64(wd)}
}

// recgo_optimizer_check returns the error a collection gives for these fused-optimizer settings (a
// negative learning rate, a beta outside [0, 1), a hyper-parameter the kind does not take), without a
// collection: an optimizer refuses them when it is made, so a change spread over several collections
// is refused before the first takes it.
//
//export recgo_optimizer_check
func recgo_optimizer_check(kind C.int32_t, lr, eps, beta1, beta2, wd C.double, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error { return optConfig(kind, lr, eps, beta1, beta2, wd).Validate() })
}

// featureArgs reads nfeat features: names (lines of featureNames), table indices and pooling codes
// (int64 arrays); the engine validates them against its tables.
func featureArgs(nfeat C.int64_t, featureNames *C.char, featTablePtr, featPoolPtr unsafe.Pointer) ([]embedding.Feature, error) {
	featTable, err := viewSlice[int64](featTablePtr, int64(nfeat), "feature_tables")
	if err != nil {
		return nil, err
	}
	featPool, err := viewSlice[int64](featPoolPtr, int64(nfeat), "feature_pooling")
	if err != nil {
		return nil, err
	}
	fnames, err := splitNames(goString(featureNames), int(nfeat), "feature names")
	if err != nil {
		return nil, err
	}
	feats := make([]embedding.Feature, nfeat)
	for j := range feats {
		feats[j] = embedding.Feature{Name: fnames[j], Table: int(featTable[j]), Pooling: embedding.Pooling(featPool[j])}
	}
	return feats, nil
}

// recgo_ebc_new builds an embedding-bag collection. Table i has rows[i] rows of dims[i] values and is
// named by line i of tableNames; when builders is non-null and builders[i] != 0, that handle's
// embedding.TableBuilder builds table i instead (a dynamic-ID table; rows[i] is then ignored).
// Feature j (line j of featureNames) looks up table featTable[j] with pooling featPool[j] (0 sum, 1 mean).
//
//export recgo_ebc_new
func recgo_ebc_new(ntables C.int64_t, tableNames *C.char, rowsPtr, dimsPtr, buildersPtr unsafe.Pointer,
	kind C.int32_t, lr, eps, beta1, beta2, wd C.double,
	nfeat C.int64_t, featureNames *C.char, featTablePtr, featPoolPtr unsafe.Pointer,
	out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		rows, err := viewSlice[int64](rowsPtr, int64(ntables), "rows")
		if err != nil {
			return err
		}
		dims, err := viewSlice[int64](dimsPtr, int64(ntables), "dims")
		if err != nil {
			return err
		}
		builders, err := optionalSlice[uintptr](buildersPtr, int64(ntables), "builders")
		if err != nil {
			return err
		}
		feats, err := featureArgs(nfeat, featureNames, featTablePtr, featPoolPtr)
		if err != nil {
			return err
		}
		tnames, err := splitNames(goString(tableNames), int(ntables), "table names")
		if err != nil {
			return err
		}
		opt := optConfig(kind, lr, eps, beta1, beta2, wd)
		tables := make([]*embedding.Table, 0, ntables)
		closeAll := func() {
			for _, t := range tables {
				_ = t.Close()
			}
		}
		for i := range rows {
			var t *embedding.Table
			if b, berr := tableBuilder(builders, i, tnames[i]); berr != nil || b != nil {
				if err = berr; err == nil {
					t, err = b.BuildTable(tnames[i], int(dims[i]), opt)
				}
			} else {
				t, err = embedding.NewFixedTable(tnames[i], rows[i], int(dims[i]), opt)
			}
			if err != nil {
				closeAll()
				return err
			}
			tables = append(tables, t)
		}
		for _, f := range feats {
			if f.Table < 0 || f.Table >= int(ntables) {
				closeAll()
				return errs.Invalidf("feature %q: table index %d of %d", f.Name, f.Table, ntables)
			}
		}
		c, err := embedding.NewCollection(tables, feats)
		if err != nil {
			closeAll()
			return err
		}
		return putHandle(out, c)
	})
}

// splitNames splits newline-separated names and checks the count.
func splitNames(s string, n int, what string) ([]string, error) {
	if n == 0 {
		return nil, nil
	}
	names := strings.Split(s, "\n")
	if len(names) != n {
		return nil, errs.Invalidf("%s: got %d, need %d", what, len(names), n)
	}
	return names, nil
}

// The memory kinds of recgo_ebc_table_memory.
const (
	tableMemWeights = 0 // float32 weights, *n values, *stride per row
	tableMemState   = 1 // float32 optimizer state, *stride values per row
	tableMemStep    = 2 // the step counter, one int64
)

// recgo_ebc_table_memory reports where table t's memory lives: which = tableMemWeights (float32, *n
// values, *stride per row; the trainable rows, without a dynamic table's default row), tableMemState (float32, *stride = values per row) or tableMemStep (one int64).
//
//export recgo_ebc_table_memory
func recgo_ebc_table_memory(h C.uintptr_t, t C.int64_t, which C.int32_t, ptr *C.uintptr_t, n, stride *C.int64_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return err
		}
		if t < 0 || int(t) >= len(c.Tables) {
			return errs.NotFoundf("table index %d of %d", t, len(c.Tables))
		}
		tb := c.Tables[t]
		var p unsafe.Pointer
		switch which {
		case tableMemWeights: // the trainable rows only: a dynamic table's default row is not part of the parameter
			*n, *stride = C.int64_t(tb.TrainableRows()*int64(tb.Stride)), C.int64_t(tb.Stride)
			if len(tb.Data) > 0 {
				p = unsafe.Pointer(&tb.Data[0])
			}
		case tableMemState:
			*n, *stride = C.int64_t(tb.TrainableRows()*int64(tb.StateWidth())), C.int64_t(tb.StateWidth())
			if len(tb.State) > 0 {
				p = unsafe.Pointer(&tb.State[0])
			}
		case tableMemStep:
			*n, *stride = 1, 1
			p = unsafe.Pointer(&tb.Step[0])
		default:
			return errs.Invalidf("table memory: unknown kind %d", which)
		}
		*ptr = C.uintptr_t(uintptr(p))
		return nil
	})
}

// recgo_ebc_forward pools a batch into out ([B, width] float32); keyFeature holds, per key, the
// collection feature it feeds or -1 for a key no feature reads (see embedding.Batch). With keep != 0 it writes the handle
// of the context backward needs into ctxOut (free it with recgo_free, or let backward use it).
// train is 0 (eval), 1 (train) or 2 (the recomputation of a training forward in backward; see
// forwardRecompute).
//
//export recgo_ebc_forward
func recgo_ebc_forward(h C.uintptr_t, keyFeaturePtr unsafe.Pointer, nkeys C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	lengthsPtr unsafe.Pointer, nlengths C.int64_t, weightsPtr unsafe.Pointer, nweights C.int64_t,
	outPtr unsafe.Pointer, nout C.int64_t, train, keep C.int32_t, ctxOut *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return err
		}
		b, err := batchArgs(keyFeaturePtr, nkeys, valuesPtr, nvalues, lengthsPtr, nlengths, weightsPtr, nweights)
		if err != nil {
			return err
		}
		return forwardInto(c, b, outPtr, nout, train, keep, ctxOut)
	})
}

// recgo_ebc_context_counts writes, for each table, the number of distinct IDs then the number of
// lookups of the context's batch into counts (2·tables int64 values).
//
//export recgo_ebc_context_counts
func recgo_ebc_context_counts(ctxh C.uintptr_t, countsPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		x, err := lookup[*ebcContext](ctxh, "forward context")
		if err != nil {
			return err
		}
		return writeCounts(x.ctx, len(x.c.Tables), countsPtr, n)
	})
}

// recgo_ebc_backward runs backward for a forward context: with fused != 0 it applies the fused
// optimizers (the buffer arrays are ignored); otherwise, for each table t, it writes the distinct
// rows' indices into the int64 buffer rowsPtrs[t] and their gradients into the float32 buffer
// valsPtrs[t] (sizes from recgo_ebc_context_counts: unique[t] and unique[t]·dim[t] values). It
// leaves out the tables whose byte in skipPtr (nskip bytes, one per table; NULL: none) is not 0,
// the frozen ones: a fused backward steps none of them, an unfused one leaves their buffers unwritten.
//
//export recgo_ebc_backward
func recgo_ebc_backward(ctxh C.uintptr_t, fused C.int32_t, gradPtr unsafe.Pointer, ngrad C.int64_t,
	rowsPtrs, valsPtrs unsafe.Pointer, ntables C.int64_t, skipPtr unsafe.Pointer, nskip C.int64_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		x, err := lookup[*ebcContext](ctxh, "forward context")
		if err != nil {
			return err
		}
		if x.ctx == nil {
			return errs.Invalidf("forward context: already released")
		}
		grad, err := viewSlice[float32](gradPtr, int64(ngrad), "grad_output")
		if err != nil {
			return err
		}
		skip, err := boolFlags(skipPtr, nskip, "skip") // nil: no table skipped
		if err != nil {
			return err
		}
		if fused != 0 {
			return x.c.BackwardSome(x.ctx, grad, nil, nil, skip)
		}
		dims := make([]int, len(x.c.Tables))
		for t, tb := range x.c.Tables {
			dims[t] = tb.Dim
		}
		rows, vals, err := gradBuffers(x.ctx, dims, rowsPtrs, valsPtrs, ntables)
		if err != nil {
			return err
		}
		return x.c.BackwardSome(x.ctx, grad, rows, vals, skip)
	})
}

// recgo_ebc_set_optimizer changes every table's optimizer hyper-parameters (the kind must stay).
//
//export recgo_ebc_set_optimizer
func recgo_ebc_set_optimizer(h C.uintptr_t, kind C.int32_t, lr, eps, beta1, beta2, wd C.double, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return err
		}
		return c.SetOptimizer(optConfig(kind, lr, eps, beta1, beta2, wd))
	})
}

// recgo_ebc_stage_times writes the nanoseconds spent so far in each embedding stage (dedup, pool,
// group, update) into out (4 int64 values).
//
//export recgo_ebc_stage_times
func recgo_ebc_stage_times(outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		out, err := viewSlice[int64](outPtr, int64(n), "out")
		if err != nil {
			return err
		}
		st := embedding.StageTimes()
		if len(out) != len(st) {
			return errs.Invalidf("stage times: %d values, need %d", len(out), len(st))
		}
		copy(out, st[:])
		return nil
	})
}

// recgo_ebc_set_dedup turns the deduplication of the collection's lookups on (on != 0, the
// default) or off (embedding.Options.NoDedup), waiting for running passes.
//
//export recgo_ebc_set_dedup
func recgo_ebc_set_dedup(h C.uintptr_t, on C.int32_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return err
		}
		return c.SetDedup(on != 0)
	})
}

// tableBuilder returns the embedding.TableBuilder whose handle is builders[i] (a dynamic table's),
// or nil when builders is nil or builders[i] is 0 (a fixed table).
func tableBuilder(builders []uintptr, i int, table string) (embedding.TableBuilder, error) {
	if builders == nil || builders[i] == 0 {
		return nil, nil
	}
	return lookup[embedding.TableBuilder](C.uintptr_t(builders[i]), fmt.Sprintf("table %q builder", table))
}
