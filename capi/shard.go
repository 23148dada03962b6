package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"math"
	"slices"
	"unsafe"

	"github.com/recgo/recgo/engine/dynamic"
	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/errs"
)

// recgo_shard_new builds rank's part of a sharded embedding-bag collection over a world of
// nodes × perNode ranks exchanging in mode (0 flat, 1 hierarchical). Table i (line i of tableNames)
// has rows[i] × dims[i] values, sharding kinds[i] (0 hash, 1 table-wise on rank ranks[i],
// 2 row-wise, 3 data-parallel) and owner-pooling return returns[i] (0 auto, 1 rows, 2 pooled);
// features as in recgo_ebc_new. When builders is non-null and builders[i] != 0, table i is a
// dynamic-ID table whose shards that builder (recgo_dynamic_builder_new) builds on every rank (hash
// or table-wise; rows[i] is then ignored). splits is null (every row-wise table split evenly) or
// ntables × world int64, table-major: table i's rows per rank in rank order for a row-wise table
// (all zeros: the even split), all zeros for a table of another kind.
//
//export recgo_shard_new
func recgo_shard_new(nodes, perNode, rank, mode C.int64_t, ntables C.int64_t, tableNames *C.char,
	rowsPtr, dimsPtr, kindsPtr, ranksPtr, returnsPtr, buildersPtr, splitsPtr unsafe.Pointer, kind C.int32_t, lr, eps, beta1, beta2, wd C.double,
	nfeat C.int64_t, featureNames *C.char, featTablePtr, featPoolPtr unsafe.Pointer,
	out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		var cols [5][]int64
		for i, p := range []unsafe.Pointer{rowsPtr, dimsPtr, kindsPtr, ranksPtr, returnsPtr} {
			v, err := viewSlice[int64](p, int64(ntables), "table arrays")
			if err != nil {
				return err
			}
			cols[i] = v
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
		if nodes <= 0 || perNode <= 0 || nodes > 1<<16 || perNode > 1<<16 {
			return errs.Invalidf("topology: %d nodes × %d ranks per node", nodes, perNode)
		}
		world := int(nodes * perNode)
		nsplits, err := gridSize(int64(ntables), int64(world), "splits")
		if err != nil {
			return err
		}
		splits, err := optionalSlice[int64](splitsPtr, nsplits, "splits")
		if err != nil {
			return err
		}
		topo, err := shard.NewTopology(int(nodes), int(perNode), world)
		if err != nil {
			return err
		}
		layouts := make([]*shard.Layout, ntables)
		for i := range layouts {
			if layouts[i], err = tableLayout(tnames[i], cols, i, builders, rowSplit(splits, i, world), world); err != nil {
				return err
			}
		}
		c, err := shard.NewCollection(layouts, topo, int(rank), shard.Mode(mode), optConfig(kind, lr, eps, beta1, beta2, wd), feats)
		if err != nil {
			return err
		}
		returns := make([]shard.Return, ntables)
		for i, r := range cols[4] {
			returns[i] = shard.Return(r)
		}
		if err := c.SetReturns(returns); err != nil {
			_ = c.Close()
			return err
		}
		return putHandle(out, c)
	})
}

// rowSplit is table i's row split from recgo_shard_new's splits: nil when there are none or its
// row is all zeros (the even split, or a table of another kind).
func rowSplit(splits []int64, i, world int) []int64 {
	if splits == nil {
		return nil
	}
	row := splits[i*world : (i+1)*world]
	if slices.ContainsFunc(row, func(n int64) bool { return n != 0 }) {
		return row
	}
	return nil
}

// tableLayout builds table i's layout from recgo_shard_new's per-table columns (rows, dims, kinds,
// ranks), its builder (a dynamic-ID table's) and its row split (row-wise tables only).
func tableLayout(name string, cols [5][]int64, i int, builders []uintptr, split []int64, world int) (*shard.Layout, error) {
	b, err := tableBuilder(builders, i, name)
	if err != nil {
		return nil, err
	}
	kind, dim, trank := shard.Kind(cols[2][i]), int(cols[1][i]), int(cols[3][i])
	switch {
	case split != nil && b != nil:
		return nil, errs.Invalidf("table %q: a row split is given for a dynamic-ID table, whose IDs have no rows to split", name)
	case split != nil && kind != shard.RowWise:
		return nil, errs.Invalidf("table %q: a row split is given, but the table is sharded %s, not row_wise", name, kind)
	case b != nil:
		return shard.NewDynamicLayout(name, dim, kind, trank, world, b)
	case kind == shard.RowWise:
		return shard.NewRowWiseLayout(name, cols[0][i], dim, world, split)
	}
	return shard.NewLayout(name, cols[0][i], dim, kind, trank, world)
}

// recgo_shard_set_training sets whether the steps begun from now on train (train 1), evaluate
// (train 0: dynamic tables then admit no ID; see shard.Collection.SetTraining) or recompute a
// training step's forward in backward (train 2: an evaluation whose dynamic IDs without a row read
// zeros; shard.Collection.SetRecompute).
//
//export recgo_shard_set_training
func recgo_shard_set_training(h C.uintptr_t, train C.int32_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*shard.Collection](h, "sharded collection")
		if err != nil {
			return err
		}
		if err := checkForwardMode(train); err != nil {
			return err
		}
		c.SetTraining(train == forwardTrain)
		c.SetRecompute(train == forwardRecompute)
		return nil
	})
}

// recgo_shard_set_pad_tables sizes the first op of every later drive for n tables at least (the
// largest table count of the collections sharing the groups; see shard.Collection.SetPadTables).
//
//export recgo_shard_set_pad_tables
func recgo_shard_set_pad_tables(h C.uintptr_t, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*shard.Collection](h, "sharded collection")
		if err != nil {
			return err
		}
		return c.SetPadTables(int(n))
	})
}

// recgo_shard_set_optimizer changes the hyper-parameters of every shard's fused optimizer (the kind
// must stay), between steps.
//
//export recgo_shard_set_optimizer
func recgo_shard_set_optimizer(h C.uintptr_t, kind C.int32_t, lr, eps, beta1, beta2, wd C.double, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*shard.Collection](h, "sharded collection")
		if err != nil {
			return err
		}
		return c.SetOptimizer(optConfig(kind, lr, eps, beta1, beta2, wd))
	})
}

func shardTable(h C.uintptr_t, t C.int64_t) (*shard.Collection, int, error) {
	c, err := lookup[*shard.Collection](h, "sharded collection")
	if err != nil {
		return nil, 0, err
	}
	if t < 0 || int(t) >= len(c.Layouts) {
		return nil, 0, errs.NotFoundf("table index %d of %d", t, len(c.Layouts))
	}
	return c, int(t), nil
}

// shardTableIDs is shardTable plus views of the caller's n IDs at idsPtr and n int64 results at
// outPtr (named outName).
func shardTableIDs(h C.uintptr_t, t C.int64_t, idsPtr unsafe.Pointer, n C.int64_t, outPtr unsafe.Pointer, outName string) (
	*shard.Collection, *shard.Layout, []int64, []int64, error) {
	c, ti, err := shardTable(h, t)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ids, err := viewSlice[int64](idsPtr, int64(n), "ids")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	out, err := viewSlice[int64](outPtr, int64(n), outName)
	return c, c.Layouts[ti], ids, out, err
}

// recgo_shard_table_memory reports where this rank's shard of table t lives, as
// recgo_ebc_table_memory does; *localRows is the number of the shard's rows that hold IDs (a
// dynamic table's: its row bound).
//
//export recgo_shard_table_memory
func recgo_shard_table_memory(h C.uintptr_t, t C.int64_t, which C.int32_t, ptr *C.uintptr_t, n, stride, localRows *C.int64_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, ti, err := shardTable(h, t)
		if err != nil {
			return err
		}
		tb := c.Shards[ti]
		*localRows = C.int64_t(c.Layouts[ti].LocalRows(c.Rank))
		if d := dynamic.Of(tb); d != nil { // its row bound: the rows a training step may give out
			*localRows = C.int64_t(d.Config().MaxRows)
		}
		var p unsafe.Pointer
		switch which {
		case 0:
			*n, *stride, p = C.int64_t(len(tb.Data)), C.int64_t(tb.Stride), unsafe.Pointer(&tb.Data[0])
		case 1:
			*n, *stride = C.int64_t(len(tb.State)), C.int64_t(tb.StateWidth())
			if len(tb.State) > 0 {
				p = unsafe.Pointer(&tb.State[0])
			}
		case 2:
			*n, *stride, p = 1, 1, unsafe.Pointer(&tb.Step[0])
		default:
			return errs.Invalidf("table memory: unknown kind %d", which)
		}
		*ptr = C.uintptr_t(uintptr(p))
		return nil
	})
}

// recgo_shard_local_ids writes the IDs of this rank's shard rows of table t, in row order, into out
// (n must be the shard's local row count).
//
//export recgo_shard_local_ids
func recgo_shard_local_ids(h C.uintptr_t, t C.int64_t, outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, ti, err := shardTable(h, t)
		if err != nil {
			return err
		}
		ids := c.Layouts[ti].LocalIDs(c.Rank)
		if int64(n) != int64(len(ids)) {
			return errs.Invalidf("local ids: buffer of %d for %d rows", n, len(ids))
		}
		return fill(outPtr, ids, "out")
	})
}

// recgo_shard_locate writes, for each of n IDs of table t, its row in this rank's shard or -1 when
// another rank holds it (checkpoint loading onto any world size).
//
//export recgo_shard_locate
func recgo_shard_locate(h C.uintptr_t, t C.int64_t, idsPtr unsafe.Pointer, n C.int64_t, rowsPtr unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, l, ids, rows, err := shardTableIDs(h, t, idsPtr, n, rowsPtr, "rows")
		if err != nil {
			return err
		}
		return l.Locate(c.Rank, ids, rows)
	})
}

// recgo_shard_begin starts a step on this rank's batch (a KJT as in recgo_ebc_forward) and writes
// the step's handle into stepOut; run its exchange with recgo_shard_next / _op / _feed.
//
//export recgo_shard_begin
func recgo_shard_begin(h C.uintptr_t, keyFeaturePtr unsafe.Pointer, nkeys C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	lengthsPtr unsafe.Pointer, nlengths C.int64_t, weightsPtr unsafe.Pointer, nweights C.int64_t,
	stepOut *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*shard.Collection](h, "sharded collection")
		if err != nil {
			return err
		}
		b, err := batchArgs(keyFeaturePtr, nkeys, valuesPtr, nvalues, lengthsPtr, nlengths, weightsPtr, nweights)
		if err != nil {
			return err
		}
		s, err := c.Begin(b)
		if err != nil {
			return err
		}
		return putHandle(stepOut, s)
	})
}

// recgo_shard_abandon writes into stepOut the handle of a step that refuses this rank's batch for
// the reason (n UTF-8 bytes) its checks gave, before or in recgo_shard_begin (sequence 1: in
// recgo_shard_seq_begin): drive it as any step; its ops tell every rank to stop the step and it
// ends with that reason's error, while the peers' drives fail naming this rank.
//
//export recgo_shard_abandon
func recgo_shard_abandon(h C.uintptr_t, sequence C.int64_t, reasonPtr unsafe.Pointer, n C.int64_t, stepOut *C.uintptr_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*shard.Collection](h, "sharded collection")
		if err != nil {
			return err
		}
		reason, err := viewSlice[byte](reasonPtr, int64(n), "reason")
		if err != nil {
			return err
		}
		s, err := c.Abandon(string(reason), sequence != 0)
		if err != nil {
			return err
		}
		return putHandle(stepOut, s)
	})
}

// recgo_shard_pool writes the step's pooled output ([B, width] float32) once its forward exchange ran.
//
//export recgo_shard_pool
func recgo_shard_pool(sh C.uintptr_t, outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, out, err := lookupView[*shard.Step, float32](sh, "shard step", outPtr, n, "out")
		if err != nil {
			return err
		}
		return s.Pool(out)
	})
}

// recgo_shard_backward merges scale × the step's output gradient ([B, width] float32) per distinct
// ID and queues the backward exchange (fused != 0: the owners apply their optimizers at its end;
// scale 1/world is TorchRec's gradient division). frozenPtr (nfrozen bytes, one per table in config
// order; NULL: none) marks the frozen tables, which no rank steps; every rank must freeze the same.
//
//export recgo_shard_backward
func recgo_shard_backward(sh C.uintptr_t, gradPtr unsafe.Pointer, n C.int64_t, scale C.double, fused C.int32_t,
	frozenPtr unsafe.Pointer, nfrozen C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, g, err := lookupView[*shard.Step, float32](sh, "shard step", gradPtr, n, "grad_output")
		if err != nil {
			return err
		}
		f, err := gradScale(scale)
		if err != nil {
			return err
		}
		frozen, err := boolFlags(frozenPtr, nfrozen, "frozen") // nil: none frozen
		if err != nil {
			return err
		}
		return s.BackwardSome(g, f, fused != 0, frozen)
	})
}

// gradScale checks a backward's gradient scale: a finite positive number that stays positive as a
// float32.
func gradScale(v C.double) (float32, error) {
	s := float64(v)
	if math.IsNaN(s) || math.IsInf(s, 0) || s <= 0 || float32(s) == 0 || math.IsInf(float64(float32(s)), 0) {
		return 0, errs.Invalidf("gradient scale %v must be a finite positive number", s)
	}
	return float32(s), nil
}

// recgo_shard_owner_grads copies, for table t, the shard rows this rank owns that the step touched
// and their merged gradients (after a non-fused backward exchange ran). With null buffers it only
// writes the row count into *n.
//
//export recgo_shard_owner_grads
func recgo_shard_owner_grads(sh C.uintptr_t, t C.int64_t, rowsPtr, valsPtr unsafe.Pointer, n *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, err := lookup[*shard.Step](sh, "shard step")
		if err != nil {
			return err
		}
		rows, vals, _, err := s.OwnerGradients(int(t))
		if err != nil {
			return err
		}
		if rowsPtr == nil {
			*n = C.int64_t(len(rows))
			return nil
		}
		if int(*n) != len(rows) {
			return errs.Invalidf("owner gradients: buffers for %d rows, the step has %d", *n, len(rows))
		}
		return errors.Join(fill(rowsPtr, rows, "rows"), fill(valsPtr, vals, "values"))
	})
}

// recgo_shard_counters writes the step's traffic counters into out (shard.NumCounterFields × tables
// int64 values, field-major in the order of shard.Counters.Fields).
//
//export recgo_shard_counters
func recgo_shard_counters(sh C.uintptr_t, outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, out, err := lookupView[*shard.Step, int64](sh, "shard step", outPtr, n, "out")
		if err != nil {
			return err
		}
		fields := s.X.Counters.Fields()
		T := len(fields[0])
		if len(out) != len(fields)*T {
			return errs.Invalidf("counters: %d values, need %d", len(out), len(fields)*T)
		}
		for i, f := range fields {
			copy(out[i*T:], f)
		}
		return nil
	})
}

// recgo_shard_simulate computes both exchange modes' exact traffic for one step of a nodes ×
// perNode cluster under hash sharding: counts ([world × tables] int64) gives how many of the
// values (rank-major, then table) each rank looks up in each table. out receives 6 int64 values:
// lookups, requested, flat intra, flat inter, hierarchical intra, hierarchical inter.
//
//export recgo_shard_simulate
func recgo_shard_simulate(nodes, perNode, ntables C.int64_t, countsPtr unsafe.Pointer, valuesPtr unsafe.Pointer, nvalues C.int64_t,
	outPtr unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if nodes <= 0 || perNode <= 0 || nodes > 1<<20 || perNode > 1<<20 || nodes*perNode > 1<<20 || ntables <= 0 || ntables > 1<<16 {
			return errs.Invalidf("simulate: %d nodes × %d ranks, %d tables", nodes, perNode, ntables)
		}
		topo, err := shard.NewTopology(int(nodes), int(perNode), int(nodes*perNode))
		if err != nil {
			return err
		}
		W, T := topo.World(), int(ntables)
		counts, err := viewGrid[int64](countsPtr, int64(W), int64(T), "counts")
		if err != nil {
			return err
		}
		values, err := viewSlice[int64](valuesPtr, int64(nvalues), "values")
		if err != nil {
			return err
		}
		out, err := viewSlice[int64](outPtr, 6, "out")
		if err != nil {
			return err
		}
		batch, err := shard.SplitCounts(values, counts, W, T)
		if err != nil {
			return err
		}
		tr, err := shard.Simulate(topo, batch, func(_ int, id int64) int { return shard.HashOwner(id, W) })
		if err != nil {
			return err
		}
		copy(out, []int64{tr.Lookups, tr.Requested, tr.FlatIntra, tr.FlatInter, tr.HierIntra, tr.HierInter})
		return nil
	})
}

// recgo_shard_owners writes the owning rank of each of n IDs of table t into ranks (this rank for a
// data-parallel table).
//
//export recgo_shard_owners
func recgo_shard_owners(h C.uintptr_t, t C.int64_t, idsPtr unsafe.Pointer, n C.int64_t, ranksPtr unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, l, ids, ranks, err := shardTableIDs(h, t, idsPtr, n, ranksPtr, "ranks")
		if err != nil {
			return err
		}
		for i, id := range ids {
			if err := l.Check(id); err != nil {
				return err
			}
			ranks[i] = int64(l.OwnerRank(id, c.Rank))
		}
		return nil
	})
}

// recgo_shard_hash_owners writes the hash-sharding owner rank of each of n IDs in a world of the
// given size into ranks.
//
//export recgo_shard_hash_owners
func recgo_shard_hash_owners(idsPtr unsafe.Pointer, n, world C.int64_t, ranksPtr unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if world <= 0 || world > 1<<20 {
			return errs.Invalidf("hash owners: world size %d must be in [1, 2^20]", world)
		}
		ids, err := viewSlice[int64](idsPtr, int64(n), "ids")
		if err != nil {
			return err
		}
		ranks, err := viewSlice[int64](ranksPtr, int64(n), "ranks")
		if err != nil {
			return err
		}
		for i, id := range ids {
			ranks[i] = int64(shard.HashOwner(id, int(world)))
		}
		return nil
	})
}
