package reader

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// Role is what a declared column becomes in a batch.
type Role string

// The column roles.
const (
	RoleLabel    Role = "label"    // the label (a number; one column at most)
	RoleDense    Role = "dense"    // a dense float column (empty: 0)
	RoleSparse   Role = "sparse"   // a sparse field of one value (empty: an empty bag)
	RoleSequence Role = "sequence" // a sparse field of Sep-separated values (empty: an empty bag)
	RoleSkip     Role = "skip"     // not read
)

// Column declares one column of a CSV or Parquet source.
type Column struct {
	// Name is the column's name (matched against the header or the Parquet schema) and the field's
	// name in the batch.
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Type is the value type of sparse and sequence columns: "int" (decimal, the default), "hex",
	// "string" (byte strings, for the hash transform) or "float".
	Type string `json:"type,omitempty"`
	// Sep separates a sequence column's values in CSV (default "|").
	Sep string `json:"sep,omitempty"`
}

func (c Column) kind() (feature.Kind, error) {
	switch c.Type {
	case "", "int", "hex":
		return feature.KindInt64, nil
	case "string":
		return feature.KindBytes, nil
	case "float":
		return feature.KindFloat64, nil
	}
	return 0, errs.Invalidf("column %q: unknown type %q (int, hex, string, float)", c.Name, c.Type)
}

// columnPlan is a validated column list: the schema and, per column, its slot in the batch.
type columnPlan struct {
	cols   []Column
	slot   []int // sparse/sequence: field index; dense: dense column; label/skip: -1
	schema Schema
}

func planColumns(cols []Column) (*columnPlan, error) {
	if len(cols) == 0 {
		return nil, errs.Invalidf("reader: no columns declared")
	}
	p := &columnPlan{cols: cols, slot: make([]int, len(cols))}
	names := map[string]bool{}
	for i, c := range cols {
		if c.Name == "" {
			return nil, errs.Invalidf("reader: column %d has no name", i+1)
		}
		if names[c.Name] && c.Role != RoleSkip {
			return nil, errs.Invalidf("reader: column %q declared twice", c.Name)
		}
		names[c.Name] = true
		p.slot[i] = -1
		switch c.Role {
		case RoleLabel:
			if p.schema.HasLabel {
				return nil, errs.Invalidf("reader: two label columns (%q)", c.Name)
			}
			p.schema.HasLabel = true
		case RoleDense:
			p.slot[i] = len(p.schema.Dense)
			p.schema.Dense = append(p.schema.Dense, c.Name)
		case RoleSparse, RoleSequence:
			k, err := c.kind()
			if err != nil {
				return nil, err
			}
			if c.Role == RoleSequence && c.Sep == "" {
				cols[i].Sep = "|"
			}
			p.slot[i] = len(p.schema.Fields)
			p.schema.Fields = append(p.schema.Fields, Field{Name: c.Name, Kind: k})
		case RoleSkip:
		default:
			return nil, errs.Invalidf("reader: column %q has unknown role %q (label, dense, sparse, sequence, skip)", c.Name, c.Role)
		}
	}
	return p, nil
}

// appendValue appends one typed value of column c to in; ok is false when it does not parse.
func appendValue(c *Column, in *feature.Input, v []byte) bool {
	switch in.Kind {
	case feature.KindBytes:
		in.Bytes = append(in.Bytes, v...)
		in.ByteLens = append(in.ByteLens, int64(len(v)))
	case feature.KindFloat64:
		x, ok := parseFloat(v)
		if !ok {
			return false
		}
		in.F64 = append(in.F64, x)
	default:
		var x int64
		var ok bool
		if c.Type == "hex" {
			x, ok = parseHex(v)
		} else {
			x, ok = parseInt(v)
		}
		if !ok {
			return false
		}
		in.Ints = append(in.Ints, x)
	}
	return true
}

// stringBytes is the bytes of strings that values of n bytes of text add to in: n for a byte-string
// field, none for a numeric one.
func stringBytes(in *feature.Input, n int) int64 {
	if in.Kind == feature.KindBytes {
		return int64(n)
	}
	return 0
}

// CSVOptions configure [NewCSV].
type CSVOptions struct {
	Options
	// Columns declares the columns: with Header, those read (by name, in any order; others are
	// skipped); without, every column of the file in order.
	Columns []Column
	// Header says the first line of each file names the columns.
	Header bool
	// Delimiter separates fields (default ','). A field that starts with a double quote is quoted,
	// as Python's csv module and pandas write it (see splitFields), and may span lines (a record of
	// several lines, its line endings part of the field's text).
	Delimiter byte
}

// NewCSV opens delimited text files (plain or gzip) with a declared schema as one source.
func NewCSV(paths []string, opt CSVOptions) (Source, error) {
	plan, err := planColumns(opt.Columns)
	if err != nil {
		return nil, err
	}
	if opt.Delimiter == 0 {
		opt.Delimiter = ','
	}
	for _, c := range plan.cols {
		if c.Role == RoleSequence && strings.IndexByte(c.Sep, opt.Delimiter) >= 0 {
			return nil, errs.Invalidf("reader: column %q: the sequence separator %q contains the delimiter %q",
				c.Name, c.Sep, opt.Delimiter)
		}
	}
	p := &csvParser{plan: plan, delim: opt.Delimiter}
	if !opt.Header {
		p.index = make([]int, len(plan.cols))
		for i := range p.index {
			p.index[i] = i
		}
		p.width = len(plan.cols)
	}
	var onOpen func(string, []byte) error
	if opt.Header {
		onOpen = p.header
	}
	l, err := newLines(paths, opt.Options, opt.Header, onOpen, opt.Delimiter)
	if err != nil {
		return nil, err
	}
	p.file = l.name
	s := &textSource{l: l, schema: plan.schema, parse: p.parse}
	return s, nil
}

type csvParser struct {
	plan   *columnPlan
	delim  byte
	index  []int // per declared column: its field index in the line
	width  int   // fields per line
	names  []string
	fields [][]byte
	unq    []byte // the line's quoted fields with "" in them, unescaped
	file   func() string
}

// splitFields splits a delimited line into fields as Python's csv module reads it: a field that
// starts with a double quote runs to the quote that closes it (delimiters inside it are text, and
// "" stands for one quote), any other field is taken as it is. Unescaped fields are copied into
// p.unq. bad is the 0-based field at fault and why: a quote the record does not close (lines.record
// joins the lines a quoted field spans, so only a record cut short ends inside one), or text between
// a closing quote and the next delimiter.
func (p *csvParser) splitFields(line []byte) (bad int, why string) {
	p.fields = p.fields[:0]
	// The common case, without quotes. It repeats the loop's unquoted branch below on purpose: a
	// shared helper is not inlined, and a call per field slowed the split measurably.
	if bytes.IndexByte(line, '"') < 0 {
		for rest := line; ; {
			i := bytes.IndexByte(rest, p.delim)
			if i < 0 {
				p.fields = append(p.fields, rest)
				return -1, ""
			}
			p.fields = append(p.fields, rest[:i])
			rest = rest[i+1:]
		}
	}
	if cap(p.unq) < len(line) { // unescaped fields are shorter than the line: no append reallocates
		p.unq = make([]byte, 0, len(line))
	}
	p.unq = p.unq[:0]
	for rest := line; ; {
		if len(rest) == 0 || rest[0] != '"' {
			i := bytes.IndexByte(rest, p.delim)
			if i < 0 {
				p.fields = append(p.fields, rest)
				return -1, ""
			}
			p.fields = append(p.fields, rest[:i])
			rest = rest[i+1:]
			continue
		}
		body, end, escaped := rest[1:], -1, false
		for i := 0; i < len(body); i++ {
			if body[i] != '"' {
				continue
			}
			if i+1 < len(body) && body[i+1] == '"' {
				escaped = true
				i++
				continue
			}
			end = i
			break
		}
		if end < 0 {
			return len(p.fields), "a quoted field that its record does not close"
		}
		f := body[:end]
		if escaped {
			at := len(p.unq)
			for k := 0; k < len(f); k++ {
				p.unq = append(p.unq, f[k])
				if f[k] == '"' {
					k++
				}
			}
			f = p.unq[at:]
		}
		p.fields = append(p.fields, f)
		rest = body[end+1:]
		if len(rest) == 0 {
			return -1, ""
		}
		if rest[0] != p.delim {
			if i := bytes.IndexByte(rest, p.delim); i >= 0 {
				rest = rest[:i]
			}
			return len(p.fields) - 1, fmt.Sprintf("text %q after the closing quote of a quoted field", rest)
		}
		rest = rest[1:]
	}
}

// header maps the declared columns to a file's header fields.
func (p *csvParser) header(file string, line []byte) error {
	if bad, why := p.splitFields(line); bad >= 0 {
		return &ParseError{File: file, Line: 1, Row: -1, Column: bad + 1, Msg: "header field " + strconv.Itoa(bad+1) + ": " + why}
	}
	p.names = p.names[:0]
	for _, f := range p.fields {
		p.names = append(p.names, string(f))
	}
	p.width = len(p.names)
	p.index = make([]int, len(p.plan.cols))
	for i, c := range p.plan.cols {
		p.index[i] = -1
		for j, n := range p.names {
			if n != c.Name {
				continue
			}
			if p.index[i] >= 0 && c.Role != RoleSkip {
				return &ParseError{File: file, Line: 1, Row: -1, Name: c.Name, Msg: fmt.Sprintf(
					"column %q is in the header twice (fields %d and %d): rename one", c.Name, p.index[i]+1, j+1)}
			}
			if p.index[i] < 0 {
				p.index[i] = j
			}
		}
		if p.index[i] < 0 && c.Role != RoleSkip {
			return &ParseError{File: file, Line: 1, Row: -1, Name: c.Name,
				Msg: fmt.Sprintf("missing column %q (the header has %s)", c.Name, quoted(p.names))}
		}
	}
	return nil
}

// quoted lists names as Go-quoted strings, so that invisible or odd bytes in them show.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

func (p *csvParser) name(field int) string {
	if field < len(p.names) {
		return p.names[field]
	}
	for i, j := range p.index {
		if j == field {
			return p.plan.cols[i].Name
		}
	}
	return ""
}

func (p *csvParser) fail(line int64, field int, format string, args ...any) error {
	e := &ParseError{File: p.file(), Line: line, Row: -1, Msg: fmt.Sprintf(format, args...)}
	if field >= 0 {
		e.Column, e.Name = field+1, p.name(field)
	}
	return e
}

// parse appends one delimited line to b.
func (p *csvParser) parse(line []byte, lineNo int64, b *Batch) error {
	if len(line) == 0 { // malformed, as in the other formats (one column would read it as an empty value)
		return p.fail(lineNo, -1, "blank line (rows follow it)")
	}
	if bad, why := p.splitFields(line); bad >= 0 {
		return p.fail(lineNo, bad, "%s", why)
	}
	if len(p.fields) != p.width {
		kind := "short"
		if len(p.fields) > p.width {
			kind = "long"
		}
		return p.fail(lineNo, -1, "%s line: %d fields, expected %d", kind, len(p.fields), p.width)
	}
	label := float32(0)
	full := b.atBound() // a sparse column takes a value a row at most (see fitsOne)
	for i := range p.plan.cols {
		c := &p.plan.cols[i]
		j := p.index[i]
		if j < 0 || c.Role == RoleSkip {
			continue
		}
		v := p.fields[j]
		switch c.Role {
		case RoleLabel:
			x, ok := parseFloat(v)
			if !ok {
				return p.fail(lineNo, j, "label %q is not a number", v)
			}
			if label, ok = toFloat32(x); !ok {
				return p.fail(lineNo, j, "label %q is out of float32 range", v)
			}
		case RoleDense:
			x := float32(0)
			if len(v) > 0 {
				f, ok := parseFloat(v)
				if !ok {
					return p.fail(lineNo, j, "%q is not a number", v)
				}
				if x, ok = toFloat32(f); !ok {
					return p.fail(lineNo, j, "%q is out of float32 range", v)
				}
			}
			b.Dense = append(b.Dense, x)
		case RoleSparse:
			in := &b.Inputs[p.plan.slot[i]]
			if len(v) == 0 {
				in.Lengths = append(in.Lengths, 0)
				continue
			}
			if nb := stringBytes(in, len(v)); !b.fitsOne(in, nb, full) {
				return b.overLimit(p.file(), c.Name, in, 1, nb)
			}
			if !appendValue(c, in, v) {
				return p.fail(lineNo, j, "%q is not a valid %s value", v, typeName(c))
			}
			in.Lengths = append(in.Lengths, 1)
		case RoleSequence:
			in := &b.Inputs[p.plan.slot[i]]
			n := int64(0)
			if len(v) > 0 {
				sep := []byte(c.Sep)
				k := int64(bytes.Count(v, sep)) + 1 // counted first: the row's values are checked before any is appended
				if nb := stringBytes(in, len(v)-int(k-1)*len(sep)); !b.fits(in, k, nb) {
					return b.overLimit(p.file(), c.Name, in, k, nb)
				}
				for rest, more := v, true; more; {
					var e []byte
					e, rest, more = bytes.Cut(rest, sep)
					if !appendValue(c, in, e) {
						return p.fail(lineNo, j, "sequence element %d %q is not a valid %s value", n+1, e, typeName(c))
					}
					n++
				}
			}
			in.Lengths = append(in.Lengths, n)
		}
	}
	b.Labels = append(b.Labels, label)
	b.Size++
	return nil
}

func typeName(c *Column) string {
	if c.Type == "" {
		return "int"
	}
	return c.Type
}
