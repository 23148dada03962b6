package reader

import (
	"bufio"
	"io"
	"strconv"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

func appendInt(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }

// WriteCriteo writes up to n samples of src as Criteo TSV lines: the label, fields I1..I13 as
// decimal integers and C1..C26 as 8-digit hex (an empty bag is an empty field; a bag's first value
// is written). src must have int64 fields with those names (e.g. a synthetic source fitted to a
// Criteo sample). It returns the number of lines written.
func WriteCriteo(w io.Writer, src Source, n int64) (int64, error) {
	schema := src.Schema()
	idx := make([]int, 0, criteoInts+criteoCats)
	for c := 1; c <= criteoInts+criteoCats; c++ {
		name := CriteoColumnName(c, false)
		i := schema.FieldIndex(name)
		if i < 0 || schema.Fields[i].Kind != feature.KindInt64 {
			return 0, errs.Invalidf("write criteo: the source has no int64 field %q", name)
		}
		idx = append(idx, i)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var b Batch
	var line []byte
	written := int64(0)
	offs := make([][]int64, len(schema.Fields))
	for written < n {
		got, err := src.Read(&b, int(min(4096, n-written)))
		if err == io.EOF {
			break
		}
		if err != nil {
			return written, err
		}
		for f := range b.Inputs {
			offs[f] = offs[f][:0]
			at := int64(0)
			for _, l := range b.Inputs[f].Lengths {
				offs[f] = append(offs[f], at)
				at += l
			}
		}
		for s := 0; s < got; s++ {
			line = strconv.AppendInt(line[:0], int64(b.Labels[s]), 10)
			for c, i := range idx {
				line = append(line, '\t')
				in := &b.Inputs[i]
				if in.Lengths[s] == 0 {
					continue
				}
				v := in.Ints[offs[i][s]]
				if c < criteoInts {
					line = strconv.AppendInt(line, v, 10)
				} else {
					h := strconv.AppendUint(nil, uint64(v)&0xffffffff, 16)
					for k := len(h); k < 8; k++ {
						line = append(line, '0')
					}
					line = append(line, h...)
				}
			}
			line = append(line, '\n')
			if _, err := bw.Write(line); err != nil {
				return written, errs.IOf("write criteo: %v", err)
			}
			written++
		}
	}
	if err := bw.Flush(); err != nil {
		return written, errs.IOf("write criteo: %v", err)
	}
	return written, nil
}
