package pipeline

import (
	"unsafe"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/internal/errs"
)

// format is the FORMAT stage: it lays the transformed batch out in one pooled off-heap buffer
// (values, lengths, labels, dense, and per table the distinct IDs and inverse map), renumbers the
// planned tables' IDs through the remap and deduplicates each table's IDs.
func (p *Pipeline) format(step int64, raw *reader.Batch, res *feature.Result, pos reader.Position) (*Prepared, error) {
	defer res.Release()
	B, F, D := res.Size(), len(p.keys), len(p.src.Schema().Dense)
	nv := res.NumValues()
	if len(raw.Dense) != B*D || len(raw.Labels) != B {
		return nil, errs.Invalidf("format: the source gave %d labels and %d dense values for %d samples", len(raw.Labels), len(raw.Dense), B)
	}
	lookups := 0
	for _, t := range p.tables {
		for _, k := range t {
			v, _, _ := res.Feature(p.keys[k])
			lookups += len(v)
		}
	}
	words := nv + F*B + lookups     // int64: values, lengths, uniq (at most one per lookup)
	halves := lookups + 2*B + 2*B*D // 4-byte: inv, labels, dense (rounded up to 8 bytes below)
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
		i32 = unsafe.Slice((*int32)(unsafe.Pointer(&rest[0])), lookups)
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
	uniq := i64[nv+F*B : nv+F*B : words]
	var dd embedding.Deduper
	ids := make([]int64, 0, lookups)
	at := 0
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
	}
	return out, nil
}
