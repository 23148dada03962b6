package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"context"
	"errors"
	"io"
	"runtime"
	"unsafe"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/pipeline"
	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner"
)

// recgo_pipeline_new starts an input pipeline from a JSON pipeline.Spec over the feature engine
// handle feat, with the remap handle remap (0: none) and the sharded collection handle sharded
// (0: none; FORMAT then also partitions its tables' distinct IDs by owner, for
// recgo_shard_begin_prepared). Free it with recgo_free, which stops and waits for its goroutines.
//
//export recgo_pipeline_new
func recgo_pipeline_new(feat, remap, sharded C.uintptr_t, spec unsafe.Pointer, specLen C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		eng, err := lookup[*feature.Engine](feat, "feature engine")
		if err != nil {
			return err
		}
		var r *planner.Remap
		if remap != 0 {
			if r, err = lookup[*planner.Remap](remap, "remap"); err != nil {
				return err
			}
		}
		var pt *shard.Partitioner
		if sharded != 0 {
			c, err := lookup[*shard.Collection](sharded, "sharded collection")
			if err != nil {
				return err
			}
			pt = c.Partitioner()
		}
		data, err := viewSlice[byte](spec, int64(specLen), "spec")
		if err != nil {
			return err
		}
		p, err := pipeline.Open(context.Background(), data, eng, r, pt)
		if err != nil {
			return err
		}
		return putHandle(out, p)
	})
}

// nextInfo is what recgo_pipeline_next writes: the batch handle (0 at the end of the stream), the
// addresses and counts of its values, lengths, labels and dense matrix, its size, dense width and
// step.
type nextInfo struct {
	Handle, Values, NValues, Lengths, NLengths, Labels, Dense, Size, DenseWidth, Step int64
}

func addr[T any](s []T) int64 {
	if len(s) == 0 {
		return 0
	}
	return int64(uintptr(unsafe.Pointer(&s[0])))
}

// recgo_pipeline_next waits for the next prepared batch and writes its nextInfo (10 int64 values)
// into info; at the end of the stream it writes a zero handle. The batch's memory stays valid until
// its handle is freed with recgo_free (which returns it to the pipeline's pool). A stage's error is
// returned at the step that needed the batch.
//
//export recgo_pipeline_next
func recgo_pipeline_next(h C.uintptr_t, info unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*pipeline.Pipeline](h, "pipeline")
		if err != nil {
			return err
		}
		dst, err := viewSlice[nextInfo](info, 1, "info")
		if err != nil {
			return err
		}
		b, err := p.Next()
		if errors.Is(err, io.EOF) {
			dst[0] = nextInfo{}
			return nil
		}
		if err != nil {
			return err
		}
		dst[0] = nextInfo{Handle: int64(newHandle(b)), Values: addr(b.Values), NValues: int64(len(b.Values)),
			Lengths: addr(b.Lengths), NLengths: int64(len(b.Lengths)), Labels: addr(b.Labels), Dense: addr(b.Dense),
			Size: int64(b.Size), DenseWidth: int64(b.DenseWidth), Step: b.Step}
		return nil
	})
}

// recgo_pipeline_unnext gives back batch, the batch handle the last recgo_pipeline_next wrote, which
// the caller could not take (Python raised KeyboardInterrupt as the call returned): its handle is
// released and the pipeline hands the batch out again at the next call, the position and step as
// before it.
//
//export recgo_pipeline_unnext
func recgo_pipeline_unnext(h, batch C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*pipeline.Pipeline](h, "pipeline")
		if err != nil {
			return err
		}
		b, err := lookup[*pipeline.Prepared](batch, "batch")
		if err != nil {
			return err
		}
		if err := p.Unnext(b); err != nil {
			return err
		}
		deleteHandle(batch)
		return nil
	})
}

// recgo_pipeline_info writes the pipeline's output keys, dense width, source position (after the
// last batch handed out) and stage timings as JSON into buf (the writeJSON convention).
//
//export recgo_pipeline_info
func recgo_pipeline_info(h C.uintptr_t, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*pipeline.Pipeline](h, "pipeline")
		if err != nil {
			return err
		}
		return writeJSON(map[string]any{"keys": p.Keys(), "dense_width": p.DenseWidth(), "position": p.Position(),
			"step": p.Step(), "stats": p.Stats()}, buf, buflen, needed)
	})
}

// recgo_pipeline_goroutines writes the process's goroutine count and the number of running
// pipeline goroutines into out (2 int64 values), for leak checks.
//
//export recgo_pipeline_goroutines
func recgo_pipeline_goroutines(out unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		dst, err := viewSlice[int64](out, 2, "out")
		if err != nil {
			return err
		}
		dst[0], dst[1] = int64(runtime.NumGoroutine()), pipeline.Running()
		return nil
	})
}

// recgo_ebc_forward_prepared is recgo_ebc_forward for a batch the pipeline prepared (handle
// prepared): the values and lengths must be that batch's own memory, and the forward uses the
// batch's per-table dedup (checked against the values) instead of deduplicating again.
//
//export recgo_ebc_forward_prepared
func recgo_ebc_forward_prepared(h, prepared C.uintptr_t, keyFeaturePtr unsafe.Pointer, nkeys C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	lengthsPtr unsafe.Pointer, nlengths C.int64_t, outPtr unsafe.Pointer, nout C.int64_t, train, keep C.int32_t, ctxOut *C.uintptr_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return err
		}
		pb, err := preparedBatch(prepared, valuesPtr, nvalues, lengthsPtr, nlengths)
		if err != nil {
			return err
		}
		b := embedding.Batch{Values: pb.Values, Lengths: pb.Lengths, Dedup: c.MatchDedup(pb.Dedup)}
		if b.KeyFeature, err = viewSlice[int64](keyFeaturePtr, int64(nkeys), "key_features"); err != nil {
			return err
		}
		return forwardInto(c, b, outPtr, nout, train, keep, ctxOut)
	})
}

// preparedBatch looks up the prepared batch handle and checks that the values and lengths are the
// batch's own memory.
func preparedBatch(h C.uintptr_t, valuesPtr unsafe.Pointer, nvalues C.int64_t, lengthsPtr unsafe.Pointer, nlengths C.int64_t) (*pipeline.Prepared, error) {
	pb, err := lookup[*pipeline.Prepared](h, "prepared batch")
	if err != nil {
		return nil, err
	}
	if int64(nvalues) != int64(len(pb.Values)) || int64(nlengths) != int64(len(pb.Lengths)) ||
		int64(uintptr(valuesPtr)) != addr(pb.Values) || int64(uintptr(lengthsPtr)) != addr(pb.Lengths) {
		return nil, errs.Invalidf("forward: the values and lengths are not the prepared batch's own")
	}
	return pb, nil
}

// recgo_shard_begin_prepared is recgo_shard_begin for a batch the pipeline prepared (handle
// prepared; its values and lengths must be the batch's own memory, without weights). When the
// pipeline was given a sharded collection, the step takes each table's distinct IDs (checked
// against the values) and their partition by owner from the batch instead of computing them; the
// partition must have been made for a collection laid out like this one (same world, rank,
// topology, exchange mode, tables and features), else an error. A batch without a partition
// begins as recgo_shard_begin does.
//
//export recgo_shard_begin_prepared
func recgo_shard_begin_prepared(h, prepared C.uintptr_t, keyFeaturePtr unsafe.Pointer, nkeys C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	lengthsPtr unsafe.Pointer, nlengths C.int64_t, stepOut *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*shard.Collection](h, "sharded collection")
		if err != nil {
			return err
		}
		pb, err := preparedBatch(prepared, valuesPtr, nvalues, lengthsPtr, nlengths)
		if err != nil {
			return err
		}
		b, err := batchArgs(keyFeaturePtr, nkeys, valuesPtr, nvalues, lengthsPtr, nlengths, nil, 0)
		if err != nil {
			return err
		}
		s, err := c.BeginPrepared(b, pb.Dedup, pb.Partition)
		if err != nil {
			return err
		}
		return putHandle(stepOut, s)
	})
}
