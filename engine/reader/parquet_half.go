package reader

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// Parquet FLOAT16 values (pyarrow's float16): IEEE 754 binary16, two little-endian bytes of a
// FIXED_LEN_BYTE_ARRAY(2) leaf. parquet-go has no type for them (it reads the leaf as plain bytes),
// so the reader finds them in the file's schema and reads each value as the FLOAT holding it.

// leafLogicalTypes are the logical types a file's schema gives its leaf columns, in column order
// (leaves are numbered as the schema lists them, depth first; a leaf is an element with a type).
func leafLogicalTypes(md *format.FileMetaData) []*format.LogicalType {
	var out []*format.LogicalType
	for i := range md.Schema {
		if md.Schema[i].Type.Valid {
			out = append(out, &md.Schema[i].LogicalType)
		}
	}
	return out
}

// halfFloat32 is the binary16 value of bits h as a float32, which holds every one exactly
// (subnormals, ±0, ±Inf and NaN included).
func halfFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp, frac := uint32(h>>10)&0x1f, uint32(h)&0x3ff
	switch exp {
	case 0x1f: // ±Inf, NaN (its payload kept)
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case 0: // ±0 and subnormals: frac × 2^-24
		return math.Float32frombits(sign | math.Float32bits(float32(frac)/(1<<24)))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// halfBits is a FLOAT16 value's bits.
func halfBits(v parquet.Value) (uint16, error) {
	if v.Kind() != parquet.FixedLenByteArray {
		return 0, fmt.Errorf("%s values cannot be read as FLOAT16 values", v.Kind())
	}
	if len(v.ByteArray()) != 2 {
		return 0, fmt.Errorf("%s value %q is not a FLOAT16 value (2 bytes)", v.Kind(), v.ByteArray())
	}
	return binary.LittleEndian.Uint16(v.ByteArray()), nil
}

// halfValue is v read as its leaf's type says: a FLOAT16 leaf's value (its bytes) becomes the
// FLOAT value holding it exactly, so that it reads as a FLOAT column's values do; other values,
// one halfValue already gave included, are v.
func halfValue(v parquet.Value, lt leafType) (parquet.Value, error) {
	if !lt.half || v.Kind() != parquet.FixedLenByteArray {
		return v, nil
	}
	h, err := halfBits(v)
	if err != nil {
		return v, err
	}
	return parquet.FloatValue(halfFloat32(h)), nil
}

// kindName names a value's type in an error message: its kind, or FLOAT16 for a half float.
func kindName(v parquet.Value, lt leafType) string {
	if lt.half {
		return "FLOAT16"
	}
	return v.Kind().String()
}

// halfText is the shortest decimal text that reads back as half h (rounding to nearest, ties to
// even), written as strconv writes a float's shortest text: a string ID column's text of a FLOAT16
// value, as a FLOAT's is its shortest float32 text (half 0.1 is "0.1", where its float32 text
// would be "0.099975586").
func halfText(h uint16) string {
	x := float64(halfFloat32(h))
	a := h & 0x7fff
	if a == 0 || a >= 0x7c00 { // ±0, ±Inf, NaN
		return strconv.FormatFloat(x, 'g', -1, 32)
	}
	// |x| reads back from the numbers closer to it than to its neighbours (past 65504 the next
	// half would be 65536), and from a number halfway to one when its last bit is 0.
	ax, next := math.Abs(x), 65536.0
	if a+1 < 0x7c00 {
		next = float64(halfFloat32(a + 1))
	}
	lo, hi := (float64(halfFloat32(a-1))+ax)/2, (ax+next)/2
	reads := func(y float64) bool { return lo < y && y < hi || (y == lo || y == hi) && a&1 == 0 }
	e := 0 // 10^e <= ax < 10^(e+1)
	for math.Pow10(e) > ax {
		e--
	}
	for math.Pow10(e+1) <= ax {
		e++
	}
	// The numbers of n significant digits either side of |x|, as the float64s nearest them: ax·10^k
	// is exact (11 bits times 10^k, k <= 12), ax/10^-k never rounds across an integer, and a
	// quotient or product of exact numbers rounds to the nearest float64.
	for n := 1; ; n++ {
		k := n - 1 - e
		p := math.Pow10(max(k, -k))
		t, scale := ax*p, func(q float64) float64 { return q / p }
		if k < 0 {
			t, scale = ax/p, func(q float64) float64 { return q * p }
		}
		d, u := scale(math.Floor(t)), scale(math.Ceil(t))
		if u-ax < ax-d { // the nearer first
			d, u = u, d
		}
		for _, y := range [2]float64{d, u} {
			// Five digits tell every half apart: the nearest of them always reads back.
			if reads(y) || n >= 5 && y == d {
				return strconv.FormatFloat(math.Copysign(y, x), 'g', -1, 64)
			}
		}
	}
}
