package reader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// Forged files are made from files parquet-go writes, rewriting thrift structs with parquet-go's
// own thrift code (as /tmp/probe-adv/forge did for the defect reports).

var compact thrift.CompactProtocol

// pqFooter splits a Parquet file into its bytes before the footer and the decoded footer.
func pqFooter(t testing.TB, data []byte) ([]byte, *format.FileMetaData) {
	n := len(data)
	fl := int(binary.LittleEndian.Uint32(data[n-8 : n-4]))
	var md format.FileMetaData
	require.NoError(t, thrift.Unmarshal(&compact, data[n-8-fl:n-8], &md))
	return data[:n-8-fl], &md
}

// pqWithFooter is body followed by md as a footer.
func pqWithFooter(t testing.TB, body []byte, md *format.FileMetaData) []byte {
	foot, err := thrift.Marshal(&compact, md)
	require.NoError(t, err)
	out := append(append([]byte{}, body...), foot...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(foot)))
	return append(out, "PAR1"...)
}

// forgePage rewrites the first page header of column chunk (g, c) of a Parquet file with edit, and
// the footer with meta (either may be nil), moving the offsets after a header that changed length.
func forgePage(t testing.TB, data []byte, g, c int, edit func(*format.PageHeader), meta func(*format.FileMetaData)) []byte {
	body, md := pqFooter(t, data)
	if meta != nil {
		meta(md)
	}
	if edit == nil {
		return pqWithFooter(t, body, md)
	}
	cm := &md.RowGroups[g].Columns[c].MetaData
	off := cm.DataPageOffset
	if cm.DictionaryPageOffset > 0 {
		off = cm.DictionaryPageOffset
	}
	rd := compact.NewReaderFromBytes(body[off:])
	var ph format.PageHeader
	require.NoError(t, thrift.NewDecoder(rd).Decode(&ph))
	old := rd.BytesRead()
	edit(&ph)
	nh, err := thrift.Marshal(&compact, &ph)
	require.NoError(t, err)
	delta := int64(len(nh) - old)
	for ri := range md.RowGroups {
		for ci := range md.RowGroups[ri].Columns {
			cc := &md.RowGroups[ri].Columns[ci]
			for _, p := range []*int64{&cc.MetaData.DataPageOffset, &cc.MetaData.DictionaryPageOffset, &cc.FileOffset} {
				if *p > off {
					*p += delta
				}
			}
			if ri == g && ci == c {
				cc.MetaData.TotalCompressedSize += delta
			}
		}
	}
	out := append(append(append([]byte{}, body[:off]...), nh...), body[off+int64(old):]...)
	return pqWithFooter(t, out, md)
}

type pqInt struct {
	A int64 `parquet:"a"`
}

type pqSeq struct {
	S []int64 `parquet:"s,list"`
}

// writeGroups writes one row group per part with parquet-go.
func writeGroups[T any](t testing.TB, parts [][]T, opts ...parquet.WriterOption) []byte {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf, opts...)
	for _, p := range parts {
		_, err := w.Write(p)
		require.NoError(t, err)
		require.NoError(t, w.Flush())
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func saveFile(t testing.TB, name string, data []byte) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

var intCols = []Column{{Name: "a", Role: RoleSparse}}

// readInts reads column 0's IDs of every row: what came back, the skipped count and the error.
func readInts(t *testing.T, path string, cols []Column, skip bool) ([]int64, int64, error) {
	src, err := NewParquet([]string{path}, ParquetOptions{Columns: cols, Options: Options{SkipBad: skip}})
	if err != nil {
		return nil, 0, err
	}
	defer src.Close()
	var ids []int64
	for {
		var b Batch
		_, err := src.Read(&b, 2)
		if err == io.EOF {
			return ids, src.Position().Skipped, nil
		}
		if err != nil {
			return ids, src.Position().Skipped, err
		}
		ids = append(ids, b.Inputs[0].Ints...)
	}
}

func TestThriftWalk(t *testing.T) {
	var md format.FileMetaData
	_, mdp := pqFooter(t, writeGroups(t, [][]pqInt{{{1}, {2}}}))
	md = *mdp
	good, err := thrift.Marshal(&compact, &md)
	require.NoError(t, err)
	nested := bytes.Repeat([]byte{0x1c}, 70) // field 1, struct, 70 deep
	cases := map[string]struct {
		in   []byte
		cost int64
		want string
	}{
		"footer":               {good, 1 << 30, ""},
		"empty struct":         {[]byte{0}, 0, ""},
		"bool list":            {[]byte{0x19, 0x31, 1, 0, 1, 0}, 1 << 10, ""},
		"list past the bytes":  {[]byte{0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0, 0, 0, 0}, 1 << 30, "a list of 2147483647 elements has 4 bytes left"},
		"doubles past":         {[]byte{0x19, 0x37, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0}, 1 << 30, "a list of 3 elements has 10 bytes left"},
		"string past":          {[]byte{0x18, 0x80, 0x80, 0x04, 'x', 0}, 1 << 30, "a string of 65536 bytes has 2 left"},
		"map past":             {[]byte{0x1b, 0x10, 0x55, 1, 2, 0}, 1 << 30, "a map of 16 entries has 3 bytes left"},
		"too deep":             {append(nested, make([]byte, 71)...), 1 << 30, "nested deeper than 64 levels"},
		"unknown type":         {[]byte{0x1e, 0}, 1 << 30, "unknown type 14"},
		"unknown element type": {[]byte{0x19, 0x10, 0}, 1 << 30, "a list of unknown element type 0"},
		"varint overflow":      {append([]byte{0x16}, bytes.Repeat([]byte{0xff}, 11)...), 1 << 30, "varint overflows 64 bits"},
		"cut short":            {[]byte{0x15, 0x02, 0x18}, 1 << 30, "ends inside the value"},
		"too costly":           {[]byte{0x19, 0x5c, 0, 0, 0, 0, 0, 0}, 4 << 10, "declares 5 elements, past the 4096 bytes"},
	}
	for name, c := range cases {
		w := thriftWalk{src: &sliceSource{b: c.in}, maxCost: c.cost}
		err := w.walk()
		if c.want == "" {
			assert.NoError(t, err, name)
		} else {
			assert.ErrorContains(t, err, c.want, name)
		}
	}
}

// TestFooterElemSizesCoverFormat: thriftWalk's 1 KiB per unlisted struct element is more than any
// struct of parquet-go's format package takes.
func TestFooterElemSizesCoverFormat(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		if seen[ty] {
			return
		}
		seen[ty] = true
		switch ty.Kind() {
		case reflect.Struct:
			assert.LessOrEqual(t, ty.Size(), uintptr(1024), ty.String())
			for i := range ty.NumField() {
				walk(ty.Field(i).Type)
			}
		case reflect.Slice, reflect.Pointer, reflect.Array:
			walk(ty.Elem())
		}
	}
	for _, v := range []any{format.FileMetaData{}, format.PageHeader{}, format.ColumnIndex{}, format.OffsetIndex{}} {
		walk(reflect.TypeOf(v))
	}
}

// TestParquetForgedFooterIsRefused: a 40-byte file declaring 2^31−1 row groups made parquet-go
// allocate 188 GB (a fatal error that killed the process), a footer length of 4 GiB a 4 GiB
// buffer; a footer of many leaves and many (empty) row groups makes a table of their product.
func TestParquetForgedFooterIsRefused(t *testing.T) {
	var list bytes.Buffer // FileMetaData{1: 1, 2: [{4: "schema", 5: 0}], 3: 3, 4: list<struct> of 2^31−1}
	list.Write([]byte{0x15, 0x02, 0x19, 0x1c, 0x48, 6})
	list.WriteString("schema")
	list.Write([]byte{0x15, 0x00, 0x00, 0x16, 0x06, 0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0, 0, 0, 0})
	forged := append(append([]byte("PAR1"), list.Bytes()...), binary.LittleEndian.AppendUint32(nil, uint32(list.Len()))...)
	forged = append(forged, "PAR1"...)

	good := writeGroups(t, [][]pqInt{{{1}, {2}, {3}}})
	longLen := bytes.Clone(good)
	binary.LittleEndian.PutUint32(longLen[len(longLen)-8:], 0xfffffff0)

	// 20,000 leaves × 8,000 row groups: a 1.3 GB table from a footer of about 200 KB.
	body, md := pqFooter(t, good)
	wide := *md
	wide.Schema = []format.SchemaElement{{Name: "root", NumChildren: thrift.New[int32](20000)}}
	for i := range 20000 {
		wide.Schema = append(wide.Schema, format.SchemaElement{Name: "c" + string(rune('a'+i%26)), Type: thrift.New(format.Int64),
			RepetitionType: thrift.New(format.Required)})
	}
	wide.RowGroups = make([]format.RowGroup, 8000)
	wide.NumRows = 0

	cases := map[string]struct {
		data []byte
		want string
	}{
		"row groups list":  {forged, "a list of 2147483647 elements has 4 bytes left"},
		"footer length":    {longLen, "the footer length 4294967280 is past the file's"},
		"leaves by groups": {pqWithFooter(t, body, &wide), "the footer's 20001 schema nodes (20000 leaves) and 8000 row groups would take more than"},
	}
	for name, c := range cases {
		path := saveFile(t, "f.parquet", c.data)
		_, err := NewParquet([]string{path}, ParquetOptions{Columns: intCols})
		require.Error(t, err, name)
		assert.ErrorContains(t, err, path+": corrupt Parquet footer: "+c.want, name)
		assert.ErrorIs(t, err, errs.ErrIO, name)
	}
}

// TestParquetForgedPageIsRefusedAlone: a data page declaring 2^31−1 values made parquet-go allocate
// 8-16 GiB while reading (the process died); such a page, one running past its chunk, or one
// declaring more values than its chunk, fails its row group alone, before it is decoded.
func TestParquetForgedPageIsRefusedAlone(t *testing.T) {
	parts := [][]pqInt{{{1}, {2}, {3}}, {{4}, {5}, {6}}}
	plain := writeGroups(t, parts)
	type codec struct {
		data []byte
		name string
	}
	files := []codec{{plain, "plain"}, {writeGroups(t, parts, parquet.Compression(&zstd.Codec{}), parquet.DataPageVersion(2)), "zstd v2"}}
	cases := map[string]struct {
		edit func(*format.PageHeader)
		meta func(*format.FileMetaData)
		want string
	}{
		"num_values": {func(h *format.PageHeader) { setValues(h, math.MaxInt32) }, nil,
			"page 0 at byte 4 declares 2147483647 values, past the 67108864 a page may hold"},
		"num_values past the chunk's": {func(h *format.PageHeader) { setValues(h, 1000) }, nil,
			"page 0 at byte 4 declares 1000 values, past the chunk's 3"},
		"both num_values": {func(h *format.PageHeader) { setValues(h, math.MaxInt32) },
			func(md *format.FileMetaData) { md.RowGroups[0].Columns[0].MetaData.NumValues = math.MaxInt32 },
			"declares 2147483647 values, past the 67108864 a page may hold"},
		"compressed size": {func(h *format.PageHeader) { h.CompressedPageSize = math.MaxInt32 }, nil,
			"page 0 at byte 4 declares 2147483647 bytes,"},
		"chunk past the file": {nil, func(md *format.FileMetaData) { md.RowGroups[0].Columns[0].MetaData.TotalCompressedSize = 1 << 40 },
			"its 1099511627776 bytes at byte 4 are not inside the file's"},
	}
	for _, f := range files {
		for name, c := range cases {
			path := saveFile(t, "p.parquet", forgePage(t, f.data, 0, 0, c.edit, c.meta))
			ids, _, err := readInts(t, path, intCols, false)
			assert.Empty(t, ids, "%s %s", f.name, name)
			assert.ErrorContains(t, err, path+" row 0: cannot read the row group: row group 0, column \"a\": ", "%s %s", f.name, name)
			assert.ErrorContains(t, err, c.want, "%s %s", f.name, name)
			assert.ErrorIs(t, err, errs.ErrIO, "%s %s", f.name, name)
			ids, skipped, err := readInts(t, path, intCols, true)
			assert.NoError(t, err, "%s %s", f.name, name)
			assert.Equal(t, []int64{4, 5, 6}, ids, "%s %s", f.name, name)
			assert.Equal(t, int64(3), skipped, "%s %s", f.name, name)
		}
	}
}

func setValues(h *format.PageHeader, n int32) {
	if h.DataPageHeader.Valid {
		h.DataPageHeader.V.NumValues = n
	} else {
		h.DataPageHeaderV2.V.NumValues = n
	}
}

// TestParquetShortRowGroupIsAnError: a row group declaring 4 rows whose pages hold 3 read its 3
// rows, then took the early end for the file's: the next group was lost, and nothing was said.
func TestParquetShortRowGroupIsAnError(t *testing.T) {
	declare := func(rows ...int64) func(*format.FileMetaData) {
		return func(md *format.FileMetaData) {
			md.NumRows = 0
			for i, n := range rows {
				md.RowGroups[i].NumRows = n
				md.NumRows += n
			}
		}
	}
	ints := writeGroups(t, [][]pqInt{{{1}, {2}, {3}}, {{4}, {5}, {6}}})
	seqs := writeGroups(t, [][]pqSeq{{{[]int64{1}}, {[]int64{2}}, {[]int64{3}}}, {{[]int64{4}}, {[]int64{5}}, {[]int64{6}}}})
	seqCols := []Column{{Name: "s", Role: RoleSequence}}
	cases := map[string]struct {
		data      []byte
		cols      []Column
		want      string
		read      []int64 // without skip_bad, before the error
		skipRead  []int64
		skipCount int64
	}{
		// a column that is not repeated holds one value a row: its pages tell, before any row is read
		"declares 4": {forgePage(t, ints, 0, 0, nil, declare(4, 3)), intCols,
			"row 0: cannot read the row group: row group 0, column \"a\": the row group declares 4 rows, its pages hold 3",
			nil, []int64{4, 5, 6}, 4},
		"declares 2": {forgePage(t, ints, 0, 0, nil, declare(2, 3)), intCols,
			"the row group declares 2 rows, its pages hold 3", nil, []int64{4, 5, 6}, 2},
		"declares 2^62": {forgePage(t, ints, 0, 0, nil, declare(1<<62, 3)), intCols,
			"the row group declares 4611686018427387904 rows, its pages hold 3", nil, []int64{4, 5, 6}, 1 << 62},
		// a repeated column's pages do not tell; the group's early end does
		"repeated declares 4": {forgePage(t, seqs, 0, 0, nil, declare(4, 3)), seqCols,
			"row 3: row group 0 declares 4 rows but holds 3", []int64{1, 2}, []int64{1, 2, 3, 4, 5, 6}, 1},
	}
	for name, c := range cases {
		path := saveFile(t, "s.parquet", c.data)
		ids, _, err := readInts(t, path, c.cols, false)
		assert.ErrorContains(t, err, path+" row ", name)
		assert.ErrorContains(t, err, c.want, name)
		assert.ErrorIs(t, err, errs.ErrIO, name)
		assert.Equal(t, c.read, ids, name)
		ids, skipped, err := readInts(t, path, c.cols, true)
		assert.NoError(t, err, name)
		assert.Equal(t, c.skipRead, ids, name)
		assert.Equal(t, c.skipCount, skipped, name)
	}
}

type pqEncodings struct {
	Dict  int64   `parquet:"dict,dict"`
	Delta int64   `parquet:"delta,delta"`
	Plain int64   `parquet:"plain,plain"`
	Flag  bool    `parquet:"flag"`
	Const int64   `parquet:"const,dict"`
	Opt   *int64  `parquet:"opt,optional"`
	Str   string  `parquet:"str,delta"`
	Seq   []int64 `parquet:"seq,list"`
}

// TestParquetChecksPassWhatWritersWrite: the page checks refuse no file parquet-go writes, with
// every encoding, pages v1 and v2, compressed or not, and a large constant column.
func TestParquetChecksPassWhatWritersWrite(t *testing.T) {
	rows := make([]pqEncodings, 1<<15)
	for i := range rows {
		r := &rows[i]
		r.Dict, r.Delta, r.Plain, r.Flag, r.Const = int64(i%7), int64(i), int64(-i), i%3 == 0, 42
		if i%5 != 0 {
			v := int64(i)
			r.Opt = &v
		}
		r.Str = strings.Repeat("s", i%4)
		r.Seq = make([]int64, i%3)
	}
	cols := []Column{{Name: "delta", Role: RoleSparse}, {Name: "dict", Role: RoleSparse}, {Name: "const", Role: RoleSparse},
		{Name: "opt", Role: RoleSparse}, {Name: "str", Role: RoleSparse, Type: "string"}, {Name: "seq", Role: RoleSequence}}
	opts := map[string][]parquet.WriterOption{
		"v1":        {parquet.DataPageVersion(1)},
		"v2 zstd":   {parquet.DataPageVersion(2), parquet.Compression(&zstd.Codec{})},
		"big pages": {parquet.PageBufferSize(64 << 20)},
	}
	for name, o := range opts {
		path := saveFile(t, "w.parquet", writeGroups(t, [][]pqEncodings{rows[:1000], rows[1000:]}, o...))
		ids, skipped, err := readInts(t, path, cols, false)
		require.NoError(t, err, name)
		assert.Len(t, ids, len(rows), name)
		assert.Equal(t, int64(len(rows)-1), ids[len(ids)-1], name)
		assert.Zero(t, skipped, name)
	}
}

// FuzzThriftWalk walks arbitrary bytes: an error or a struct that fits them, never a panic; what
// it passes parquet-go decodes without allocating past what the walk counted.
func FuzzThriftWalk(f *testing.F) {
	_, md := pqFooter(f, writeGroups(f, [][]pqInt{{{1}, {2}}}))
	good, err := thrift.Marshal(&compact, md)
	require.NoError(f, err)
	f.Add(good)
	f.Add([]byte{0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0, 0, 0, 0})
	f.Add([]byte{0x1b, 0x10, 0x55, 1, 2, 0})
	f.Add(bytes.Repeat([]byte{0x1c}, 70))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &sliceSource{b: b}
		w := thriftWalk{src: s, maxCost: 64 << 20, elemSize: func(p thriftPath) int64 { return footerElemSize[p] }}
		if err := w.walk(); err != nil {
			return
		}
		if s.off > len(b) || w.cost > 64<<20 {
			t.Fatalf("walked %d of %d bytes, cost %d", s.off, len(b), w.cost)
		}
		var md format.FileMetaData
		_ = thrift.NewDecoder(compact.NewReaderFromBytes(b)).Decode(&md)
		var ph format.PageHeader
		_ = thrift.NewDecoder(compact.NewReaderFromBytes(b)).Decode(&ph)
	})
}

// FuzzParquetFooter opens a file whose footer is arbitrary bytes (its length taken as written, or
// as the bytes say): a clear error or a source, never a panic or a runaway allocation.
func FuzzParquetFooter(f *testing.F) {
	data := writeGroups(f, [][]pqInt{{{1}, {2}, {3}}, {{4}}})
	body, md := pqFooter(f, data)
	good, err := thrift.Marshal(&compact, md)
	require.NoError(f, err)
	f.Add(good, false)
	f.Add(good[:len(good)-3], false)
	f.Add([]byte{0x15, 0x02, 0x19, 0x1c, 0x48, 1, 's', 0x15, 0, 0, 0x16, 6, 0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0}, false)
	f.Add([]byte{0xf0, 0xff, 0xff, 0xff}, true)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, foot []byte, rawLen bool) {
		out := append(append([]byte{}, body...), foot...)
		if !rawLen || len(foot) < 4 {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(foot)))
		}
		out = append(out, "PAR1"...)
		path := filepath.Join(dir, "fuzz.parquet")
		require.NoError(t, os.WriteFile(path, out, 0o644))
		src, err := NewParquet([]string{path}, ParquetOptions{Columns: intCols, Options: Options{SkipBad: true}})
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != path {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		defer src.Close()
		for range 100 {
			var b Batch
			if _, err := src.Read(&b, 1000); err != nil {
				return
			}
		}
	})
}

type pqWide struct {
	A int64 `parquet:"a"`
	B int64 `parquet:"b"`
	C int64 `parquet:"c"`
	D int64 `parquet:"d"`
	E int64 `parquet:"e"`
}

// TestParquetRowGroupPagesAreBoundedTogether: every column's page declaring the most a page may
// hold passed the page check one column at a time, and the reader reserved that much for each
// column of the row group at once (a file of under a kilobyte reserved gigabytes).
func TestParquetRowGroupPagesAreBoundedTogether(t *testing.T) {
	data := writeGroups(t, [][]pqWide{{{1, 2, 3, 4, 5}}, {{6, 7, 8, 9, 10}}}, parquet.Compression(&snappy.Codec{}))
	cases := []struct {
		name     string
		declared int32 // what the page of each column of the first row group declares it decodes to (zero: as written)
		want     string
	}{
		{"as written", 0, ""},
		{"at the bound", maxGroupPageBytes / 5, ""},
		{"past the bound", maxPageBytes, fmt.Sprintf("row group 0, column \"e\": its largest page declares %d bytes and its "+
			"dictionary page 0: with those of the 4 columns before it, %d bytes of pages held at once, past the %d "+
			"a row group's reader may hold", maxPageBytes, 5*maxPageBytes, maxGroupPageBytes)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forged := data
			for col := range 5 {
				if c.declared > 0 {
					forged = forgePage(t, forged, 0, col, func(h *format.PageHeader) { h.UncompressedPageSize = c.declared }, nil)
				}
			}
			// The check alone, which reads the page headers and allocates nothing they declare.
			_, md := pqFooter(t, forged)
			err := checkRowGroup(bytes.NewReader(forged), int64(len(forged)), md, 0, make([]bool, 5))
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, c.want)
			// And as a source reads it: refused, and skipped under skip_bad.
			path := saveFile(t, "w.parquet", forged)
			cols := []Column{{Name: "a", Role: RoleSparse}, {Name: "e", Role: RoleSparse}}
			ids, _, err := readInts(t, path, cols, false)
			assert.Empty(t, ids)
			assert.ErrorContains(t, err, path+" row 0: cannot read the row group: "+c.want)
			assert.ErrorIs(t, err, errs.ErrIO)
			ids, skipped, err := readInts(t, path, cols, true)
			require.NoError(t, err)
			assert.Equal(t, []int64{6}, ids)
			assert.Equal(t, int64(1), skipped)
		})
	}
}
