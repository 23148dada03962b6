package reader

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// fitsOne checks a value of a field that takes one a row only when the batch holds as many rows as
// the bound (atBound), a byte string always; it is the one gate of the CSV and Criteo parsers (the
// CSV parser checked every numeric value, session 43).
func TestFitsOneGatesNumericValuesByRows(t *testing.T) {
	for _, c := range []struct {
		name   string
		kind   feature.Kind
		size   int   // rows the batch holds
		values int   // values the field holds
		nbytes int64 // bytes of strings of the value
		want   bool
	}{
		{"int below the bound's rows: not checked", feature.KindInt64, 2, 2, 0, true},
		{"int at the bound's rows, room left", feature.KindInt64, 3, 2, 0, true},
		{"int at the bound's rows, full", feature.KindInt64, 3, 3, 0, false},
		{"float at the bound's rows, full", feature.KindFloat64, 4, 3, 0, false},
		{"string below the bound's rows, bytes fit", feature.KindBytes, 0, 0, 24, true},
		{"string below the bound's rows, bytes past", feature.KindBytes, 0, 0, 25, false},
		{"string at the bound's rows, full", feature.KindBytes, 3, 3, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := Batch{MaxValues: 3}
			b.Reset(Schema{Fields: []Field{{Name: "f", Kind: c.kind}}}, 8)
			in := &b.Inputs[0]
			for range c.values {
				switch c.kind {
				case feature.KindInt64:
					in.Ints = append(in.Ints, 1)
				case feature.KindFloat64:
					in.F64 = append(in.F64, 1)
				case feature.KindBytes:
					in.ByteLens = append(in.ByteLens, 0)
				}
			}
			b.Size = c.size
			full := b.atBound()
			assert.Equal(t, c.size >= 3, full)
			assert.Equal(t, c.want, b.fitsOne(in, c.nbytes, full))
		})
	}
}

// A sparse column of one value a row (CSV of every type, Criteo) is refused at the row that would
// pass the bound, however its check is gated, and a batch at the bound reads; a string past the
// bytes bound is refused at its row, before the rows reach the bound.
func TestSingleValueFieldsRefusedAtTheBound(t *testing.T) {
	csvText := "label,i,h,x,s\n1,1,a,0.5,abcdefghij\n0,2,b,1.5,k\n1,3,c,2.5,l\n"
	csvOf := func(col Column) func(t *testing.T) Source {
		return func(t *testing.T) Source {
			src, err := NewCSV([]string{writeFile(t, "one.csv", csvText)},
				CSVOptions{Columns: []Column{{Name: "label", Role: RoleLabel}, col}, Header: true})
			require.NoError(t, err)
			return src
		}
	}
	for _, c := range []struct {
		name  string
		open  func(t *testing.T) Source
		limit int64
		batch int
		want  string // the capacity error's words; "": every batch reads
	}{
		{"csv int at the bound", csvOf(Column{Name: "i", Role: RoleSparse}), 2, 2, ""},
		{"csv int past the bound", csvOf(Column{Name: "i", Role: RoleSparse}), 2, 3,
			`field "i" would hold 3 values by row 3 of a batch of 3 rows, past the limit of 2 values`},
		{"csv hex past the bound", csvOf(Column{Name: "h", Role: RoleSparse, Type: "hex"}), 1, 2,
			`field "h" would hold 2 values by row 2 of a batch of 2 rows, past the limit of 1 values`},
		{"csv float past the bound", csvOf(Column{Name: "x", Role: RoleSparse, Type: "float"}), 2, 3,
			`field "x" would hold 3 values by row 3 of a batch of 3 rows`},
		{"csv string past the bytes bound at row 1", csvOf(Column{Name: "s", Role: RoleSparse, Type: "string"}), 1, 3,
			`field "s" would hold 10 bytes of strings by row 1 of a batch of 3 rows, past the limit of 8 bytes`},
		{"criteo at the bound", criteoOfThree, 3, 3, ""},
		{"criteo past the bound", criteoOfThree, 2, 3, `field "I1" would hold 3 values by row 3 of a batch of 3 rows`},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := c.open(t)
			defer src.Close()
			b := Batch{MaxValues: c.limit}
			var err error
			for err == nil {
				_, err = src.Read(&b, c.batch)
			}
			if c.want == "" {
				require.ErrorIs(t, err, io.EOF)
				return
			}
			require.ErrorIs(t, err, errs.ErrCapacity)
			assert.ErrorContains(t, err, c.want)
		})
	}
}
