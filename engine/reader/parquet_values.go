package reader

import (
	"fmt"
	"math"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"

	"github.com/recgo/recgo/engine/feature"
)

// unsignedLeaf reports whether a leaf's integers are unsigned (a UINT_8..UINT_64 logical or
// converted type): Parquet stores them in INT32/INT64 physical values, the high bit a value bit.
func unsignedLeaf(n parquet.Node) bool {
	t := n.Type()
	if lt := t.LogicalType(); lt != nil {
		if it, ok := lt.Value.(*format.IntType); ok {
			return !it.IsSigned
		}
	}
	if ct := t.ConvertedType(); ct != nil {
		switch *ct {
		case deprecated.Uint8, deprecated.Uint16, deprecated.Uint32, deprecated.Uint64:
			return true
		}
	}
	return false
}

// parquetUint is an integer value of an unsigned column.
func parquetUint(v parquet.Value) uint64 {
	if v.Kind() == parquet.Int32 {
		return uint64(uint32(v.Int32()))
	}
	return uint64(v.Int64())
}

// byteArray is the bytes of a BYTE_ARRAY or FIXED_LEN_BYTE_ARRAY value, nil for other kinds: what a
// value adds to a byte-string field when it is appended as it is (a number's text is short).
func byteArray(v parquet.Value) []byte {
	switch v.Kind() {
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return v.ByteArray()
	}
	return nil
}

// parquetInt is an integer value of a signed column.
func parquetInt(v parquet.Value) int64 {
	if v.Kind() == parquet.Int32 {
		return int64(v.Int32())
	}
	return v.Int64()
}

// parquetFloat reads a numeric (or numeric text) value as a finite float64, as its leaf's type
// says (unsigned integers, DECIMAL values scaled, FLOAT16 values as FLOATs).
func parquetFloat(v parquet.Value, lt leafType) (float64, error) {
	if lt.decimal != nil {
		return decimalFloat(v, lt)
	}
	v, err := halfValue(v, lt)
	if err != nil {
		return 0, err
	}
	var x float64
	switch v.Kind() {
	case parquet.Int32, parquet.Int64:
		if lt.unsigned {
			x = float64(parquetUint(v))
		} else {
			x = float64(parquetInt(v))
		}
	case parquet.Float:
		x = float64(v.Float())
	case parquet.Double:
		x = v.Double()
	case parquet.Boolean:
		if v.Boolean() {
			x = 1
		}
	case parquet.ByteArray, parquet.FixedLenByteArray:
		var ok bool
		if x, ok = parseFloat(v.ByteArray()); !ok {
			return 0, fmt.Errorf("%s value %q is not a number", v.Kind(), v.ByteArray())
		}
	default:
		return 0, fmt.Errorf("%s values cannot be read as numbers", v.Kind())
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%s value %v is not a number", kindName(v, lt), x)
	}
	return x, nil
}

// parquetAppend appends one value to a sparse or sequence column's input: text is parsed as the
// column's type, numbers are taken as they are (a FLOAT or DOUBLE must be an integral int64 for an
// int column, and an unsigned integer at most 2^63-1); DECIMAL values go to decimalAppend, and
// FLOAT16 values are read as FLOATs, a string column taking their shortest text (halfText).
func parquetAppend(c *Column, in *feature.Input, v parquet.Value, lt leafType) error {
	if lt.decimal != nil {
		return decimalAppend(c, in, v, lt)
	}
	if lt.half && in.Kind == feature.KindBytes {
		h, err := halfBits(v)
		if err != nil {
			return err
		}
		appendValue(c, in, []byte(halfText(h)))
		return nil
	}
	v, err := halfValue(v, lt)
	if err != nil {
		return err
	}
	uns := lt.unsigned
	switch v.Kind() {
	case parquet.ByteArray, parquet.FixedLenByteArray:
		if !appendValue(c, in, v.ByteArray()) {
			return fmt.Errorf("%s value %q is not a valid %s value", v.Kind(), v.ByteArray(), typeName(c))
		}
		return nil
	}
	switch in.Kind {
	case feature.KindBytes:
		if uns && (v.Kind() == parquet.Int32 || v.Kind() == parquet.Int64) {
			appendValue(c, in, strconv.AppendUint(nil, parquetUint(v), 10))
		} else {
			appendValue(c, in, []byte(v.String()))
		}
		return nil
	case feature.KindFloat64:
		x, err := parquetFloat(v, lt)
		if err != nil {
			return err
		}
		in.F64 = append(in.F64, x)
		return nil
	}
	switch v.Kind() {
	case parquet.Int32, parquet.Int64:
		if !uns {
			in.Ints = append(in.Ints, parquetInt(v))
		} else if u := parquetUint(v); u <= math.MaxInt64 {
			in.Ints = append(in.Ints, int64(u))
		} else {
			return fmt.Errorf("unsigned value %d is past int64, the IDs' type", u)
		}
	case parquet.Boolean:
		x := int64(0)
		if v.Boolean() {
			x = 1
		}
		in.Ints = append(in.Ints, x)
	case parquet.Float, parquet.Double:
		x := v.Double()
		if v.Kind() == parquet.Float {
			x = float64(v.Float())
		}
		// Integral and inside int64 (-2^63 is, 2^63 is not); NaN fails the first test.
		if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
			return fmt.Errorf("%s value %v is not a valid %s value", kindName(v, lt), x, typeName(c))
		}
		in.Ints = append(in.Ints, int64(x))
	default:
		return fmt.Errorf("%s values cannot be read as %s values", v.Kind(), typeName(c))
	}
	return nil
}
