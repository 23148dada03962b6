package reader

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// quoteState is where a scan of CSV text stands: at a field's start, inside an unquoted field,
// inside a quoted one, or just past a quote inside a quoted field (an escaped quote or the closing
// one, which the next byte tells apart).
type quoteState uint8

const (
	atFieldStart quoteState = iota
	inUnquoted
	inQuoted
	afterQuote
)

// scanQuotes advances st over b, reading quotes as splitFields does: a field that starts with a
// quote runs to the quote that closes it, and "" inside it is one quote. Text after a closing quote
// is left for splitFields to name.
func scanQuotes(st quoteState, b []byte, delim byte) quoteState {
	for _, c := range b {
		switch st {
		case atFieldStart:
			if c == '"' {
				st = inQuoted
			} else if c != delim {
				st = inUnquoted
			}
		case inUnquoted:
			if c == delim {
				st = atFieldStart
			}
		case inQuoted:
			if c == '"' {
				st = afterQuote
			}
		case afterQuote:
			switch c {
			case '"':
				st = inQuoted
			case delim:
				st = atFieldStart
			default:
				st = inUnquoted
			}
		}
	}
	return st
}

// record returns the next record of the open file and the number of the line it starts on; io.EOF
// at the file's end. A record is one line, except in CSV (l.quotes), where a quoted field may span
// lines, its line endings part of its text, as Python's csv module and pandas read it. A quote
// still open at the end of the file, or a record past maxLine, is malformed (Consumed: the reader
// goes on after the lines it read).
func (l *lines) record() ([]byte, int64, error) {
	line, err := l.raw()
	first := l.lineNo
	if err == nil && l.longBlank {
		return l.blankRun(first)
	}
	if err != nil || !l.quotes || bytes.IndexByte(line, '"') < 0 {
		return line, first, err
	}
	st := scanQuotes(atFieldStart, line, l.delim)
	if st != inQuoted {
		return line, first, nil
	}
	// line and its ending point into the read buffer, which the next raw overwrites: copy them.
	l.rec = append(l.rec[:0], line...)
	for st == inQuoted {
		l.rec = append(l.rec, l.ending...)
		line, err = l.raw()
		if err == io.EOF {
			return nil, first, &ParseError{File: l.name(), Line: first, Row: -1, Consumed: true,
				Msg: "a quoted field that starts on this line is not closed by the end of the file"}
		}
		if err != nil {
			return nil, first, err
		}
		if len(l.rec)+len(line) >= maxLine {
			return nil, first, &ParseError{File: l.name(), Line: first, Row: -1, Consumed: true, Msg: fmt.Sprintf(
				"a quoted field that starts on this line runs to line %d and past %d MiB (a quote not closed?)",
				l.lineNo, maxLine>>20)}
		}
		st = scanQuotes(st, line, l.delim)
		l.rec = append(l.rec, line...)
	}
	return l.rec, first, nil
}

// exactLine corrects the line number of err, a malformed row of the open file, after a resume by
// byte offset in a CSV file: the resume numbers lines as if every record were one line, which
// quoted fields spanning lines make short. The lines before the offset are counted at the first
// such error only, since resuming reads nothing before its offset.
func (l *lines) exactLine(err error) error {
	var pe *ParseError
	if l.uncounted <= 0 || !errors.As(err, &pe) || pe.Line <= 0 || !l.open || pe.File != l.name() {
		return err
	}
	n, cerr := countLines(l, l.dataStart, l.uncounted)
	if cerr != nil {
		return err // the row's error stands, its line number as estimated
	}
	extra := n - l.seekRow
	l.uncounted = 0
	l.lineNo += extra
	pe.Line += extra
	return err
}

// countLines counts the line endings in bytes [from, to) of l's open plain file, read without
// moving the offset the reader reads at.
func countLines(l *lines, from, to int64) (int64, error) {
	buf := make([]byte, 1<<20)
	n := int64(0)
	for at := from; at < to; {
		k, err := l.f.ReadAt(buf[:min(int64(len(buf)), to-at)], at)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		at += int64(k)
		if err != nil && (err != io.EOF || at < to) {
			return 0, err
		}
	}
	return n, nil
}
