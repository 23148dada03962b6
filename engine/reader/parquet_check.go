package reader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// parquet-go allocates from sizes the file declares before it reads the bytes they describe (a
// footer's list lengths, a page's num_values, a page's compressed size), and an allocation past
// the machine's memory is a fatal error, not a panic. These checks run first: the footer before
// parquet.OpenFile, a row group's page headers before its rows are decoded.

const (
	// maxFooterMemory bounds the memory the footer's metadata takes once decoded and opened.
	maxFooterMemory = 1 << 30
	// maxPageValues is the most values one page (data or dictionary) may declare: parquet-go
	// allocates for all of them before decoding. Writers cut pages far smaller (parquet-go's pages
	// are 256 KiB, Arrow's 1 MiB or 20,000 rows), and Arrow's largest row group is 64 Mi rows.
	maxPageValues = 1 << 26
	// maxPageHeader bounds one page header's decoded size (its statistics' min and max values).
	maxPageHeader = 16 << 20
	// maxGroupPageBytes bounds the page bytes a row group's reader holds at once: the largest page
	// of each column with its dictionary page (parquet-go reads the columns of a row side by side,
	// a page of each). Real pages are far smaller (see maxPageBytes); forged headers declaring
	// maxPageBytes in every column reserved that many times over.
	maxGroupPageBytes = 4 << 30
)

// footerElemSize is the memory one decoded (and, for parquet-go, opened) element of a list of
// structs in FileMetaData takes, by its place; elsewhere thriftWalk counts 1 KiB.
var footerElemSize = map[thriftPath]int64{
	pathOf(2):           int64(unsafe.Sizeof(format.SchemaElement{}) + unsafe.Sizeof(parquet.Column{}) + 32),
	pathOf(4):           int64(unsafe.Sizeof(format.RowGroup{}) + unsafe.Sizeof(parquet.FileRowGroup{}) + 16),
	pathOf(4, 1):        int64(unsafe.Sizeof(format.ColumnChunk{}) + unsafe.Sizeof(parquet.FileColumnChunk{}) + 64),
	pathOf(4, 1, 3, 8):  int64(unsafe.Sizeof(format.KeyValue{})),
	pathOf(4, 1, 3, 13): int64(unsafe.Sizeof(format.PageEncodingStats{})),
	pathOf(4, 2):        int64(unsafe.Sizeof(format.SortingColumn{})),
	pathOf(5):           int64(unsafe.Sizeof(format.KeyValue{})),
	pathOf(7):           int64(unsafe.Sizeof(format.ColumnOrder{})),
}

// checkParquetFooter refuses a Parquet file whose footer would make parquet.OpenFile allocate
// more than its bytes can describe: a footer length past the file, a list or string longer than
// the bytes left, nesting past thriftMaxDepth, or metadata taking more than maxFooterMemory
// decoded (counting the schema × row group tables parquet-go builds from it). A file that is no
// Parquet file, or whose metadata does not decode, is left to parquet.OpenFile to refuse.
func checkParquetFooter(r io.ReaderAt, size int64) error {
	var tail [8]byte
	if size < 12 {
		return nil
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil || string(tail[4:]) != "PAR1" {
		return nil
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 { // 4 bytes of magic before, 8 after
		return fmt.Errorf("the footer length %d is past the file's %d bytes", n, size)
	}
	footer := make([]byte, n)
	if _, err := r.ReadAt(footer, size-8-n); err != nil {
		return fmt.Errorf("reading the footer: %w", err)
	}
	w := thriftWalk{src: &sliceSource{b: footer}, maxCost: maxFooterMemory,
		elemSize: func(p thriftPath) int64 { return footerElemSize[p] }}
	if err := w.walk(); err != nil {
		return err
	}
	var md format.FileMetaData
	var proto thrift.CompactProtocol
	if thrift.NewDecoder(proto.NewReaderFromBytes(footer)).Decode(&md) != nil {
		return nil
	}
	// parquet-go also makes a table of leaves × row groups, and the path of every schema node
	// (depth names each): both grow as products of the footer's lists.
	leaves, paths := int64(0), int64(0)
	var open []int32
	for i := range md.Schema {
		paths += int64(len(open)) + 1
		if md.Schema[i].Type.Valid {
			leaves++
		}
		if c := md.Schema[i].NumChildren; c.Valid && c.V > 0 {
			open = append(open, c.V)
			continue
		}
		for len(open) > 0 {
			if open[len(open)-1]--; open[len(open)-1] > 0 {
				break
			}
			open = open[:len(open)-1]
		}
	}
	groups, left := int64(len(md.RowGroups)), maxFooterMemory-w.cost
	if paths > left/16 || (leaves > 0 && groups > (left-16*paths)/8/leaves) { // 16-byte strings, 8-byte pointers
		return fmt.Errorf("the footer's %d schema nodes (%d leaves) and %d row groups would take more than %d bytes to open",
			len(md.Schema), leaves, groups, maxFooterMemory)
	}
	total := int64(0)
	for i := range md.RowGroups {
		n := md.RowGroups[i].NumRows
		if n < 0 || total > 1<<63-1-n {
			return fmt.Errorf("row group %d declares %d rows (after %d)", i, n, total)
		}
		total += n
	}
	return nil
}

// pageSource reads a column chunk's bytes [pos, end) through a small buffer; Skip moves past a
// page's data without reading it.
type pageSource struct {
	r        io.ReaderAt
	pos, end int64 // the file offset of buf[0], the chunk's end
	buf      []byte
	at       int // next unread byte of buf
}

func (s *pageSource) ReadByte() (byte, error) {
	if s.at == len(s.buf) {
		s.pos += int64(s.at)
		n := min(int64(cap(s.buf)), s.end-s.pos)
		if n <= 0 {
			return 0, io.ErrUnexpectedEOF
		}
		s.buf, s.at = s.buf[:n], 0
		if k, err := s.r.ReadAt(s.buf, s.pos); k < len(s.buf) {
			s.buf = s.buf[:0]
			return 0, fmt.Errorf("the file ends inside the column chunk: %w", err)
		}
	}
	s.at++
	return s.buf[s.at-1], nil
}

func (s *pageSource) Skip(n int64) error {
	if n < 0 || n > s.Remaining() {
		return io.ErrUnexpectedEOF
	}
	if n <= int64(len(s.buf)-s.at) {
		s.at += int(n)
		return nil
	}
	s.pos += int64(s.at) + n
	s.buf, s.at = s.buf[:0], 0
	return nil
}

func (s *pageSource) Remaining() int64 { return s.end - s.pos - int64(s.at) }

func (s *pageSource) offset() int64 { return s.pos + int64(s.at) }

// pageHeader is what checkRowGroup takes from a page header.
type pageHeader struct {
	typ, compressed, uncompressed int64
	values, v2Rows                int64 // data page (v1 or v2) values, v2 rows; -1 when absent
	dictValues                    int64
	levels                        int64 // v2: bytes of repetition and definition levels
}

var (
	phType, phUncompressed, phCompressed = pathOf(1), pathOf(2), pathOf(3)
	phValues, phDictValues, phV2Values   = pathOf(5, 1), pathOf(7, 1), pathOf(8, 1)
	phV2Rows, phV2Def, phV2Rep           = pathOf(8, 3), pathOf(8, 5), pathOf(8, 6)
)

// checkRowGroup scans the page headers of every column chunk of row group g (the bytes parquet-go
// will read: from the chunk's dictionary or first data page for its total_compressed_size) and
// refuses the group before its rows are decoded when a header is malformed, a page runs past its
// chunk, a page declares more than maxPageValues values or more than its chunk holds, a compressed
// page declares more than maxPageBytes (the codecs then decode each within the size it declares: see
// parquet_codecs.go), the pages held at once (pageBytes of the largest page of each column and of
// its dictionary page, all columns together) would pass maxGroupPageBytes, or a column
// that is not repeated holds a number of rows other than the group declares (a group read short
// ended the file, losing the groups after it). repeated[i] says leaf column i is repeated.
func checkRowGroup(r io.ReaderAt, size int64, md *format.FileMetaData, g int, repeated []bool) error {
	rg := &md.RowGroups[g]
	buf := make([]byte, 0, 4096)
	held := int64(0) // the page bytes of the columns before this one held at once
	for i := range rg.Columns {
		m := &rg.Columns[i].MetaData
		name := strings.Join(m.PathInSchema, ".")
		fail := func(format string, args ...any) error {
			return fmt.Errorf("row group %d, column %q: %s", g, name, fmt.Sprintf(format, args...))
		}
		start := m.DataPageOffset
		if m.DictionaryPageOffset != 0 { // where parquet-go starts too
			start = m.DictionaryPageOffset
		}
		if start < 0 || m.TotalCompressedSize < 0 || m.TotalCompressedSize > size-start {
			return fail("its %d bytes at byte %d are not inside the file's %d", m.TotalCompressedSize, start, size)
		}
		if m.NumValues < 0 {
			return fail("it declares %d values", m.NumValues)
		}
		src := &pageSource{r: r, pos: start, end: start + m.TotalCompressedSize, buf: buf}
		rows, dataPage, dictPage := int64(0), int64(0), int64(0)
		for page := 0; src.Remaining() > 0; page++ {
			at := src.offset()
			h := pageHeader{values: -1, v2Rows: -1, dictValues: -1}
			w := thriftWalk{src: src, maxCost: maxPageHeader, onInt: func(p thriftPath, v int64) {
				switch p {
				case phType:
					h.typ = v
				case phUncompressed:
					h.uncompressed = v
				case phCompressed:
					h.compressed = v
				case phValues, phV2Values:
					h.values = v
				case phDictValues:
					h.dictValues = v
				case phV2Rows:
					h.v2Rows = v
				case phV2Def, phV2Rep:
					h.levels += max(v, 0)
				}
			}}
			if err := w.walk(); err != nil {
				if errors.Is(err, errThriftShort) {
					err = fmt.Errorf("runs past the chunk's end at byte %d", src.end)
				}
				return fail("page %d's header at byte %d %v", page, at, err)
			}
			switch {
			case h.compressed < 0 || h.compressed > src.Remaining():
				return fail("page %d at byte %d declares %d bytes, %d are left in the chunk", page, at, h.compressed, src.Remaining())
			case m.Codec != format.Uncompressed && (h.compressed > maxPageBytes || h.uncompressed > maxPageBytes):
				return fail("page %d at byte %d declares %d bytes (%d compressed), past the %d a page may hold", page, at, h.uncompressed, h.compressed, maxPageBytes)
			case h.uncompressed < 0 || h.levels > h.compressed:
				return fail("page %d at byte %d declares %d bytes uncompressed, %d of levels in %d", page, at, h.uncompressed, h.levels, h.compressed)
			case h.values > maxPageValues || h.dictValues > maxPageValues:
				return fail("page %d at byte %d declares %d values, past the %d a page may hold", page, at, max(h.values, h.dictValues), maxPageValues)
			case h.values > m.NumValues:
				return fail("page %d at byte %d declares %d values, past the chunk's %d", page, at, h.values, m.NumValues)
			}
			if h.typ == int64(format.DataPage) || h.typ == int64(format.DataPageV2) {
				rows += max(h.values, 0)
				dataPage = max(dataPage, pageBytes(m.Codec, h))
			} else if h.typ == int64(format.DictionaryPage) {
				dictPage = max(dictPage, pageBytes(m.Codec, h))
			}
			if err := src.Skip(h.compressed); err != nil {
				return fail("page %d at byte %d: %v", page, at, err)
			}
		}
		// Each row of a column that is not repeated is one value (a null one too).
		if i < len(repeated) && !repeated[i] && rows != rg.NumRows {
			return fail("the row group declares %d rows, its pages hold %d", rg.NumRows, rows)
		}
		if held += dataPage + dictPage; held > maxGroupPageBytes {
			return fail("its largest page declares %d bytes and its dictionary page %d: with those of the %d columns "+
				"before it, %d bytes of pages held at once, past the %d a row group's reader may hold",
				dataPage, dictPage, i, held, maxGroupPageBytes)
		}
	}
	return nil
}

// pageBytes is the memory the reader takes for a page of header h in a chunk of codec: the size it
// declares decoded (what the codec allocates), or its bytes in the file when not compressed.
func pageBytes(codec format.CompressionCodec, h pageHeader) int64 {
	if codec == format.Uncompressed {
		return h.compressed
	}
	return h.uncompressed
}
