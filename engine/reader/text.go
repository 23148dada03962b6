package reader

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/files"
)

// yieldEvery is how many rows a source parses between yields to the Go scheduler. With few Ps
// (GOMAXPROCS=1, one core for the input pipeline) a trainer thread calling into Go waits for a P
// until the running goroutine yields or is preempted (after ~10 ms); yielding every few hundred
// rows bounds that wait to tens of microseconds at a negligible cost.
const yieldEvery = 128

// maxLine bounds one text line; longer lines are an error rather than an unbounded buffer.
const maxLine = 4 << 20

// lines reads the lines of a list of text files in order, each plain or gzip-compressed (detected
// by its magic bytes), tracking the position and this rank's share of the rows.
type lines struct {
	paths  []string
	names  []string // the names positions carry (fileNames)
	opt    Options
	header bool                                   // the first line of each file is a header
	onOpen func(file string, header []byte) error // called with each file's header (nil: none)

	f          *os.File
	gz         *gzipMembers
	br         *bufio.Reader
	long       []byte // a line longer than br's buffer, assembled here (reused)
	compressed bool
	size       int64 // the open file's size in bytes
	lineNo     int64 // 1-based number of the last line read in the open file
	pos        Position
	open       bool // a file is open (pos.File is being read)
	closed     bool
	skips      skipLog // what SkipBad dropped (see skipLog)

	ending    []byte // the line ending raw took off the last line (a constant: see lineEnding)
	longBlank bool   // raw's last line is blank, and more than br's buffer of line endings follows it
	quotes    bool   // CSV: a quoted field may span lines (record)
	delim     byte   // CSV: the field delimiter
	rec       []byte // a record of several lines, assembled here (reused)
	// After a resume by byte offset in CSV, the lines before uncounted (from dataStart, the first
	// data line) are not counted yet, and seekRow rows stood before it (exactLine).
	uncounted, dataStart, seekRow int64
}

// newLines opens paths as lines; a CSV reader gives its delimiter (quoted fields may then span lines,
// see record), others 0.
func newLines(paths []string, opt Options, header bool, onOpen func(string, []byte) error, delim byte) (*lines, error) {
	if err := checkFiles(paths, &opt); err != nil {
		return nil, err
	}
	// Every file must open (and pass its header check) before any is read, so that a bad path or
	// header fails here rather than mid-run; a small buffer limits this to the start of each file.
	probe := &lines{paths: paths, opt: opt, header: header, onOpen: onOpen, quotes: delim != 0, delim: delim,
		br: bufio.NewReaderSize(nil, 64<<10)}
	for i := range paths {
		if err := probe.openFile(i); err != nil {
			probe.closeFile()
			return nil, err
		}
	}
	probe.closeFile()
	l := &lines{paths: paths, names: fileNames(paths), opt: opt, header: header, onOpen: onOpen, quotes: delim != 0, delim: delim}
	if err := l.openFile(0); err != nil {
		l.closeFile()
		return nil, err
	}
	return l, nil
}

// utf8BOM is the byte order mark some tools write at the start of a UTF-8 text file.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

func (l *lines) name() string { return l.paths[l.pos.File] }

func (l *lines) closeFile() {
	if l.gz != nil {
		_ = l.gz.Close()
		l.gz = nil
	}
	if l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
	l.open = false
}

// openFile opens file i, skips a UTF-8 byte order mark, reads its header (when the format has one)
// and stands after it.
func (l *lines) openFile(i int) error {
	l.closeFile()
	l.pos.File, l.pos.Row, l.lineNo, l.uncounted = i, 0, 0, 0
	l.skips.startFile()
	f, st, err := openRegular(l.paths[i])
	if err != nil {
		return err
	}
	l.f = f
	l.size = st.Size()
	magic := make([]byte, 10)
	n, _ := io.ReadFull(f, magic)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return errs.IOf("reader: %s: %v", l.paths[i], err)
	}
	if kind := otherCompression(magic[:n]); kind != "" {
		return errs.IOf("reader: %s is a %s file: the text readers take plain or gzip files (decompress it, "+
			"or recompress it with gzip)", l.paths[i], kind)
	}
	l.compressed = n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b
	var r io.Reader = f
	if l.compressed {
		if l.gz, err = newGzipMembers(f); err != nil {
			return &ParseError{File: l.paths[i], Line: 1, Row: -1, Msg: "bad gzip header: " + err.Error(), Truncated: true}
		}
		r = l.gz
	}
	if l.br == nil {
		l.br = bufio.NewReaderSize(r, 1<<20)
	} else {
		l.br.Reset(r)
	}
	l.pos.Offset = 0
	if l.compressed {
		l.pos.Offset = -1
	}
	l.open = true
	if b, _ := l.br.Peek(len(utf8BOM)); bytes.Equal(b, utf8BOM) {
		_, _ = l.br.Discard(len(utf8BOM))
		if l.pos.Offset >= 0 {
			l.pos.Offset += int64(len(utf8BOM))
		}
	}
	if l.header {
		line, _, err := l.record()
		if err == io.EOF {
			return &ParseError{File: l.paths[i], Line: 1, Row: -1, Msg: "empty file: the header line is missing"}
		}
		if err != nil {
			return err
		}
		if l.onOpen != nil {
			if err := l.onOpen(l.paths[i], line); err != nil {
				return err
			}
		}
	}
	return nil
}

// openRegular opens an input file: a regular one only (files.OpenRegular), since the readers seek
// in their files to resume.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	return files.OpenRegular(path, "reader", "the readers seek in their files to resume, so give a file")
}

// otherCompression names the compression format whose magic bytes start head, other than gzip
// ("" for none): such a file would otherwise be parsed as text, row by row, into errors.
func otherCompression(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd"
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return "xz"
	case bytes.HasPrefix(head, []byte{0x04, 0x22, 0x4d, 0x18}):
		return "lz4"
	case len(head) >= 10 && bytes.HasPrefix(head, []byte("BZh")) && head[3] >= '1' && head[3] <= '9' &&
		(bytes.Equal(head[4:10], []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}) || // a block, or the end of an empty stream
			bytes.Equal(head[4:10], []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90})):
		return "bzip2"
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		return "zip"
	}
	return ""
}

// tooLong reads past the rest of a line longer than maxLine (read bytes of it so far, the last
// read's err) and returns its error, marked Consumed: the next line can be read (and skip_bad skips
// this one). A read error on the way is returned instead.
func (l *lines) tooLong(read int64, err error) error {
	for errors.Is(err, bufio.ErrBufferFull) {
		var part []byte
		part, err = l.br.ReadSlice('\n')
		read += int64(len(part))
	}
	if err != nil && err != io.EOF {
		return errs.IOf("reader: %s line %d: %v", l.name(), l.lineNo+1, err)
	}
	l.lineNo++
	if l.pos.Offset >= 0 {
		l.pos.Offset += read
	}
	return &ParseError{File: l.name(), Line: l.lineNo, Row: -1, Msg: fmt.Sprintf("line longer than %d MiB", maxLine>>20),
		Consumed: true}
}

// skippable reports whether err is a malformed line the reader went past and skip_bad skips.
func (l *lines) skippable(err error) (*ParseError, bool) {
	var pe *ParseError
	return pe, l.opt.SkipBad && errors.As(err, &pe) && pe.Consumed
}

// raw returns the next line of the open file without its line ending; io.EOF at its end.
func (l *lines) raw() ([]byte, error) {
	line, err := l.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// The slice points into br's buffer, which the next ReadSlice overwrites: copy it first.
		l.long = append(l.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) && len(l.long) < maxLine {
			line, err = l.br.ReadSlice('\n')
			l.long = append(l.long, line...)
		}
		line = l.long
		if errors.Is(err, bufio.ErrBufferFull) || len(line) >= maxLine {
			return nil, l.tooLong(int64(len(line)), err)
		}
	}
	if err != nil && err != io.EOF {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
			return nil, &ParseError{File: l.name(), Line: l.lineNo + 1, Row: -1,
				Msg: "truncated or corrupt gzip stream: " + err.Error(), Truncated: true, Consumed: true}
		}
		return nil, errs.IOf("reader: %s line %d: %v", l.name(), l.lineNo+1, err)
	}
	if len(line) == 0 && err == io.EOF {
		return nil, io.EOF
	}
	l.lineNo++
	if l.pos.Offset >= 0 {
		l.pos.Offset += int64(len(line))
	}
	full := line
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	// The ending, a constant and not a view of the read buffer: a blank line's look-ahead below may
	// move the buffer, and a quoted field's lines keep their endings (they were read back corrupted).
	l.ending = lineEnding(full[len(line):])
	l.longBlank = false
	if len(line) == 0 {
		end, known := l.blankToEnd()
		if end { // blank lines that end the file are no rows (as for csv and pandas)
			return nil, io.EOF
		}
		l.longBlank = !known
	}
	return line, nil
}

var lf, cr, crlf = []byte("\n"), []byte("\r"), []byte("\r\n")

// lineEnding is a constant copy of e, a line ending raw took off ("", "\n", "\r\n" or a last "\r").
func lineEnding(e []byte) []byte {
	switch {
	case len(e) == 2:
		return crlf
	case len(e) == 1 && e[0] == '\n':
		return lf
	case len(e) == 1:
		return cr
	}
	return nil
}

// blankToEnd reports whether the rest of the open file is line endings only, looking ahead at most
// the reader's buffer: known is false when all of that is line endings (see blankRun).
func (l *lines) blankToEnd() (end, known bool) {
	for n := 1; ; n *= 2 {
		n = min(n, l.br.Size())
		ahead, err := l.br.Peek(n)
		if bytes.IndexFunc(ahead, func(r rune) bool { return r != '\n' && r != '\r' }) >= 0 {
			return false, true
		}
		if err != nil { // io.EOF: nothing but line endings is left (another error: the next read reports it)
			return errors.Is(err, io.EOF), true
		}
		if n == l.br.Size() {
			return false, false
		}
	}
}

// blankRun reads on from a blank line (line first) that more than the reader's buffer of line
// endings follows, through the blank lines after it: io.EOF when they end the file (no rows, as
// for a short run), else one error covering the run's lines (Consumed: skip_bad skips them, each a
// malformed row, as it skips the lines of a short run one by one). Before, each line of such a run
// looked a buffer ahead again, and a run that ended the file was named as rows following it.
func (l *lines) blankRun(first int64) ([]byte, int64, error) {
	for {
		next, err := l.br.Peek(2)
		switch {
		case len(next) > 0 && next[0] == '\n', len(next) == 2 && next[0] == '\r' && next[1] == '\n',
			len(next) == 1 && next[0] == '\r':
		case len(next) == 0 && errors.Is(err, io.EOF):
			return nil, first, io.EOF
		case len(next) == 0:
			return nil, first, errs.IOf("reader: %s line %d: %v", l.name(), l.lineNo+1, err)
		default: // a line with content follows
			return nil, first, &ParseError{File: l.name(), Line: first, Row: -1, Consumed: true, Rows: l.lineNo - first + 1,
				Msg: fmt.Sprintf("blank lines %d to %d (rows follow them)", first, l.lineNo)}
		}
		line, err := l.br.ReadSlice('\n') // the blank line peeked
		if err != nil && err != io.EOF {
			return nil, first, errs.IOf("reader: %s line %d: %v", l.name(), l.lineNo+1, err)
		}
		l.lineNo++
		if l.pos.Offset >= 0 {
			l.pos.Offset += int64(len(line))
		}
	}
}

// next returns the next data line over all files, its 1-based line number, and whether it is this
// rank's; io.EOF after the last file.
func (l *lines) next() (line []byte, lineNo int64, mine bool, err error) {
	if l.closed {
		return nil, 0, false, errs.Invalidf("reader: source is closed")
	}
	for {
		if !l.open {
			if l.pos.File+1 >= len(l.paths) {
				return nil, 0, false, io.EOF
			}
			if err := l.openFile(l.pos.File + 1); err != nil {
				return nil, 0, false, err
			}
		}
		line, lineNo, err = l.record()
		if err == io.EOF {
			l.closeFile()
			if err := l.endFile(); err != nil {
				return nil, 0, false, err
			}
			continue
		}
		if pe, ok := l.skippable(err); ok { // malformed rows, each of the rank it falls to
			_ = l.exactLine(pe)
			k := max(pe.Rows, 1)
			if mine := rowsOfRank(l.pos.Global, k, l.opt.WorldSize, l.opt.Rank); mine > 0 {
				l.pos.Skipped += mine
				l.skips.dropped(mine, pe)
			}
			l.pos.Row += k
			l.pos.Global += k
			if pe.Truncated {
				l.closeFile() // nothing after the damage can be read
				if err := l.endFile(); err != nil {
					return nil, 0, false, err
				}
			}
			continue
		}
		if err != nil {
			return nil, 0, false, l.exactLine(err)
		}
		g := l.pos.Global
		l.pos.Row++
		l.pos.Global++
		return line, lineNo, g%int64(l.opt.WorldSize) == int64(l.opt.Rank), nil
	}
}

// endFile checks the file just read to its end for rows all dropped under SkipBad (skipLog.endFile).
func (l *lines) endFile() error {
	return l.skips.endFile(l.name(), l.opt.WorldSize == 1)
}

// seek continues from p: by byte offset in a plain file, by re-reading to the row in a gzip file.
func (l *lines) seek(p Position) error {
	if err := checkSeek(l.closed, p, l.paths); err != nil {
		return err
	}
	if err := l.openFile(p.File); err != nil {
		return err
	}
	l.skips.soughtInto(p, l.opt.Rank, l.opt.WorldSize)
	if !l.compressed && p.Offset >= 0 {
		if err := l.checkOffset(p.Offset); err != nil {
			return err
		}
		if _, err := l.f.Seek(p.Offset, io.SeekStart); err != nil {
			return errs.IOf("reader: %s: %v", l.name(), err)
		}
		l.br.Reset(l.f)
		l.lineNo = p.Row
		if l.header {
			l.lineNo++
		}
		if l.quotes && p.Offset > l.pos.Offset {
			l.uncounted, l.dataStart, l.seekRow = p.Offset, l.pos.Offset, p.Row
		}
		l.pos = p
		return nil
	}
	for l.pos.Row < p.Row {
		if _, _, err := l.record(); err != nil {
			if pe, ok := l.skippable(err); ok { // rows too, as next counted them
				l.pos.Row += max(pe.Rows, 1)
				if pe.Truncated { // next gave up the rest of the file there: the position is its end
					l.closeFile()
					break
				}
				continue
			}
			if err == io.EOF {
				return errs.Invalidf("reader: %s has fewer than %d rows", l.name(), p.Row)
			}
			return err
		}
		l.pos.Row++
	}
	off := l.pos.Offset
	l.pos = p
	l.pos.Offset = off
	return nil
}

// checkOffset checks that off, a saved position's byte offset in the file just opened, can be a
// line start there: at or after the first data line, within the file, and after a line ending
// (or at the end of a file whose last line has none). A file changed since the position was saved
// fails here instead of yielding nothing or starting mid-line.
func (l *lines) checkOffset(off int64) error {
	first := l.pos.Offset // where the first data line starts
	stale := func(why string) error {
		return errs.Invalidf("reader: %s: the position's byte offset %d %s (the file has %d bytes; "+
			"was it changed since the position was saved?)", l.name(), off, why, l.size)
	}
	if off < first {
		return stale(fmt.Sprintf("lies before the first data line (byte %d)", first))
	}
	if off > l.size {
		return stale("lies past the end of the file")
	}
	if off == first || off == l.size {
		return nil
	}
	var prev [1]byte
	if _, err := l.f.ReadAt(prev[:], off-1); err != nil {
		return errs.IOf("reader: %s: %v", l.name(), err)
	}
	if prev[0] != '\n' {
		return stale("is not at the start of a line")
	}
	return nil
}

func (l *lines) close() error {
	l.closeFile()
	l.closed = true
	return nil
}

// textSource is a Source over lines with a per-line parser.
type textSource struct {
	l      *lines
	schema Schema
	parse  func(line []byte, lineNo int64, b *Batch) error
	m      mark
}

func (s *textSource) Schema() Schema { return s.schema }

func (s *textSource) Read(b *Batch, n int) (int, error) {
	b.Reset(s.schema, n)
	for b.Size < n {
		line, no, mine, err := s.l.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
		if !mine {
			continue
		}
		if b.Size%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
		if s.l.opt.SkipBad { // only a skipped row needs rolling back
			b.mark(&s.m)
		}
		if err := s.parse(line, no, b); err != nil {
			err = s.l.exactLine(err)
			if s.l.opt.SkipBad && !errors.Is(err, errs.ErrCapacity) { // a batch past its bound is no bad row
				b.rollback(&s.m)
				s.l.pos.Skipped++
				s.l.skips.dropped(1, err)
				continue
			}
			return 0, err
		}
		s.l.skips.kept()
	}
	if b.Size == 0 {
		return 0, io.EOF
	}
	return b.Size, nil
}

func (s *textSource) Position() Position    { return named(s.l.pos, s.l.names) }
func (s *textSource) Seek(p Position) error { return s.l.seek(p) }
func (s *textSource) Close() error          { return s.l.close() }

// FirstSkipped is the first row dropped under SkipBad since the source opened, or nil.
func (s *textSource) FirstSkipped() error { return s.l.skips.firstSkipped() }
