package main

// A step's all-to-alls, driven from Python (recgo.distributed._exchange.drive): the engine names each
// op (recgo_shard_next), writes its send buffer and splits (recgo_shard_op), and takes what Python's
// torch.distributed all_to_all_single received (recgo_shard_feed).

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

// recgo_shard_next asks a step for its next all-to-all: *done = 1 when there is none; otherwise the
// op's group (0 world, 1 node, 2 rail), element type (*elem: 0 int64, 1 float32, 2 uint8), send
// length and number of splits (the group's size). Fetch its buffers with recgo_shard_op.
//
//export recgo_shard_next
func recgo_shard_next(sh C.uintptr_t, group, elem, nsend, nsplits, done *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, err := lookup[*shard.Step](sh, "shard step")
		if err != nil {
			return err
		}
		op, err := s.X.Next()
		if err != nil {
			return err
		}
		if op == nil {
			*done = 1
			return nil
		}
		*done, *group, *nsplits = 0, C.int64_t(op.Group), C.int64_t(len(op.SendSplits))
		*elem, *nsend = C.int64_t(op.Elem), C.int64_t(op.SendLen())
		return nil
	})
}

// pendingOp resolves a step handle and the op its last recgo_shard_next returned.
func pendingOp(sh C.uintptr_t) (*shard.Step, *shard.Op, error) {
	s, err := lookup[*shard.Step](sh, "shard step")
	if err != nil {
		return nil, nil, err
	}
	op := s.X.Pending()
	if op == nil {
		return nil, nil, errs.Invalidf("shard step: no pending op")
	}
	return s, op, nil
}

// recgo_shard_op writes the pending op's send buffer (nsend elements of its type) and its send and
// receive splits (nsplits int64 each) into the caller's buffers.
//
//export recgo_shard_op
func recgo_shard_op(sh C.uintptr_t, sendPtr unsafe.Pointer, nsend C.int64_t, sendSplitsPtr, recvSplitsPtr unsafe.Pointer, nsplits C.int64_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		_, op, err := pendingOp(sh)
		if err != nil {
			return err
		}
		if int(nsplits) != len(op.SendSplits) {
			return errs.Invalidf("shard op: %d splits, the op has %d", nsplits, len(op.SendSplits))
		}
		ss, err := viewSlice[int64](sendSplitsPtr, int64(nsplits), "send_splits")
		if err != nil {
			return err
		}
		rs, err := viewSlice[int64](recvSplitsPtr, int64(nsplits), "recv_splits")
		if err != nil {
			return err
		}
		copy(ss, op.SendSplits)
		copy(rs, op.RecvSplits)
		if int(nsend) != op.SendLen() {
			return errs.Invalidf("shard op: send buffer of %d for %d values", nsend, op.SendLen())
		}
		switch op.Elem {
		case shard.ElemFloat32: // rows and gradients are built straight into the caller's buffer
			dst, err := viewSlice[float32](sendPtr, int64(nsend), "send")
			if err != nil {
				return err
			}
			return op.WriteFloats(dst)
		case shard.ElemByte:
			return fill(sendPtr, op.SendB, "send")
		}
		return fill(sendPtr, op.SendI, "send")
	})
}

// recvView views the caller's n received elements at p (an empty, non-nil slice for n = 0).
func recvView[E any](p unsafe.Pointer, n C.int64_t) ([]E, error) {
	v, err := viewSlice[E](p, int64(n), "recv")
	if v == nil && err == nil {
		v = []E{}
	}
	return v, err
}

// recgo_shard_feed hands the pending op the n elements it received (of the op's type).
//
//export recgo_shard_feed
func recgo_shard_feed(sh C.uintptr_t, recvPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, op, err := pendingOp(sh)
		if err != nil {
			return err
		}
		switch op.Elem {
		case shard.ElemFloat32:
			v, err := recvView[float32](recvPtr, n)
			if err != nil {
				return err
			}
			return s.X.Feed(nil, v, nil)
		case shard.ElemByte:
			v, err := recvView[byte](recvPtr, n)
			if err != nil {
				return err
			}
			return s.X.Feed(nil, nil, v)
		}
		v, err := recvView[int64](recvPtr, n)
		if err != nil {
			return err
		}
		return s.X.Feed(v, nil, nil)
	})
}
