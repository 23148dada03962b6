package reader

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

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

// FuzzCriteoLine parses one arbitrary line: it either yields one sample or a ParseError naming
// line 1; nothing panics.
func FuzzCriteoLine(f *testing.F) {
	f.Add([]byte(goodLine))
	f.Add([]byte("1\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"))
	f.Add([]byte("0\t-1\t99999999999999999999\tff"))
	p := &criteoParser{hasLabel: true, file: func() string { return "fuzz" }}
	schema := criteoSchema(true)
	var b Batch
	f.Fuzz(func(t *testing.T, line []byte) {
		b.Reset(schema)
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
		b.Reset(plan.schema)
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
