package reader

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// checkBatch asserts the structural invariants every successfully parsed batch keeps.
func checkBatch(t *testing.T, s Schema, b *Batch) {
	if len(b.Labels) != b.Size || len(b.Dense) != b.Size*len(s.Dense) || len(b.Inputs) != len(s.Fields) {
		t.Fatalf("batch of %d: %d labels, %d dense, %d inputs", b.Size, len(b.Labels), len(b.Dense), len(b.Inputs))
	}
	for i, in := range b.Inputs {
		n := int64(0)
		for _, l := range in.Lengths {
			if l < 0 {
				t.Fatalf("input %d: negative length", i)
			}
			n += l
		}
		if len(in.Lengths) != b.Size || n != int64(len(in.Ints)+len(in.F64)+len(in.ByteLens)) {
			t.Fatalf("input %d: %d lengths summing to %d for %d values", i, len(in.Lengths), n, len(in.Ints)+len(in.F64)+len(in.ByteLens))
		}
	}
}

// FuzzCriteoLine parses one arbitrary line, for a caller that needs the labels or not: it either
// yields one sample or a ParseError naming line 1; nothing panics.
func FuzzCriteoLine(f *testing.F) {
	for _, needs := range []bool{false, true} {
		f.Add([]byte(goodLine), needs)
		f.Add([]byte("1\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"), needs)
		f.Add([]byte("0\t-1\t99999999999999999999\tff"), needs)
		f.Add([]byte(goodLine[2:]), needs)      // a test file's line: no label, 39 fields
		f.Add([]byte("\t"+goodLine[4:]), needs) // and with I1 missing
	}
	schema := criteoSchema(true)
	var b Batch
	f.Fuzz(func(t *testing.T, line []byte, needsLabels bool) {
		p := &criteoParser{hasLabel: true, needsLabels: needsLabels, file: func() string { return "fuzz" }}
		b.Reset(schema, 1)
		err := p.parse(line, 1, &b)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != 1 || !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if b.Size != 1 {
			t.Fatalf("size %d", b.Size)
		}
		checkBatch(t, schema, &b)
	})
}

// FuzzCSVLine parses one arbitrary line under a fixed schema.
func FuzzCSVLine(f *testing.F) {
	f.Add([]byte("1,1,10,ff,shoes,1|2|3,2.5"))
	f.Add([]byte("2,0,,a0,,,"))
	f.Add([]byte(",,,,,,,,"))
	plan, err := planColumns(slices.Clone(csvCols))
	if err != nil {
		f.Fatal(err)
	}
	p := &csvParser{plan: plan, delim: ',', file: func() string { return "fuzz" }}
	if err := p.header("fuzz", []byte("id,click,user,site,cat,hist,price")); err != nil {
		f.Fatal(err)
	}
	var b Batch
	f.Fuzz(func(t *testing.T, line []byte) {
		b.Reset(plan.schema, 1)
		if err := p.parse(line, 2, &b); err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != 2 {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		checkBatch(t, plan.schema, &b)
	})
}

// FuzzCSVSchema opens a file whose header and first row are arbitrary against a schema whose
// column names, roles and types are arbitrary: construction and reading either fail with a
// classified error or produce consistent batches.
func FuzzCSVSchema(f *testing.F) {
	f.Add("a,b,c", "1,2,3", "a", "label", "", "b", "sequence", "hex")
	f.Add("x", "", "x", "dense", "", "x", "sparse", "string")
	f.Add("a;b", "1;2", "a", "sparse", "float", "b", "skip", "")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, header, row, n1, r1, t1, n2, r2, t2 string) {
		path := filepath.Join(dir, "f.csv")
		if err := os.WriteFile(path, []byte(header+"\n"+row+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cols := []Column{{Name: n1, Role: Role(r1), Type: t1}, {Name: n2, Role: Role(r2), Type: t2, Sep: ";"}}
		src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true})
		if err != nil {
			// ErrIO: a header that starts with gzip's magic bytes makes a damaged gzip file
			if !errors.Is(err, errs.ErrInvalid) && !errors.Is(err, errs.ErrIO) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		defer src.Close()
		var b Batch
		if _, err := src.Read(&b, 4); err != nil {
			return
		}
		checkBatch(t, src.Schema(), &b)
	})
}

// FuzzParquetDecimal reads arbitrary DECIMAL values (INT32, INT64 or two's complement bytes, at any
// scale the reader takes) against math/big: the float64 is the nearest one to the exact value (the
// fast float64 division included), the int64 is there exactly when the value fits one, and the
// text is the exact value.
func FuzzParquetDecimal(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0x7d}, uint8(2), uint8(0))                                  // 1.25
	f.Add([]byte{0xff, 0xff, 0xfe, 0xa2}, uint8(2), uint8(2))                         // -3.50
	f.Add([]byte{0x0d, 0xe0, 0xb6, 0xb3, 0xa7, 0x63, 0xff, 0xff}, uint8(2), uint8(1)) // past 2^53
	f.Add([]byte{0, 0x80, 0, 0, 0, 0, 0, 0, 0}, uint8(0), uint8(2))                   // 2^63
	f.Add([]byte{0xff, 0x80, 0, 0, 0, 0, 0, 0, 0}, uint8(30), uint8(2))               // -2^63
	f.Add([]byte{0x80}, uint8(76), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, scale, kind uint8) {
		scale %= maxDecimalScale + 1
		var v parquet.Value
		var typ parquet.Type
		var n *big.Int
		precision := 9
		switch kind % 3 {
		case 0:
			x := int32(binary.BigEndian.Uint32(append(make([]byte, 4), b...)[len(b):]))
			v, typ, n = parquet.Int32Value(x), parquet.Int32Type, big.NewInt(int64(x))
		case 1:
			x := int64(binary.BigEndian.Uint64(append(make([]byte, 8), b...)[len(b):]))
			v, typ, n, precision = parquet.Int64Value(x), parquet.Int64Type, big.NewInt(x), 18
		default:
			if len(b) == 0 {
				return
			}
			v, typ, precision = parquet.ByteArrayValue(b), parquet.ByteArrayType, 80
			n = new(big.Int).SetBytes(b)
			if b[0]&0x80 != 0 {
				n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
			}
		}
		lt, err := leafTypeOf(parquet.Decimal(int(scale), precision, typ), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(trimSign(b)) > maxDecimalBytes && kind%3 == 2 {
			if _, err := decimalFloat(v, lt); err == nil {
				t.Fatalf("a value of %d bytes read", len(b))
			}
			return
		}
		exact := new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
		want, _ := exact.Float64()
		got, err := decimalFloat(v, lt)
		if math.IsInf(want, 0) != (err != nil) || err == nil && got != want {
			t.Fatalf("%s at scale %d: got %v (%v), want %v", n, scale, got, err, want)
		}
		x, ok, err := decimalInt(v)
		if err != nil || ok != n.IsInt64() || ok && x != n.Int64() {
			t.Fatalf("%s: decimalInt %d, %v, %v", n, x, ok, err)
		}
		text := decimalText(n, lt)
		if r, ok := new(big.Rat).SetString(text); !ok || r.Cmp(exact) != 0 || text != exact.FloatString(int(scale)) {
			t.Fatalf("%s at scale %d: text %q", n, scale, text)
		}
	})
}

// FuzzParquetFloat16 reads arbitrary bytes as a FLOAT16 leaf's value: two bytes read as the half
// they hold (a number when finite, an ID when integral too, the shortest text that reads back),
// other lengths fail; nothing panics.
func FuzzParquetFloat16(f *testing.F) {
	for _, b := range [][]byte{{0, 0x3c}, {0x66, 0x2e}, {1, 0}, {0xff, 0x7b}, {0, 0x7e}, {0, 0xfc}, {0, 0x80}, {}, {1, 2, 3}} {
		f.Add(b)
	}
	lt := leafType{half: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		v := parquet.FixedLenByteArrayValue(b)
		cols := map[feature.Kind]*Column{
			feature.KindInt64:   {Name: "x", Role: RoleSparse},
			feature.KindFloat64: {Name: "x", Role: RoleSparse, Type: "float"},
			feature.KindBytes:   {Name: "x", Role: RoleSparse, Type: "string"},
		}
		x, ferr := parquetFloat(v, lt)
		ins := map[feature.Kind]*feature.Input{}
		failed := map[feature.Kind]error{}
		for k, c := range cols {
			ins[k] = &feature.Input{Kind: k}
			failed[k] = parquetAppend(c, ins[k], v, lt)
		}
		if len(b) != 2 {
			if ferr == nil || failed[feature.KindInt64] == nil || failed[feature.KindFloat64] == nil || failed[feature.KindBytes] == nil {
				t.Fatalf("%d bytes read as a FLOAT16 value", len(b))
			}
			return
		}
		h := binary.LittleEndian.Uint16(b)
		want := float64(halfFloat32(h))
		finite := !math.IsNaN(want) && !math.IsInf(want, 0)
		if (ferr == nil) != finite || finite && x != want || (failed[feature.KindFloat64] == nil) != finite {
			t.Fatalf("%#04x: %v (%v), want %v", h, x, ferr, want)
		}
		if integral := finite && want == math.Trunc(want); (failed[feature.KindInt64] == nil) != integral ||
			integral && ins[feature.KindInt64].Ints[0] != int64(want) {
			t.Fatalf("%#04x as an ID: %v %v", h, ins[feature.KindInt64].Ints, failed[feature.KindInt64])
		}
		text := string(ins[feature.KindBytes].Bytes)
		if y, err := strconv.ParseFloat(text, 64); failed[feature.KindBytes] != nil || err != nil ||
			finite && math.Abs(y-want) > math.Max(math.Abs(want)/2048, 0x1p-25) { // within half a half's spacing
			t.Fatalf("%#04x: text %q", h, text)
		}
	})
}
