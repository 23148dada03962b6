package reader

import (
	"encoding/binary"
	"math"
	"sort"
	"strconv"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/feature"
)

// withLogical is a leaf type carrying a logical type parquet-go has no type of its own for.
type withLogical struct {
	parquet.Type
	lt format.LogicalType
}

func (w withLogical) LogicalType() *format.LogicalType { return &w.lt }

// float16Leaf is a FLOAT16 leaf as pyarrow writes one: FIXED_LEN_BYTE_ARRAY(2), logical type FLOAT16.
var float16Leaf = parquet.Leaf(withLogical{parquet.FixedLenByteArrayType(2), format.LogicalType{Value: &format.Float16Type{}}})

// halfVal is a FLOAT16 value of bits h.
func halfVal(h uint16) parquet.Value {
	return parquet.FixedLenByteArrayValue(binary.LittleEndian.AppendUint16(nil, h))
}

// Every half converts exactly: (-1)^s · 2^(e-15) · 1.f, subnormals f · 2^-24, and Inf and NaN.
func TestHalfFloat32(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		s, e, f := h>>15, h>>10&0x1f, float64(h&0x3ff)
		var want float64
		switch e {
		case 0x1f:
			want = math.Inf(1)
			if f != 0 {
				want = math.NaN()
			}
		case 0:
			want = math.Ldexp(f, -24)
		default:
			want = math.Ldexp(1+f/1024, e-15)
		}
		if s == 1 {
			want = -want
		}
		got := halfFloat32(uint16(h))
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(float64(got)), "%#04x", h)
			require.Equal(t, uint32(h&0x8000)<<16, math.Float32bits(got)&(1<<31), "%#04x: the sign", h)
			continue
		}
		require.Equal(t, math.Float64bits(want), math.Float64bits(float64(got)), "%#04x", h) // -0 too
	}
}

// nearestHalf is the finite half nearest y >= 0 (ties to the even one), by search over them all.
func nearestHalf(halves []float64, y float64) int {
	i := sort.SearchFloat64s(halves, y) // halves[i-1] < y <= halves[i]
	if i == len(halves) {
		return i - 1
	}
	if i == 0 || halves[i] == y {
		return i
	}
	if d, u := y-halves[i-1], halves[i]-y; d < u || d == u && (i-1)%2 == 0 {
		return i - 1
	}
	return i
}

// A half's text reads back as that half, for every finite half, and is the shortest that does
// (numpy's texts, digits for digits).
func TestHalfText(t *testing.T) {
	halves := make([]float64, 0x7c00)
	for a := range halves {
		halves[a] = float64(halfFloat32(uint16(a)))
	}
	for h := 0; h < 1<<16; h++ {
		a := h & 0x7fff
		if a >= 0x7c00 {
			continue
		}
		text := halfText(uint16(h))
		y, err := strconv.ParseFloat(text, 64)
		require.NoError(t, err, text)
		require.Equal(t, h>>15 == 1, math.Signbit(y), "%#04x: %s", h, text)
		require.Equal(t, a, nearestHalf(halves, math.Abs(y)), "%#04x: %s", h, text)
	}
	for _, c := range []struct {
		h    uint16
		want string
	}{
		{0x2e66, "0.1"}, {0x3555, "0.3333"}, {0x7bff, "65500"}, {0x0001, "6e-08"}, {0x0400, "6.104e-05"},
		{0x00a8, "1e-05"}, {0x63d0, "1000"}, {0x6800, "2048"}, {0x3c01, "1.001"}, {0xc100, "-2.5"},
		{0x4248, "3.14"}, {0x0800, "0.0001221"}, {0x03ff, "6.1e-05"}, {0x7b53, "60000"}, {0x7207, "12344"},
		{0x0000, "0"}, {0x8000, "-0"}, {0x7c00, "+Inf"}, {0xfc00, "-Inf"}, {0x7e00, "NaN"},
	} {
		assert.Equal(t, c.want, halfText(c.h), "%#04x", c.h)
	}
}

// FLOAT16 columns (pyarrow's float16) read as numbers: labels, dense values and float IDs take the
// half's exact value, int IDs an integral one, string IDs its shortest text. Before, every row
// failed: 'FIXED_LEN_BYTE_ARRAY value "\x00<" is not a number'.
func TestParquetFloat16Columns(t *testing.T) {
	bits := []uint16{0x3c00, 0x0000, 0x8000, 0xc100, 0x2e66, 0x0001, 0x03ff, 0x7bff, 0x6800} // 1, ±0, -2.5, 0.1, subnormals, 65504, 2048
	path := writeLeaf(t, float16Leaf, func() []parquet.Value {
		vals := make([]parquet.Value, len(bits))
		for i, h := range bits {
			vals[i] = halfVal(h)
		}
		return vals
	}())
	f32 := make([]float32, len(bits))
	f64 := make([]float64, len(bits))
	for i, h := range bits {
		f32[i] = halfFloat32(h)
		f64[i] = float64(f32[i])
	}
	read := func(t *testing.T, col Column) *Batch {
		src, err := NewParquet([]string{path}, ParquetOptions{Columns: []Column{col}})
		require.NoError(t, err)
		bs := readAll(t, src, 100)
		require.Len(t, bs, 1)
		return &bs[0]
	}
	cases := []struct {
		name string
		col  Column
		want func(t *testing.T, b *Batch)
	}{
		{"label", Column{Name: "x", Role: RoleLabel}, func(t *testing.T, b *Batch) { assert.Equal(t, f32, b.Labels) }},
		{"dense", Column{Name: "x", Role: RoleDense}, func(t *testing.T, b *Batch) { assert.Equal(t, f32, b.Dense) }},
		{"float", Column{Name: "x", Role: RoleSparse, Type: "float"}, func(t *testing.T, b *Batch) {
			assert.Equal(t, f64, b.Inputs[0].F64)
		}},
		{"string", Column{Name: "x", Role: RoleSparse, Type: "string"}, func(t *testing.T, b *Batch) {
			assert.Equal(t, "1"+"0"+"-0"+"-2.5"+"0.1"+"6e-08"+"6.1e-05"+"65500"+"2048", string(b.Inputs[0].Bytes))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.want(t, read(t, c.col)) })
	}
	t.Run("int", func(t *testing.T) {
		ints := writeLeaf(t, float16Leaf, []parquet.Value{halfVal(0x3c00), halfVal(0x8000), halfVal(0x7bff), halfVal(0xe800)})
		src, err := NewParquet([]string{ints}, ParquetOptions{Columns: []Column{{Name: "x", Role: RoleSparse}}})
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 0, 65504, -2048}, readAll(t, src, 100)[0].Inputs[0].Ints)
	})
}

// Values a FLOAT16 column cannot take are named as FLOAT16 values, as a FLOAT column's are; a
// FLOAT16 leaf stored as other than 2 bytes is refused when the file opens.
func TestParquetFloat16Errors(t *testing.T) {
	cases := []struct {
		name string
		leaf parquet.Node
		v    parquet.Value
		col  Column
		err  string
	}{
		{"NaN label", float16Leaf, halfVal(0x7e00), Column{Name: "x", Role: RoleLabel}, "FLOAT16 value NaN is not a number"},
		{"Inf dense", float16Leaf, halfVal(0xfc00), Column{Name: "x", Role: RoleDense}, "FLOAT16 value -Inf is not a number"},
		{"NaN float ID", float16Leaf, halfVal(0x7e01), Column{Name: "x", Role: RoleSparse, Type: "float"}, "FLOAT16 value NaN is not a number"},
		{"fraction int ID", float16Leaf, halfVal(0x3e00), Column{Name: "x", Role: RoleSparse}, "FLOAT16 value 1.5 is not a valid int value"},
		{"Inf int ID", float16Leaf, halfVal(0x7c00), Column{Name: "x", Role: RoleSparse}, "FLOAT16 value +Inf is not a valid int value"},
		{"stored as INT32", parquet.Leaf(withLogical{parquet.Int32Type, format.LogicalType{Value: &format.Float16Type{}}}),
			parquet.Int32Value(1), Column{Name: "x", Role: RoleDense}, `column "x" is FLOAT16 stored as INT32: a half float is a FIXED_LEN_BYTE_ARRAY(2)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeLeaf(t, c.leaf, []parquet.Value{c.v})
			src, err := NewParquet([]string{path}, ParquetOptions{Columns: []Column{c.col}})
			if err == nil {
				_, err = src.Read(new(Batch), 10)
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
	in := feature.Input{Kind: feature.KindInt64}
	err := parquetAppend(&Column{Name: "x", Role: RoleSparse}, &in, parquet.FixedLenByteArrayValue([]byte{1, 2, 3}), leafType{half: true})
	assert.EqualError(t, err, `FIXED_LEN_BYTE_ARRAY value "\x01\x02\x03" is not a FLOAT16 value (2 bytes)`)
}
