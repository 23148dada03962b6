package pipeline

import (
	"slices"
	"unsafe"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/errs"
)

// partitionTables matches a sharded collection's tables (pt; nil: none) to the pipeline's: per
// pipeline table, the collection's index of it or -1. Every table of the collection must be a
// pipeline table with the same features in the same order.
func partitionTables(tables []Table, pt *shard.Partitioner) ([]int, error) {
	idx := make([]int, len(tables))
	for i := range idx {
		idx[i] = -1
	}
	if pt == nil {
		return idx, nil
	}
	for t := 0; t < pt.NumTables(); t++ {
		name, feats := pt.Table(t)
		i := slices.IndexFunc(tables, func(x Table) bool { return x.Name == name })
		if i < 0 {
			return nil, errs.Invalidf("pipeline: the sharded collection's table %q is not one of the tables to deduplicate; add {name: %q, keys: %v}", name, name, feats)
		}
		if !slices.Equal(tables[i].Keys, feats) {
			return nil, errs.Invalidf("pipeline: table %q deduplicates features %v, the sharded collection looks it up with %v (same order)", name, tables[i].Keys, feats)
		}
		idx[i] = t
	}
	return idx, nil
}

// format is the FORMAT stage: it lays the transformed batch out in one pooled off-heap buffer
// (values, lengths, labels, dense, and per table the distinct IDs and inverse map, and with a
// partitioner their partition by owner), renumbers the planned tables' IDs through the remap,
// deduplicates each table's IDs and partitions those of the sharded collection's tables.
func (p *Pipeline) format(step int64, raw *reader.Batch, res *feature.Result, pos reader.Position) (*Prepared, error) {
	defer res.Release()
	B, F, D := res.Size(), len(p.keys), len(p.src.Schema().Dense)
	nv := res.NumValues()
	if len(raw.Dense) != B*D || len(raw.Labels) != B {
		return nil, errs.Invalidf("format: the source gave %d labels and %d dense values for %d samples", len(raw.Labels), len(raw.Dense), B)
	}
	lookups, partLookups, partTables, S := 0, 0, 0, 0
	if pt := p.cfg.Partitioner; pt != nil {
		S = pt.Size()
	}
	for ti, t := range p.tables {
		n := 0
		for _, k := range t {
			v, _, _ := res.Feature(p.keys[k])
			n += len(v)
		}
		lookups += n
		if p.partIdx[ti] >= 0 {
			partLookups += n
			partTables++
		}
	}
	// int64: values, lengths, uniq (at most one per lookup), partition counts;
	// 4-byte: inv, partition destinations and send order (at most one per lookup), labels, dense
	// (rounded up to 8 bytes below)
	words := nv + F*B + lookups + partTables*S
	halves := lookups + 2*partLookups + 2*B + 2*B*D
	buf, err := p.pool.get(8*words + 4*halves + 8)
	if err != nil {
		return nil, err
	}
	mem := buf.Bytes()
	i64 := unsafe.Slice((*int64)(unsafe.Pointer(&mem[0])), words)
	rest := mem[8*words:]
	f32 := unsafe.Slice((*float32)(unsafe.Pointer(&rest[0])), B+B*D)
	rest = rest[4*(B+B*D):]
	var i32 []int32
	if lookups > 0 {
		i32 = unsafe.Slice((*int32)(unsafe.Pointer(&rest[0])), lookups+2*partLookups)
	}
	out := &Prepared{Step: step, Size: B, Keys: p.keys, DenseWidth: D, Position: pos, buf: buf, pool: p.pool,
		Values: i64[:nv:nv], Lengths: i64[nv : nv+F*B : nv+F*B],
		Labels: f32[:B:B], Dense: f32[B : B+B*D : B+B*D]}
	if err := res.CopyTo(out.Values, out.Lengths); err != nil {
		_ = out.Close()
		return nil, err
	}
	copy(out.Labels, raw.Labels)
	copy(out.Dense, raw.Dense)
	if len(p.tables) == 0 {
		return out, nil
	}
	// Value ranges of every key in the KJT.
	starts := make([]int, F+1)
	for k := 0; k < F; k++ {
		n := 0
		for _, l := range out.Lengths[k*B : (k+1)*B] {
			n += int(l)
		}
		starts[k+1] = starts[k] + n
	}
	uniqEnd := nv + F*B + lookups
	uniq := i64[nv+F*B : nv+F*B : uniqEnd]
	counts := i64[uniqEnd:words]
	var dd embedding.Deduper
	ids := make([]int64, 0, lookups)
	at, partAt := 0, lookups
	if p.cfg.Partitioner != nil {
		out.Partition = &shard.Partition{By: p.cfg.Partitioner, Tables: make([]shard.TablePartition, len(p.tables))}
	}
	for ti, t := range p.tables {
		spec := p.cfg.Tables[ti]
		ids = ids[:0]
		for _, k := range t {
			vals := out.Values[starts[k]:starts[k+1]]
			if r := p.remapIdx[ti]; r >= 0 {
				if err := p.cfg.Remap.Apply(r, vals, vals); err != nil {
					_ = out.Close()
					return nil, err
				}
			}
			ids = append(ids, vals...)
		}
		inv := i32[at : at+len(ids) : at+len(ids)]
		at += len(ids)
		u0 := len(uniq)
		uniq = dd.Dedup(ids, uniq, inv)
		out.Dedup = append(out.Dedup, embedding.TableDedup{Table: spec.Name, Features: spec.Keys,
			Uniq: uniq[u0:len(uniq):len(uniq)], Inv: inv})
		if ci := p.partIdx[ti]; ci >= 0 {
			n := len(uniq) - u0
			tp := shard.TablePartition{Dest: i32[partAt : partAt+n : partAt+n], Perm: i32[partAt+n : partAt+2*n : partAt+2*n],
				Count: counts[:S:S]}
			partAt, counts = partAt+2*n, counts[S:]
			if err := p.cfg.Partitioner.Partition(ci, uniq[u0:], tp); err != nil {
				_ = out.Close()
				return nil, err
			}
			out.Partition.Tables[ti] = tp
		}
	}
	return out, nil
}
