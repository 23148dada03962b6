package reader

import (
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// writeLeaf writes a Parquet file of one required column "x" of the given node, one value a row.
func writeLeaf(t *testing.T, node parquet.Node, vals []parquet.Value) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.parquet")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := parquet.NewWriter(f, parquet.NewSchema("t", parquet.Group{"x": node}))
	rows := make([]parquet.Row, len(vals))
	for i, v := range vals {
		rows[i] = parquet.Row{v.Level(0, 0, 0)}
	}
	_, err = w.WriteRows(rows)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	return path
}

// unscaled is a decimal literal's unscaled integer at a scale ("-3.5", 2 -> -350).
func unscaled(t *testing.T, s string, scale int) *big.Int {
	t.Helper()
	r, ok := new(big.Rat).SetString(s)
	require.True(t, ok, s)
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	require.True(t, r.IsInt(), "%s has more than %d digits after the point", s, scale)
	return r.Num()
}

// twos is n as big-endian two's complement in width bytes (0: the fewest that hold it).
func twos(n *big.Int, width int) []byte {
	if width == 0 {
		width = n.BitLen()/8 + 1
	}
	m := new(big.Int).Set(n)
	if n.Sign() < 0 {
		m.Add(m, new(big.Int).Lsh(big.NewInt(1), uint(8*width)))
	}
	return m.FillBytes(make([]byte, width))
}

// decimalStorage is one physical type a DECIMAL is stored in.
type decimalStorage struct {
	name  string
	typ   parquet.Type
	value func(n *big.Int) parquet.Value
}

var (
	decInt32 = decimalStorage{"INT32", parquet.Int32Type, func(n *big.Int) parquet.Value { return parquet.Int32Value(int32(n.Int64())) }}
	decInt64 = decimalStorage{"INT64", parquet.Int64Type, func(n *big.Int) parquet.Value { return parquet.Int64Value(n.Int64()) }}
	decFLBA  = func(width int) decimalStorage {
		return decimalStorage{"FLBA", parquet.FixedLenByteArrayType(width), func(n *big.Int) parquet.Value {
			return parquet.FixedLenByteArrayValue(twos(n, width))
		}}
	}
	decBytes = decimalStorage{"BYTE_ARRAY", parquet.ByteArrayType, func(n *big.Int) parquet.Value {
		return parquet.ByteArrayValue(twos(n, 0))
	}}
)

// decimalFile writes the decimal literals as column "x" of type DECIMAL(precision, scale).
func decimalFile(t *testing.T, st decimalStorage, precision, scale int, lits []string) string {
	vals := make([]parquet.Value, len(lits))
	for i, s := range lits {
		vals[i] = st.value(unscaled(t, s, scale))
	}
	return writeLeaf(t, parquet.Decimal(scale, precision, st.typ), vals)
}

// nearest is the float64 nearest to a decimal literal (strconv rounds correctly).
func nearest(t *testing.T, s string) float64 {
	x, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return x
}

// DECIMAL columns read as their decimal values, whichever physical type holds them: before, an
// INT32/INT64 decimal came out unscaled (1.25 as 125) and a FLBA one failed as text.
func TestParquetDecimalValues(t *testing.T) {
	big38 := "12345678901234567890123.4567890123" // past int64 unscaled: the big.Rat path
	cases := []struct {
		st               decimalStorage
		precision, scale int
		lits             []string
	}{
		{decInt32, 9, 2, []string{"1.25", "-3.50", "0.07", "0.00", "21474836.47", "-21474836.48"}},
		{decInt32, 5, 2, []string{"1.00", "0.00", "-1.00"}},
		{decInt32, 9, 0, []string{"7", "-12", "999999999"}},
		{decInt64, 12, 1, []string{"7.5", "12.0", "-0.1"}},
		{decInt64, 18, 4, []string{"12345678901234.5678", "-0.0001", "0.3333"}},
		{decInt64, 18, 2, []string{"9999999999999999.99", "-9223372036854775.80"}}, // past 2^53 unscaled
		{decFLBA(4), 9, 2, []string{"1.25", "-3.50", "0.07"}},
		{decFLBA(16), 38, 10, []string{big38, "-" + big38, "0.0000000001", "-1"}},
		{decFLBA(16), 38, 30, []string{"1.5", "-0.000000000000000000000000000001"}}, // 10^30: no exact float64
		{decBytes, 20, 3, []string{"1.250", "-3.500", "123456789012345678.901"}},
	}
	for _, c := range cases {
		t.Run(c.st.name+"/"+strconv.Itoa(c.precision)+","+strconv.Itoa(c.scale), func(t *testing.T) {
			path := decimalFile(t, c.st, c.precision, c.scale, c.lits)
			wantF64 := make([]float64, len(c.lits))
			wantF32 := make([]float32, len(c.lits))
			for i, s := range c.lits {
				wantF64[i] = nearest(t, s)
				wantF32[i] = float32(wantF64[i])
			}
			read := func(col Column) *Batch {
				src, err := NewParquet([]string{path}, ParquetOptions{Columns: []Column{col}})
				require.NoError(t, err)
				bs := readAll(t, src, 100)
				require.Len(t, bs, 1)
				return &bs[0]
			}
			assert.Equal(t, wantF32, read(Column{Name: "x", Role: RoleLabel}).Labels, "label")
			assert.Equal(t, wantF32, read(Column{Name: "x", Role: RoleDense}).Dense, "dense")
			assert.Equal(t, wantF64, read(Column{Name: "x", Role: RoleSparse, Type: "float"}).Inputs[0].F64, "float")
			in := read(Column{Name: "x", Role: RoleSparse, Type: "string"}).Inputs[0]
			var texts []string
			at := 0
			for _, n := range in.ByteLens {
				texts = append(texts, string(in.Bytes[at:at+int(n)]))
				at += int(n)
			}
			wantText := make([]string, len(c.lits)) // the literal with the scale's digits after the point
			for i, s := range c.lits {
				r, _ := new(big.Rat).SetString(s)
				wantText[i] = r.FloatString(c.scale)
			}
			assert.Equal(t, wantText, texts, "string")
			if c.scale == 0 {
				var ints []int64
				for _, s := range c.lits {
					x, err := strconv.ParseInt(s, 10, 64)
					require.NoError(t, err)
					ints = append(ints, x)
				}
				assert.Equal(t, ints, read(Column{Name: "x", Role: RoleSparse}).Inputs[0].Ints, "int")
			}
		})
	}
}

// A scale-0 DECIMAL is an integer ID in any storage, FLBA and BYTE_ARRAY ones too while it fits an
// int64; the decimal text of a string column keeps the scale's digits.
func TestParquetDecimalIDs(t *testing.T) {
	maxI, minI := "9223372036854775807", "-9223372036854775808"
	cases := []struct {
		name string
		path func(t *testing.T) string
		col  Column
		want []int64
		text []string
		err  string
	}{
		{"FLBA 16 bytes", func(t *testing.T) string {
			return decimalFile(t, decFLBA(16), 38, 0, []string{"7", "-12", maxI, minI})
		}, Column{Name: "x", Role: RoleSparse}, []int64{7, -12, 1<<63 - 1, -1 << 63}, nil, ""},
		{"FLBA 8 bytes", func(t *testing.T) string {
			return decimalFile(t, decFLBA(8), 18, 0, []string{"-1", maxI, minI})
		}, Column{Name: "x", Role: RoleSparse, Type: "hex"}, []int64{-1, 1<<63 - 1, -1 << 63}, nil, ""},
		{"BYTE_ARRAY", func(t *testing.T) string {
			return decimalFile(t, decBytes, 30, 0, []string{"0", "255", "-129"})
		}, Column{Name: "x", Role: RoleSparse}, []int64{0, 255, -129}, nil, ""},
		{"INT64 as string", func(t *testing.T) string {
			return decimalFile(t, decInt64, 12, 1, []string{"7.5", "12.0", "-0.3"})
		}, Column{Name: "x", Role: RoleSparse, Type: "string"}, nil, []string{"7.5", "12.0", "-0.3"}, ""},
		{"past int64", func(t *testing.T) string {
			return decimalFile(t, decFLBA(16), 38, 0, []string{"1", "9223372036854775808"})
		}, Column{Name: "x", Role: RoleSparse}, nil, nil,
			"row 1 column 1 (x): DECIMAL(38,0) value 9223372036854775808 is past int64, the IDs' type"},
		{"past int64 below", func(t *testing.T) string {
			return decimalFile(t, decBytes, 30, 0, []string{"-9223372036854775809"})
		}, Column{Name: "x", Role: RoleSparse}, nil, nil,
			"row 0 column 1 (x): DECIMAL(30,0) value -9223372036854775809 is past int64, the IDs' type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, err := NewParquet([]string{c.path(t)}, ParquetOptions{Columns: []Column{c.col}})
			require.NoError(t, err)
			var b Batch
			_, err = src.Read(&b, 100)
			if c.err != "" {
				require.Error(t, err)
				assert.True(t, errors.Is(err, errs.ErrInvalid))
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			if c.text != nil {
				assert.Equal(t, strings.Join(c.text, ""), string(b.Inputs[0].Bytes))
				return
			}
			assert.Equal(t, c.want, b.Inputs[0].Ints)
		})
	}
}

// Errors: a DECIMAL with digits after the point is no ID (refused at open, before any row, like a
// non-integral DOUBLE value is per row), and values past what the reader takes are malformed.
func TestParquetDecimalErrors(t *testing.T) {
	sparse := Column{Name: "x", Role: RoleSparse}
	cases := []struct {
		name   string
		path   func(t *testing.T) string
		col    Column
		atOpen bool
		err    string
	}{
		{"scaled ID INT64", func(t *testing.T) string {
			return decimalFile(t, decInt64, 12, 1, []string{"7.5", "12.0"})
		}, sparse, true, `column "x" is DECIMAL(12,1): its values are not valid int values (IDs must be integers)`},
		{"scaled ID INT32 hex", func(t *testing.T) string {
			return decimalFile(t, decInt32, 9, 2, []string{"1.00"})
		}, Column{Name: "x", Role: RoleSparse, Type: "hex"}, true, `column "x" is DECIMAL(9,2): its values are not valid hex values`},
		{"scaled ID FLBA", func(t *testing.T) string {
			return decimalFile(t, decFLBA(16), 38, 2, []string{"1.00"})
		}, sparse, true, `column "x" is DECIMAL(38,2): its values are not valid int values`},
		{"scale past 76", func(t *testing.T) string {
			return decimalFile(t, decBytes, 80, 77, []string{"1"})
		}, Column{Name: "x", Role: RoleDense}, true, `column "x" is DECIMAL(80,77): a scale outside [0, 76] is not read`},
		{"dense past float32", func(t *testing.T) string {
			return decimalFile(t, decBytes, 40, 0, []string{"1", "1" + strings.Repeat("0", 39)})
		}, Column{Name: "x", Role: RoleDense}, false,
			"row 1 column 1 (x): DECIMAL(40,0) value 1" + strings.Repeat("0", 39) + " is out of float32 range"},
		{"float past float64", func(t *testing.T) string {
			return decimalFile(t, decBytes, 400, 0, []string{"1" + strings.Repeat("0", 310)})
		}, Column{Name: "x", Role: RoleSparse, Type: "float"}, false,
			"row 0 column 1 (x): DECIMAL(400,0) value 1" + strings.Repeat("0", 310) + " is out of float64 range"},
		{"empty BYTE_ARRAY", func(t *testing.T) string {
			return writeLeaf(t, parquet.Decimal(2, 9, parquet.ByteArrayType), []parquet.Value{parquet.ByteArrayValue([]byte{})})
		}, Column{Name: "x", Role: RoleLabel}, false, "row 0 column 1 (x): BYTE_ARRAY DECIMAL value is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			src, err := NewParquet([]string{path}, ParquetOptions{Columns: []Column{c.col}})
			if !c.atOpen {
				require.NoError(t, err)
				var b Batch
				_, err = src.Read(&b, 100)
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, errs.ErrInvalid), "%v", err)
			var pe *ParseError
			require.True(t, errors.As(err, &pe), "%v", err)
			assert.Equal(t, "x", pe.Name)
			assert.True(t, strings.HasPrefix(err.Error(), path+": ") || strings.HasPrefix(err.Error(), path+" row "), "%v", err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
}

// Two fields of one name: before, Lookup took one of them without a word (pyarrow refuses such a
// column, and the CSV reader a name twice in the header).
func TestParquetDuplicateColumn(t *testing.T) {
	type top struct {
		A int64 `parquet:"id"`
		L int64 `parquet:"label"`
		B int64 `parquet:"id"`
	}
	type inner struct {
		A int64 `parquet:"b"`
		B int64 `parquet:"b"`
	}
	type nested struct {
		L int64 `parquet:"label"`
		G inner `parquet:"g"`
	}
	write := func(t *testing.T, schema *parquet.Schema) string {
		path := filepath.Join(t.TempDir(), "dup.parquet")
		f, err := os.Create(path)
		require.NoError(t, err)
		w := parquet.NewWriter(f, schema) // rows by hand: the struct writer refuses such a schema
		_, err = w.WriteRows([]parquet.Row{{parquet.Int64Value(1).Level(0, 0, 0), parquet.Int64Value(0).Level(0, 0, 1),
			parquet.Int64Value(10).Level(0, 0, 2)}})
		require.NoError(t, err)
		require.NoError(t, w.Close())
		require.NoError(t, f.Close())
		return path
	}
	label := Column{Name: "label", Role: RoleLabel}
	cases := []struct {
		name   string
		schema *parquet.Schema
		cols   []Column
		err    string
	}{
		{"top level", parquet.SchemaOf(top{}), []Column{label, {Name: "id", Role: RoleSparse}},
			`column "id" is in the schema twice (fields 1 and 3): rename one`},
		{"top level as dense", parquet.SchemaOf(top{}), []Column{{Name: "id", Role: RoleDense}},
			`column "id" is in the schema twice (fields 1 and 3): rename one`},
		{"in a group", parquet.SchemaOf(nested{}), []Column{label, {Name: "g.b", Role: RoleSparse}},
			`column "g.b" is in the schema twice (fields 1 and 2): rename one`},
		{"one of them", parquet.SchemaOf(top{}), []Column{label}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := write(t, c.schema)
			src, err := NewParquet([]string{path}, ParquetOptions{Columns: c.cols})
			if c.err == "" {
				require.NoError(t, err)
				assert.Equal(t, []float32{0}, readAll(t, src, 10)[0].Labels)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, errs.ErrInvalid))
			assert.EqualError(t, err, path+": "+c.err)
		})
	}
}
