package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"math"
	"unsafe"

	"github.com/recgo/recgo/engine/dynamic"
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/errs"
)

// recgo_dynamic_builder_new returns the handle of a dynamic-table builder (an embedding.TableBuilder
// that recgo_ebc_new accepts in its builders array). maxRows and maxBytes bound the table (either may
// be 0, not both). policy: 0 LRU, 1 LFU. Init is uniform in [initLow, initHigh), or ±√(1/rows) when
// both are NaN. defaultPtr/ndefault: the eval-mode default vector, or NULL/0 for none.
//
//export recgo_dynamic_builder_new
func recgo_dynamic_builder_new(maxRows, maxBytes, minCount C.int64_t, policy C.int32_t, maxAge C.int64_t, evictFrac,
	initLow, initHigh C.double, seed C.uint64_t, defaultPtr unsafe.Pointer, ndefault C.int64_t, manualStep C.int32_t,
	sketchWidth C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		def, err := optionalSlice[float32](defaultPtr, int64(ndefault), "default")
		if err != nil {
			return err
		}
		ints := []struct {
			name string
			v    C.int64_t
		}{{"num_embeddings", maxRows}, {"min_count", minCount}, {"max_age", maxAge}, {"sketch_width", sketchWidth}}
		for _, x := range ints {
			if x.v < math.MinInt32 || x.v > math.MaxInt32 {
				return errs.Invalidf("dynamic table: %s %d out of range (at most %d)", x.name, int64(x.v), math.MaxInt32)
			}
		}
		if maxBytes < 0 || int64(maxBytes) > 1<<50 {
			return errs.Invalidf("dynamic table: memory bound %d bytes out of range", int64(maxBytes))
		}
		lo, hi := float64(initLow), float64(initHigh)
		auto := math.IsNaN(lo) && math.IsNaN(hi)
		if auto {
			lo, hi = 0, 0
		}
		if math.Abs(lo) > math.MaxFloat32 || math.Abs(hi) > math.MaxFloat32 {
			return errs.Invalidf("dynamic table: init range [%g, %g) is not float32", lo, hi)
		}
		b, err := dynamic.NewBuilder(dynamic.Config{
			MaxRows: int(maxRows), MaxBytes: int(maxBytes), InitAuto: auto, MinCount: int(minCount), Policy: dynamic.Policy(policy), MaxAge: int(maxAge),
			EvictFrac: float64(evictFrac), InitLow: float32(lo), InitHigh: float32(hi), Seed: uint64(seed),
			Default: append([]float32(nil), def...), ManualStep: manualStep != 0, SketchWidth: int(sketchWidth),
		})
		if err != nil {
			return err
		}
		return putHandle(out, b)
	})
}

// dynamicTable returns table t of collection h (an embedding collection, or a sharded one: then
// this rank's shard of the table) when it is a dynamic table.
func dynamicTable(h C.uintptr_t, t C.int64_t) (*dynamic.Table, error) {
	var tables []*embedding.Table
	if c, err := lookup[*shard.Collection](h, "sharded collection"); err == nil {
		tables = c.Shards
	} else {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return nil, err
		}
		tables = c.Tables
	}
	if t < 0 || int(t) >= len(tables) {
		return nil, errs.NotFoundf("table index %d of %d", int64(t), len(tables))
	}
	d := dynamic.Of(tables[t])
	if d == nil {
		return nil, errs.Invalidf("table %q is not a dynamic-ID table", tables[t].Name)
	}
	return d, nil
}

// recgo_dynamic_changes writes to *out how many times a dynamic table's rows changed owner: rows freed
// (evictions, max-age sweeps) and checkpoint imports, ever. Unlike the stats' evicted count an import
// moves it on, never back: a forward's rows are as it left them while it stands still (the
// activation-checkpointing guard compares it).
//
//export recgo_dynamic_changes
func recgo_dynamic_changes(h C.uintptr_t, t C.int64_t, out *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if out == nil {
			return errs.Invalidf("changes: null output pointer")
		}
		d, err := dynamicTable(h, t)
		if err != nil {
			return err
		}
		*out = C.int64_t(d.Evictions())
		return nil
	})
}

// dynamicStatsLen is the number of int64 values recgo_dynamic_stats writes.
const dynamicStatsLen = 8

// recgo_dynamic_stats writes a dynamic table's statistics into out (dynamicStatsLen int64): rows in use, high water,
// row bound, step, admitted, evicted, reserved bytes, resident bytes.
//
//export recgo_dynamic_stats
func recgo_dynamic_stats(h C.uintptr_t, t C.int64_t, outPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		d, err := dynamicTable(h, t)
		if err != nil {
			return err
		}
		out, err := viewSlice[int64](outPtr, int64(n), "stats")
		if err != nil {
			return err
		}
		if len(out) != dynamicStatsLen {
			return errs.Invalidf("stats: %d values, need %d", len(out), dynamicStatsLen)
		}
		s, err := d.Stats()
		if err != nil {
			return err
		}
		copy(out, []int64{int64(s.Rows), int64(s.HighWater), int64(s.MaxRows), s.Step, s.Admitted, s.Evicted,
			int64(s.ReservedBytes), int64(s.ResidentBytes)})
		return nil
	})
}

// recgo_dynamic_resolve resolves ids to rows like a forward pass does (train != 0 counts, admits and
// advances the clock); rows gets -1 for IDs without a row (also in eval mode with a default vector).
// On an embedding collection it takes the collection's lock as a forward does: exclusive when
// training (admissions and evictions move rows other passes read), shared otherwise.
//
//export recgo_dynamic_resolve
func recgo_dynamic_resolve(h C.uintptr_t, t C.int64_t, idsPtr, rowsPtr unsafe.Pointer, n C.int64_t, train C.int32_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		d, err := dynamicTable(h, t)
		if err != nil {
			return err
		}
		if c, err := lookup[*embedding.Collection](h, "embedding collection"); err == nil {
			return c.Locked(train != 0, func() error { return dynamicResolve(d, idsPtr, rowsPtr, n, train != 0) })
		}
		return dynamicResolve(d, idsPtr, rowsPtr, n, train != 0)
	})
}

// dynamicResolve is recgo_dynamic_resolve's lookup, on the caller's n IDs and rows.
func dynamicResolve(d *dynamic.Table, idsPtr, rowsPtr unsafe.Pointer, n C.int64_t, train bool) error {
	ids, err := viewSlice[int64](idsPtr, int64(n), "ids")
	if err != nil {
		return err
	}
	rows, err := viewSlice[int64](rowsPtr, int64(n), "rows")
	if err != nil {
		return err
	}
	return d.Lookup(ids, rows, train)
}

// recgo_dynamic_advance moves a dynamic table's clock one step (for manual_step tables).
//
//export recgo_dynamic_advance
func recgo_dynamic_advance(h C.uintptr_t, t C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		d, err := dynamicTable(h, t)
		if err != nil {
			return err
		}
		return d.Advance()
	})
}

// snapshotMeta is the layout of the meta array of recgo_dynamic_snapshot_meta / recgo_dynamic_import.
// metaSeed is the table's seed (the uint64's bits); a meta of checkpoints before session 34 ends
// before it (metaSeed values), and imports with the seed unknown. metaSketchIndexing is the sketch's
// indexing (dynamic.SketchV1 or SketchV2); a meta of checkpoints before session 43 ends before it
// (metaSketchIndexing values), and imports with the indexing unmarked (read as SketchV1).
const (
	metaDim = iota
	metaStateWidth
	metaMaxRows
	metaSketchWidth
	metaStep
	metaAdmitted
	metaEvicted
	metaHighWater
	metaFree
	metaSketch
	metaSeed
	metaSketchIndexing
	metaLen
)

// recgo_dynamic_snapshot copies a dynamic table's whole state (for a checkpoint) into a snapshot
// object; read its sizes with recgo_dynamic_snapshot_meta and its arrays with recgo_dynamic_snapshot_read.
// On an unsharded collection it holds the collection's lock shared, so that no fused update writes
// the rows it copies and no training forward admits or evicts meanwhile (the table's own locks
// guard only its ID map).
//
//export recgo_dynamic_snapshot
func recgo_dynamic_snapshot(h C.uintptr_t, t C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		d, err := dynamicTable(h, t)
		if err != nil {
			return err
		}
		if out == nil {
			return errs.Invalidf("out: null pointer")
		}
		var s *dynamic.Snapshot
		export := func() (err error) {
			s, err = d.Export()
			return err
		}
		if c, cerr := lookup[*embedding.Collection](h, "embedding collection"); cerr == nil {
			err = c.Locked(false, export)
		} else {
			err = export()
		}
		if err != nil {
			return err
		}
		return putHandle(out, s)
	})
}

// recgo_dynamic_snapshot_meta writes a snapshot's metadata (metaLen int64, see snapshotMeta).
//
//export recgo_dynamic_snapshot_meta
func recgo_dynamic_snapshot_meta(sh C.uintptr_t, metaPtr unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, meta, err := lookupView[*dynamic.Snapshot, int64](sh, "dynamic snapshot", metaPtr, n, "meta")
		if err != nil {
			return err
		}
		if len(meta) != metaLen {
			return errs.Invalidf("meta: %d values, need %d", len(meta), metaLen)
		}
		copy(meta, []int64{int64(s.Dim), int64(s.StateWidth), int64(s.MaxRows), int64(s.SketchWidth), s.Step,
			s.Admitted, s.Evicted, int64(s.HighWater()), int64(len(s.Free)), int64(len(s.Sketch)), int64(s.Seed),
			int64(s.SketchIndexing)})
		return nil
	})
}

// recgo_dynamic_snapshot_read copies a snapshot's arrays into caller buffers sized from its meta: ids,
// counts, last (HighWater int64 each), free (Free int64), weights (HighWater·Dim float32), state
// (HighWater·StateWidth float32), sketch (Sketch uint8) and sketchAdds (64 int64, or 0 without a sketch).
// weights and state may be NULL when the caller reads the rows from the table's memory instead.
//
//export recgo_dynamic_snapshot_read
func recgo_dynamic_snapshot_read(sh C.uintptr_t, idsPtr, countsPtr, lastPtr, freePtr, weightsPtr, statePtr,
	sketchPtr, addsPtr unsafe.Pointer, nAdds C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		s, err := lookup[*dynamic.Snapshot](sh, "dynamic snapshot")
		if err != nil {
			return err
		}
		nadds := int64(0)
		if s.Sketch != nil {
			nadds = int64(len(s.SketchAdds))
		}
		if int64(nAdds) != nadds {
			return errs.Invalidf("sketch_adds: %d values, need %d", int64(nAdds), nadds)
		}
		return errors.Join(fill(idsPtr, s.IDs, "ids"), fill(countsPtr, s.Counts, "counts"),
			fill(lastPtr, s.LastSeen, "last_seen"), fill(freePtr, s.Free, "free"),
			fillUnlessNull(weightsPtr, s.Weights, "weights"), fillUnlessNull(statePtr, s.State, "state"),
			fill(sketchPtr, s.Sketch, "sketch"), fill(addsPtr, s.SketchAdds[:nadds], "sketch_adds"))
	})
}

// fill copies src into the caller's buffer at ptr (len(src) values).
func fill[T any](ptr unsafe.Pointer, src []T, name string) error {
	dst, err := viewSlice[T](ptr, int64(len(src)), name)
	if err != nil {
		return err
	}
	copy(dst, src)
	return nil
}

// fillUnlessNull is fill for an output the caller may skip by passing NULL.
func fillUnlessNull[T any](ptr unsafe.Pointer, src []T, name string) error {
	if ptr == nil {
		return nil
	}
	return fill(ptr, src, name)
}

// recgo_dynamic_import replaces a dynamic table's state with a checkpoint's: meta as in
// recgo_dynamic_snapshot_meta (or its first metaSketchIndexing or metaSeed values: an older
// checkpoint's, indexing unmarked and seed unknown),
// then the arrays with their lengths. The engine checks every value
// (shapes, ranges, a consistent free list and ID map); on error the table is unchanged. With
// checkOnly != 0 it only checks (a load that checks every table before it changes any).
//
//export recgo_dynamic_import
func recgo_dynamic_import(h C.uintptr_t, t C.int64_t, metaPtr unsafe.Pointer, nmeta C.int64_t,
	idsPtr, countsPtr, lastPtr unsafe.Pointer, nrows C.int64_t, freePtr unsafe.Pointer, nfree C.int64_t,
	weightsPtr unsafe.Pointer, nweights C.int64_t, statePtr unsafe.Pointer, nstate C.int64_t,
	sketchPtr unsafe.Pointer, nsketch C.int64_t, addsPtr unsafe.Pointer, nadds C.int64_t, checkOnly C.int,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		d, err := dynamicTable(h, t)
		if err != nil {
			return err
		}
		meta, err := viewSlice[int64](metaPtr, int64(nmeta), "meta")
		if err != nil {
			return err
		}
		if len(meta) != metaLen && len(meta) != metaSketchIndexing && len(meta) != metaSeed {
			return errs.Invalidf("checkpoint meta: %d values, need %d (or %d without the sketch indexing, %d without "+
				"the seed too)", len(meta), metaLen, metaSketchIndexing, metaSeed)
		}
		for _, i := range []int{metaDim, metaStateWidth, metaMaxRows, metaSketchWidth} {
			if meta[i] < 0 || meta[i] > math.MaxInt32 {
				return errs.Invalidf("checkpoint meta[%d] = %d out of range", i, meta[i])
			}
		}
		s := &dynamic.Snapshot{Dim: int(meta[metaDim]), StateWidth: int(meta[metaStateWidth]),
			MaxRows: int(meta[metaMaxRows]), SketchWidth: int(meta[metaSketchWidth]), Step: meta[metaStep],
			Admitted: meta[metaAdmitted], Evicted: meta[metaEvicted]}
		if len(meta) > metaSeed {
			s.Seed, s.SeedKnown = uint64(meta[metaSeed]), true
		}
		if len(meta) > metaSketchIndexing { // a marked meta names one (unmarked is the shorter meta)
			v := meta[metaSketchIndexing]
			if v != int64(dynamic.SketchV1) && v != int64(dynamic.SketchV2) {
				return errs.Invalidf("checkpoint meta[%d]: sketch indexing %d, expected %d or %d", metaSketchIndexing, v,
					dynamic.SketchV1, dynamic.SketchV2)
			}
			s.SketchIndexing = dynamic.SketchIndexing(v)
		}
		if meta[metaHighWater] != int64(nrows) || meta[metaFree] != int64(nfree) || meta[metaSketch] != int64(nsketch) {
			return errs.Invalidf("checkpoint: meta says %d rows, %d free, %d sketch counters; arrays have %d, %d, %d",
				meta[metaHighWater], meta[metaFree], meta[metaSketch], int64(nrows), int64(nfree), int64(nsketch))
		}
		if s.IDs, err = viewSlice[int64](idsPtr, int64(nrows), "ids"); err != nil {
			return err
		}
		if s.Counts, err = viewSlice[int64](countsPtr, int64(nrows), "counts"); err != nil {
			return err
		}
		if s.LastSeen, err = viewSlice[int64](lastPtr, int64(nrows), "last_seen"); err != nil {
			return err
		}
		if s.Free, err = viewSlice[int64](freePtr, int64(nfree), "free"); err != nil {
			return err
		}
		if s.Weights, err = viewSlice[float32](weightsPtr, int64(nweights), "weights"); err != nil {
			return err
		}
		if s.State, err = viewSlice[float32](statePtr, int64(nstate), "state"); err != nil {
			return err
		}
		if s.Sketch, err = viewSlice[uint8](sketchPtr, int64(nsketch), "sketch"); err != nil {
			return err
		}
		if s.SketchAdds, err = viewSlice[int64](addsPtr, int64(nadds), "sketch_adds"); err != nil {
			return err
		}
		if s.IDs == nil { // an empty table: keep lengths consistent
			s.IDs, s.Counts, s.LastSeen = []int64{}, []int64{}, []int64{}
		}
		if checkOnly != 0 {
			return d.Check(s)
		}
		return d.Import(s) // copies out of the caller's memory before returning
	})
}

// recgo_dynamic_save writes dynamic table t's checkpoint file (the rows in use, the ID map and the
// table's optimizer step, with checksums; see engine/dynamic's checkpoint file) to path atomically.
//
//export recgo_dynamic_save
func recgo_dynamic_save(h C.uintptr_t, t C.int64_t, path *C.char, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, d, err := dynamicTableOf(h, t)
		if err != nil {
			return err
		}
		return c.Exclusive(func() error { return d.Save(goString(path), c.Tables[t].Step[0]) })
	})
}

// recgo_dynamic_load reads a checkpoint file written by recgo_dynamic_save into dynamic table t
// (and its optimizer step), after verifying it; on error the table is unchanged.
//
//export recgo_dynamic_load
func recgo_dynamic_load(h C.uintptr_t, t C.int64_t, path *C.char, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, d, err := dynamicTableOf(h, t)
		if err != nil {
			return err
		}
		return c.Exclusive(func() error {
			step, err := d.Load(goString(path))
			if err == nil {
				c.Tables[t].Step[0] = step
			}
			return err
		})
	})
}

// dynamicTableOf is dynamicTable that also returns the collection.
func dynamicTableOf(h C.uintptr_t, t C.int64_t) (*embedding.Collection, *dynamic.Table, error) {
	d, err := dynamicTable(h, t)
	if err != nil {
		return nil, nil, err
	}
	c, err := lookup[*embedding.Collection](h, "embedding collection")
	return c, d, err
}
