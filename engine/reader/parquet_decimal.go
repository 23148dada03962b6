package reader

import (
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/recgo/recgo/engine/feature"
)

// Parquet DECIMAL values: an unscaled integer (INT32, INT64, or big-endian two's complement bytes)
// and the leaf's scale; read as the decimal number they stand for, never as the unscaled integer.

// maxDecimalScale bounds the DECIMAL scales read: Arrow's widest decimal (decimal256) has 76
// digits; a larger scale is no real file's, and 10^scale must stay cheap to build.
const maxDecimalScale = 76

// leafType is what reading a leaf's values needs of its logical type.
type leafType struct {
	unsigned bool // UINT_8..UINT_64: stored in INT32/INT64, the high bit a value bit
	// decimal (nil: not one) marks a DECIMAL leaf: a value is an unscaled integer (an INT32, an
	// INT64, or big-endian two's complement bytes) to divide by 10^Scale.
	decimal *format.DecimalType
	pow10   float64  // 10^Scale, exact in a float64 up to 10^22 (0 past it)
	den     *big.Int // 10^Scale, for the values the float64 division cannot take exactly
	// half marks a FLOAT16 leaf: a value is an IEEE 754 half float, two little-endian bytes of a
	// FIXED_LEN_BYTE_ARRAY(2), read as a FLOAT value is (see halfValue).
	half bool
}

// leafTypeOf reads a leaf's logical type. parquet-go gives a leaf of the converted type DECIMAL
// (with its scale and precision) the DECIMAL logical type too, so that one test covers both; it
// gives a FLOAT16 leaf none (it has no type for one), so file is the logical type the file's
// schema gives the leaf (nil: none).
func leafTypeOf(n parquet.Node, file *format.LogicalType) (leafType, error) {
	lt := leafType{unsigned: unsignedLeaf(n)}
	if file != nil {
		if _, ok := file.Value.(*format.Float16Type); ok {
			if t := n.Type(); t.Kind() != parquet.FixedLenByteArray || t.Length() != 2 {
				return lt, fmt.Errorf("is FLOAT16 stored as %s: a half float is a FIXED_LEN_BYTE_ARRAY(2)", t)
			}
			lt.half = true
			return lt, nil
		}
	}
	l := n.Type().LogicalType()
	if l == nil {
		return lt, nil
	}
	d, ok := l.Value.(*format.DecimalType)
	if !ok {
		return lt, nil
	}
	if d.Scale < 0 || d.Scale > maxDecimalScale {
		return lt, fmt.Errorf("is %s: a scale outside [0, %d] is not read", d, maxDecimalScale)
	}
	lt.decimal = d
	if d.Scale <= 22 {
		lt.pow10 = math.Pow10(int(d.Scale))
	}
	lt.den = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale)), nil)
	return lt, nil
}

// maxDecimalBytes bounds a DECIMAL value's bytes (past its sign extension): 256 bytes hold any
// decimal a float64 can (10^308 takes 129), and keep big.Int work and error texts small.
const maxDecimalBytes = 256

// trimSign drops the sign-extension bytes that lead a big-endian two's complement integer (an
// FLBA's width is fixed by the precision, so small values are padded).
func trimSign(b []byte) []byte {
	for len(b) > 1 && (b[0] == 0 && b[1]&0x80 == 0 || b[0] == 0xff && b[1]&0x80 != 0) {
		b = b[1:]
	}
	return b
}

// decimalInt is a DECIMAL value's unscaled integer; ok is false when it is bytes holding an
// integer past int64 (then decimalUnscaled reads it).
func decimalInt(v parquet.Value) (x int64, ok bool, err error) {
	switch v.Kind() {
	case parquet.Int32, parquet.Int64:
		return parquetInt(v), true, nil
	case parquet.ByteArray, parquet.FixedLenByteArray:
		b := trimSign(v.ByteArray())
		if len(b) == 0 {
			return 0, false, fmt.Errorf("%s DECIMAL value is empty", v.Kind())
		}
		if len(b) > 8 {
			return 0, false, nil
		}
		u := uint64(0)
		if b[0]&0x80 != 0 { // negative: ones above the bytes
			u = math.MaxUint64
		}
		for _, c := range b {
			u = u<<8 | uint64(c)
		}
		return int64(u), true, nil
	}
	return 0, false, fmt.Errorf("%s values cannot be read as DECIMAL values", v.Kind())
}

// decimalUnscaled is a DECIMAL value's unscaled integer as a big.Int (for the slow paths).
func decimalUnscaled(v parquet.Value) (*big.Int, error) {
	x, ok, err := decimalInt(v)
	if err != nil {
		return nil, err
	}
	if ok {
		return big.NewInt(x), nil
	}
	b := trimSign(v.ByteArray())
	if len(b) > maxDecimalBytes {
		return nil, fmt.Errorf("%s DECIMAL value of %d bytes is past the %d bytes read", v.Kind(), len(b), maxDecimalBytes)
	}
	n := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return n, nil
}

// decimalFloat is a DECIMAL value as the float64 nearest to it: unscaled / 10^scale, a float64
// division when both are exact float64s (IEEE division rounds correctly), else through big.Rat.
func decimalFloat(v parquet.Value, lt leafType) (float64, error) {
	x, ok, err := decimalInt(v)
	if err != nil {
		return 0, err
	}
	if ok && lt.pow10 != 0 && x >= -1<<53 && x <= 1<<53 {
		return float64(x) / lt.pow10, nil
	}
	n, err := decimalUnscaled(v)
	if err != nil {
		return 0, err
	}
	f, _ := new(big.Rat).SetFrac(n, lt.den).Float64()
	if math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s value %s is out of float64 range", lt.decimal, decimalText(n, lt))
	}
	return f, nil
}

// decimalText writes a DECIMAL value's unscaled integer n in plain notation with its scale's
// digits after the point (1.00, -3.50, 0.07), as the decimal strings of Python and Spark do.
func decimalText(n *big.Int, lt leafType) string {
	s := n.String()
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	scale := int(lt.decimal.Scale)
	if scale == 0 {
		return sign + s
	}
	if len(s) <= scale {
		s = strings.Repeat("0", scale-len(s)+1) + s
	}
	return sign + s[:len(s)-scale] + "." + s[len(s)-scale:]
}

// describe names a value in an error message: its kind and value, or a DECIMAL's type and
// decimal value.
func describe(v parquet.Value, lt leafType) string {
	if lt.decimal != nil {
		if n, err := decimalUnscaled(v); err == nil {
			return fmt.Sprintf("%s value %s", lt.decimal, decimalText(n, lt))
		}
	}
	return fmt.Sprintf("%s value %v", v.Kind(), v)
}

// decimalAppend appends a DECIMAL value to a sparse or sequence column's input: its decimal text
// for a string column, its nearest float64 for a float one, and for an int (or hex) column, whose
// leaf openFile made sure has scale 0, its integer if that fits an int64.
func decimalAppend(c *Column, in *feature.Input, v parquet.Value, lt leafType) error {
	switch in.Kind {
	case feature.KindBytes:
		n, err := decimalUnscaled(v)
		if err != nil {
			return err
		}
		appendValue(c, in, []byte(decimalText(n, lt)))
		return nil
	case feature.KindFloat64:
		x, err := decimalFloat(v, lt)
		if err != nil {
			return err
		}
		in.F64 = append(in.F64, x)
		return nil
	}
	if lt.decimal.Scale != 0 {
		return fmt.Errorf("%s is not a valid %s value", describe(v, lt), typeName(c))
	}
	x, ok, err := decimalInt(v)
	if err != nil {
		return err
	}
	if !ok {
		if _, err := decimalUnscaled(v); err != nil {
			return err
		}
		return fmt.Errorf("%s is past int64, the IDs' type", describe(v, lt))
	}
	in.Ints = append(in.Ints, x)
	return nil
}
