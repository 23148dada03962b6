package reader

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// ParquetOptions configure [NewParquet].
type ParquetOptions struct {
	Options
	// Columns declares the columns read, by name (others are skipped). A sequence column is a
	// repeated (LIST) leaf; a null value is missing (an empty bag, or 0 for dense).
	Columns []Column
}

// NewParquet opens Parquet files as one source, with columns mapped like [NewCSV]'s.
func NewParquet(paths []string, opt ParquetOptions) (Source, error) {
	if err := checkFiles(paths, &opt.Options); err != nil {
		return nil, err
	}
	plan, err := planColumns(opt.Columns)
	if err != nil {
		return nil, err
	}
	s := &parquetSource{paths: paths, names: fileNames(paths), opt: opt.Options, plan: plan}
	// Every file must open with the declared columns before any is read (a bad path or schema
	// fails here, not mid-run); then the first stays open.
	for i := range paths {
		if err := s.openFile(i); err != nil {
			s.closeFile()
			return nil, err
		}
	}
	if len(paths) > 1 {
		if err := s.openFile(0); err != nil {
			s.closeFile()
			return nil, err
		}
	}
	return s, nil
}

type parquetSource struct {
	paths  []string
	names  []string // the names positions carry (fileNames)
	opt    Options
	plan   *columnPlan
	f      *os.File
	pf     *parquet.File
	gr     parquet.Rows // the row group being read (nil between groups)
	colOf  map[int]int  // leaf column index -> declared column
	types  []leafType   // per declared column: the open file's leaf's logical type
	elem   []int        // per declared column: the definition level of a list element (elementLevel)
	rows   []parquet.Row
	ends   []int64 // the open file's row groups: the row each one ends before
	total  int64   // the open file's rows: what its row groups declare
	rep    []bool  // per leaf column of the open file: whether it is repeated
	size   int64   // the open file's size
	at, n  int     // buffered rows: rows[at:n] not yet consumed
	pos    Position
	open   bool
	closed bool
	m      mark
	count  []int64 // per declared column: values in the current row
	null   []bool
	denseV []float32
	skips  skipLog // what SkipBad dropped (see skipLog)
}

func (s *parquetSource) Schema() Schema { return s.plan.schema }

func (s *parquetSource) name() string { return s.paths[s.pos.File] }

func (s *parquetSource) closeGroup() {
	if s.gr != nil {
		_ = s.gr.Close()
		s.gr = nil
	}
}

func (s *parquetSource) closeFile() {
	s.closeGroup()
	s.pf = nil
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	s.open, s.at, s.n = false, 0, 0
}

// openFile opens file i and maps the declared columns to its leaf columns.
func (s *parquetSource) openFile(i int) (err error) {
	s.closeFile()
	s.pos.File, s.pos.Row, s.pos.Offset = i, 0, -1
	s.skips.startFile()
	path := s.paths[i]
	defer func() {
		if r := recover(); r != nil {
			s.closeFile()
			err = &ParseError{File: path, Line: -1, Row: -1, Msg: fmt.Sprintf("corrupt Parquet file: %v", r), Truncated: true}
		}
	}()
	f, st, err := openRegular(path)
	if err != nil {
		return err
	}
	s.f = f
	if err := checkParquetFooter(f, st.Size()); err != nil {
		return &ParseError{File: path, Line: -1, Row: -1, Msg: "corrupt Parquet footer: " + err.Error(), Truncated: true}
	}
	// The page index and bloom filters are not needed (a seek reads the pages before the row), and
	// their sizes would be more to trust before allocating.
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return &ParseError{File: path, Line: -1, Row: -1, Msg: "not a readable Parquet file (truncated?): " + err.Error(), Truncated: true}
	}
	schema := pf.Schema()
	logical := leafLogicalTypes(pf.Metadata())
	s.colOf = map[int]int{}
	s.types = make([]leafType, len(s.plan.cols))
	s.elem = make([]int, len(s.plan.cols))
	for ci, c := range s.plan.cols {
		if c.Role == RoleSkip {
			continue
		}
		// Lookup takes one of two fields of one name without a word (pyarrow refuses such a
		// column, as the CSV reader does a name twice in the header).
		fields := []string{c.Name}
		if strings.Contains(c.Name, ".") && countNamed(schema, c.Name) == 0 {
			fields = strings.Split(c.Name, ".")
		}
		if name, a, b, twice := duplicateField(schema, fields); twice {
			return &ParseError{File: path, Line: -1, Row: -1, Name: c.Name, Msg: fmt.Sprintf(
				"column %q is in the schema twice (fields %d and %d): rename one", name, a+1, b+1)}
		}
		leaf, ok := schema.Lookup(c.Name)
		if !ok && len(fields) > 1 { // a leaf of a group, by its dotted path
			leaf, ok = schema.Lookup(fields...)
		}
		if !ok { // a LIST column: the one leaf below its name
			var under [][]string
			for _, p := range schema.Columns() {
				if len(p) > 0 && p[0] == c.Name {
					under = append(under, p)
				}
			}
			if len(under) > 1 {
				names := make([]string, len(under))
				for i, p := range under {
					names[i] = strings.Join(p, ".")
				}
				return &ParseError{File: path, Line: -1, Row: -1, Name: c.Name, Msg: fmt.Sprintf(
					"column %q is a group of %d leaves (%s): name one leaf by its dotted path", c.Name, len(under),
					strings.Join(names, ", "))}
			}
			if len(under) == 1 {
				leaf, ok = schema.Lookup(under[0]...)
			}
		}
		if !ok {
			return &ParseError{File: path, Line: -1, Row: -1, Name: c.Name, Msg: fmt.Sprintf("missing column %q", c.Name)}
		}
		if leaf.MaxRepetitionLevel > 0 && c.Role != RoleSequence {
			return &ParseError{File: path, Line: -1, Row: -1, Name: c.Name,
				Msg: fmt.Sprintf("column %q is repeated; declare it as a sequence", c.Name)}
		}
		var fileType *format.LogicalType
		if leaf.ColumnIndex < len(logical) {
			fileType = logical[leaf.ColumnIndex]
		}
		lt, err := leafTypeOf(leaf.Node, fileType)
		if err != nil {
			return &ParseError{File: path, Line: -1, Row: -1, Name: c.Name, Msg: fmt.Sprintf("column %q %v", c.Name, err)}
		}
		// IDs must be integers: a DECIMAL with digits after the point is refused here, once, like a
		// non-integral DOUBLE value is (rather than every one of its rows failing).
		if k, _ := c.kind(); lt.decimal != nil && lt.decimal.Scale > 0 && k == feature.KindInt64 &&
			(c.Role == RoleSparse || c.Role == RoleSequence) {
			return &ParseError{File: path, Line: -1, Row: -1, Name: c.Name, Msg: fmt.Sprintf(
				"column %q is %s: its values are not valid %s values (IDs must be integers); declare it type \"float\" or \"string\", or store it with scale 0",
				c.Name, lt.decimal, typeName(&c))}
		}
		s.colOf[leaf.ColumnIndex] = ci
		s.types[ci] = lt
		if leaf.MaxRepetitionLevel > 0 {
			s.elem[ci] = elementLevel(schema, schema.Columns()[leaf.ColumnIndex])
		}
	}
	s.ends = s.ends[:0]
	end := int64(0)
	for _, g := range pf.RowGroups() {
		end += g.NumRows()
		s.ends = append(s.ends, end)
	}
	// The row groups' rows, not the footer's num_rows, are what is read: a num_rows short of them
	// ended the file early.
	s.total, s.size = end, st.Size()
	s.rep = s.rep[:0]
	for _, p := range schema.Columns() {
		leaf, _ := schema.Lookup(p...)
		s.rep = append(s.rep, leaf.MaxRepetitionLevel > 0)
	}
	s.pf = pf
	if s.rows == nil {
		s.rows = make([]parquet.Row, 256)
	}
	s.open = true
	return nil
}

// countNamed is how many fields of group n are named name.
func countNamed(n parquet.Node, name string) int {
	k := 0
	for _, f := range n.Fields() {
		if f.Name() == name {
			k++
		}
	}
	return k
}

// duplicateField finds the first name along path (from group n down) that two fields of one group
// share: the path to it (dotted) and their 0-based places in the group; twice is false when the
// path names one field at each level.
func duplicateField(n parquet.Node, path []string) (name string, a, b int, twice bool) {
	for j, p := range path {
		a, b = -1, -1
		for i, f := range n.Fields() {
			if f.Name() != p {
				continue
			}
			if a >= 0 {
				b = i
				break
			}
			a = i
		}
		if b >= 0 {
			return strings.Join(path[:j+1], "."), a, b, true
		}
		if a < 0 || n.Fields()[a].Leaf() {
			break
		}
		n = n.Fields()[a]
	}
	return "", 0, 0, false
}

// group is the index of the open file's row group holding row, and the row it ends before.
func (s *parquetSource) group(row int64) (int, int64) {
	for i, e := range s.ends {
		if row < e {
			return i, e
		}
	}
	return len(s.ends), s.total
}

// openGroup opens a reader of the row group holding the current row, at that row, once its page
// headers are checked (see checkRowGroup).
func (s *parquetSource) openGroup() error {
	g, end := s.group(s.pos.Row)
	if err := checkRowGroup(s.f, s.size, s.pf.Metadata(), g, s.rep); err != nil {
		return err
	}
	rg := s.pf.RowGroups()[g]
	s.gr = rg.Rows()
	if start := end - rg.NumRows(); s.pos.Row > start {
		return s.gr.SeekToRow(s.pos.Row - start)
	}
	return nil
}

// fill buffers the next rows of the open file from the row group holding them, never past its end
// (each group is read by a reader of its own, which never reads ahead into the next: a damaged
// group fails alone, naming its first unread row); io.EOF at the file's end.
func (s *parquetSource) fill() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &ParseError{File: s.name(), Line: -1, Row: s.pos.Row, Msg: fmt.Sprintf("corrupt Parquet data: %v", r), Truncated: true}
		}
	}()
	for i := range s.rows {
		s.rows[i] = s.rows[i][:0]
	}
	if s.pos.Row >= s.total { // read to the end (or a file of no rows)
		s.at, s.n = 0, 0
		return io.EOF
	}
	g, end := s.group(s.pos.Row)
	if s.gr == nil {
		if err := s.openGroup(); err != nil {
			return &ParseError{File: s.name(), Line: -1, Row: s.pos.Row, Msg: "cannot read the row group: " + err.Error(), Truncated: true}
		}
	}
	n, err := s.gr.ReadRows(s.rows[:min(int64(len(s.rows)), end-s.pos.Row)])
	s.at, s.n = 0, n
	if s.pos.Row+int64(n) >= end { // the group is done: the next fill opens the next one
		s.closeGroup()
	}
	if n > 0 {
		return nil
	}
	if err == io.EOF || err == nil { // the group ended before the rows it declares: no end of file
		declared := s.pf.RowGroups()[g].NumRows()
		return &ParseError{File: s.name(), Line: -1, Row: s.pos.Row, Truncated: true, Msg: fmt.Sprintf(
			"row group %d declares %d rows but holds %d", g, declared, s.pos.Row-(end-declared))}
	}
	msg := "cannot read rows (truncated?): "
	if pe := (*PageError)(nil); errors.As(err, &pe) {
		msg = "cannot read rows: "
	}
	return &ParseError{File: s.name(), Line: -1, Row: s.pos.Row, Msg: msg + err.Error(), Truncated: true}
}

func (s *parquetSource) Read(b *Batch, n int) (int, error) {
	if s.closed {
		return 0, errs.Invalidf("reader: source is closed")
	}
	b.Reset(s.plan.schema, n)
	for b.Size < n {
		if s.at == s.n {
			if !s.open {
				if s.pos.File+1 >= len(s.paths) {
					break
				}
				if err := s.openFile(s.pos.File + 1); err != nil {
					return 0, err
				}
			}
			if err := s.fill(); err == io.EOF {
				s.closeFile()
				if err := s.skips.endFile(s.name(), s.opt.WorldSize == 1); err != nil {
					return 0, err
				}
				continue
			} else if err != nil {
				if !s.opt.SkipBad {
					return 0, err
				}
				s.skipGroup(err)
				continue
			}
		}
		row := s.rows[s.at]
		s.at++
		g, r := s.pos.Global, s.pos.Row
		s.pos.Global++
		s.pos.Row++
		if g%int64(s.opt.WorldSize) != int64(s.opt.Rank) {
			continue
		}
		if b.Size%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
		if s.opt.SkipBad { // only a skipped row needs rolling back
			b.mark(&s.m)
		}
		if err := s.parse(row, r, b); err != nil {
			if s.opt.SkipBad && !errors.Is(err, errs.ErrCapacity) { // a batch past its bound is no bad row
				b.rollback(&s.m)
				s.pos.Skipped++
				s.skips.dropped(1, err)
				continue
			}
			return 0, err
		}
		s.skips.kept()
	}
	if b.Size == 0 {
		return 0, io.EOF
	}
	return b.Size, nil
}

// skipGroup gives up the rest of a row group that failed to read under SkipBad: its rows of this
// rank count as skipped, and reading goes on at the next group. Every rank skips the same rows, so
// the shares stay as they were. err is why the group failed.
func (s *parquetSource) skipGroup(err error) {
	s.closeGroup()
	_, end := s.group(s.pos.Row)
	// Counted, not stepped through: a damaged footer may declare 2^62 rows.
	k := end - s.pos.Row
	mine := rowsOfRank(s.pos.Global, k, s.opt.WorldSize, s.opt.Rank)
	s.pos.Skipped += mine
	s.skips.dropped(mine, err)
	s.pos.Global += k
	s.pos.Row = end
	s.at, s.n = 0, 0
}

func (s *parquetSource) fail(row int64, ci int, format string, args ...any) error {
	return &ParseError{File: s.name(), Line: -1, Row: row, Column: ci + 1, Name: s.plan.cols[ci].Name, Msg: fmt.Sprintf(format, args...)}
}

// parse appends one record to b.
func (s *parquetSource) parse(row parquet.Row, r int64, b *Batch) error {
	cols := s.plan.cols
	if s.count == nil {
		s.count, s.null = make([]int64, len(cols)), make([]bool, len(cols))
		s.denseV = make([]float32, len(cols))
	}
	clear(s.count)
	clear(s.null)
	clear(s.denseV)
	label, hasLabel := float32(0), false
	for _, v := range row {
		ci, ok := s.colOf[v.Column()]
		if !ok {
			continue
		}
		c := &cols[ci]
		if v.IsNull() {
			if s.elem[ci] > 0 && v.DefinitionLevel() >= s.elem[ci] {
				return s.fail(r, ci, "element %d of the list is null (a null element is no ID, and dropping it "+
					"would shift the elements after it): drop or fill the nulls", s.count[ci]+1)
			}
			s.null[ci] = true
			continue
		}
		switch c.Role {
		case RoleLabel, RoleDense:
			x, err := parquetFloat(v, s.types[ci])
			if err != nil {
				return s.fail(r, ci, "%v", err)
			}
			f, ok := toFloat32(x)
			if !ok {
				return s.fail(r, ci, "%s is out of float32 range", describe(v, s.types[ci]))
			}
			if c.Role == RoleLabel {
				label, hasLabel = f, true
			} else {
				s.denseV[ci] = f
			}
		default:
			in := &b.Inputs[s.plan.slot[ci]]
			if nb := stringBytes(in, len(byteArray(v))); !b.fits(in, 1, nb) {
				return b.overLimit(s.name(), c.Name, in, 1, nb)
			}
			if err := parquetAppend(c, in, v, s.types[ci]); err != nil {
				return s.fail(r, ci, "%v", err)
			}
			s.count[ci]++
		}
	}
	for ci := range cols {
		c := &cols[ci]
		switch c.Role {
		case RoleLabel:
			if !hasLabel {
				return s.fail(r, ci, "the label is missing")
			}
		case RoleDense:
			b.Dense = append(b.Dense, s.denseV[ci])
		case RoleSparse, RoleSequence:
			in := &b.Inputs[s.plan.slot[ci]]
			in.Lengths = append(in.Lengths, s.count[ci])
		}
	}
	b.Labels = append(b.Labels, label)
	b.Size++
	return nil
}

func (s *parquetSource) Position() Position { return named(s.pos, s.names) }

func (s *parquetSource) Seek(p Position) (err error) {
	if err := checkSeek(s.closed, p, s.paths); err != nil {
		return err
	}
	if err := s.openFile(p.File); err != nil {
		return err
	}
	s.skips.soughtInto(p, s.opt.Rank, s.opt.WorldSize)
	defer func() {
		if r := recover(); r != nil {
			err = errs.Invalidf("reader: %s: cannot seek to row %d: %v", s.name(), p.Row, r)
		}
	}()
	if n := s.total; p.Row > n {
		return errs.Invalidf("reader: %s has fewer than %d rows (it has %d)", s.name(), p.Row, n)
	}
	opened := s.pos // the opened file's start: where a failed seek leaves the source
	s.pos = p
	s.pos.Offset = -1
	if p.Row < s.total {
		if err := s.openGroup(); err != nil {
			s.pos = opened
			return errs.Invalidf("reader: %s: cannot seek to row %d: %v", s.name(), p.Row, err)
		}
	}
	return nil
}

// FirstSkipped is the first row dropped under SkipBad since the source opened, or nil.
func (s *parquetSource) FirstSkipped() error { return s.skips.firstSkipped() }

func (s *parquetSource) Close() error {
	s.closeFile()
	s.closed = true
	return nil
}
