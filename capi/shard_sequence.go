package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/errs"
)

// recgo_shard_seq_begin starts a step of sequence (unpooled) lookups on this rank's batch (a KJT as
// in recgo_ec_forward; no weights) over a sharded collection and writes two handles: stepOut, the
// step's exchange (run it with recgo_shard_next / _op / _feed; read its recgo_shard_counters and,
// after a non-fused backward, recgo_shard_owner_grads), and seqOut, its sequence side
// (recgo_shard_seq_gather / _backward). Free both.
//
//export recgo_shard_seq_begin
func recgo_shard_seq_begin(h C.uintptr_t, keyFeaturePtr unsafe.Pointer, nkeys C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	lengthsPtr unsafe.Pointer, nlengths C.int64_t, stepOut, seqOut *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*shard.Collection](h, "sharded collection")
		if err != nil {
			return err
		}
		b, err := batchArgs(keyFeaturePtr, nkeys, valuesPtr, nvalues, lengthsPtr, nlengths, nil, 0)
		if err != nil {
			return err
		}
		if stepOut == nil || seqOut == nil { // before the step begins: nothing to undo
			return errs.Invalidf("sequence step: null output pointer")
		}
		q, err := c.BeginSequence(b)
		if err != nil {
			return err
		}
		*stepOut = newHandle(q.Step)
		*seqOut = newHandle(q)
		return nil
	})
}

// recgo_shard_seq_gather writes one row per lookup once the step's forward exchange ran: per key of
// the batch, in key order, its n_k × D_k float32 values (n values in all).
//
//export recgo_shard_seq_gather
func recgo_shard_seq_gather(sq C.uintptr_t, outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		q, out, err := lookupView[*shard.SequenceStep, float32](sq, "sequence shard step", outPtr, n, "out")
		if err != nil {
			return err
		}
		return q.Gather(out)
	})
}

// recgo_shard_seq_backward merges scale × the per-lookup gradient (recgo_shard_seq_gather's layout, n float32
// values) per distinct ID and queues the backward exchange on the step (fused != 0: the owners apply
// their optimizers at its end). unusedPtr (nunused bytes, one per table in config order; NULL:
// none) marks the tables none of whose outputs this rank's loss used: a table no rank used takes
// no step (recgo_shard_skipped tells which, after the exchange). frozenPtr (nfrozen bytes, the same
// order; NULL: none) marks the frozen tables, which no rank steps; every rank must freeze the same.
//
//export recgo_shard_seq_backward
func recgo_shard_seq_backward(sq C.uintptr_t, gradPtr unsafe.Pointer, n C.int64_t, scale C.double, fused C.int32_t,
	unusedPtr unsafe.Pointer, nunused C.int64_t, frozenPtr unsafe.Pointer, nfrozen C.int64_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		q, g, err := lookupView[*shard.SequenceStep, float32](sq, "sequence shard step", gradPtr, n, "grad_output")
		if err != nil {
			return err
		}
		f, err := gradScale(scale)
		if err != nil {
			return err
		}
		unused, err := boolFlags(unusedPtr, nunused, "unused") // nil: every table used
		if err != nil {
			return err
		}
		frozen, err := boolFlags(frozenPtr, nfrozen, "frozen") // nil: none frozen
		if err != nil {
			return err
		}
		return q.BackwardSome(g, f, fused != 0, shard.Skip{Unused: unused, Frozen: frozen})
	})
}

// recgo_shard_skipped writes, once a step's backward exchange ran, one byte per table (n, in config
// order): 1 where the table took no step because no rank's loss used its outputs, or it is frozen.
//
//export recgo_shard_skipped
func recgo_shard_skipped(sh C.uintptr_t, outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, out, err := lookupView[*shard.Step, byte](sh, "shard step", outPtr, n, "out")
		if err != nil {
			return err
		}
		skipped, err := s.Skipped()
		if err != nil {
			return err
		}
		if len(out) != len(skipped) {
			return errs.Invalidf("skipped: %d bytes for %d tables", len(out), len(skipped))
		}
		for t, k := range skipped {
			out[t] = 0
			if k {
				out[t] = 1
			}
		}
		return nil
	})
}
