package reader

import (
	"bytes"
	"fmt"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// Criteo's display-advertising layout: a label, 13 integer fields I1..I13, 26 categorical fields
// C1..C26 (32-bit hex strings), tab-separated; an empty field is a missing value.
const (
	criteoInts = 13
	criteoCats = 26
)

// CriteoOptions configure [NewCriteo].
type CriteoOptions struct {
	Options
	// NoLabel reads files without the label column (the challenge's test files).
	NoLabel bool
	// NeedsLabels says the caller trains on the labels: a line of the unlabelled layout's field
	// count asks for a labelled file instead of suggesting NoLabel (labels=False), which would
	// read the file but leave nothing to train on. It contradicts NoLabel.
	NeedsLabels bool
	// RawDense keeps the integer fields as they are in the dense matrix; by default they become
	// log(1 + max(x, 0)), as DLRM feeds them to its bottom MLP.
	RawDense bool
}

// criteoSchema: sparse fields I1..I13 (the integers, for bucketize) then C1..C26 (hex as int64);
// dense columns I1..I13.
func criteoSchema(hasLabel bool) Schema {
	s := Schema{HasLabel: hasLabel}
	for i := 1; i <= criteoInts; i++ {
		s.Fields = append(s.Fields, Field{Name: fmt.Sprintf("I%d", i), Kind: feature.KindInt64})
		s.Dense = append(s.Dense, fmt.Sprintf("I%d", i))
	}
	for i := 1; i <= criteoCats; i++ {
		s.Fields = append(s.Fields, Field{Name: fmt.Sprintf("C%d", i), Kind: feature.KindInt64})
	}
	return s
}

// CriteoColumnName is the name of 1-based column c of a Criteo line.
func CriteoColumnName(c int, hasLabel bool) string {
	if hasLabel {
		if c == 1 {
			return "label"
		}
		c--
	}
	if c <= criteoInts {
		return fmt.Sprintf("I%d", c)
	}
	return fmt.Sprintf("C%d", c-criteoInts)
}

// NewCriteo opens Criteo TSV files (plain or gzip) as one source. Its sparse fields are I1..I13
// (the integers) and C1..C26 (each hex string's value as an int64), each bag empty when the field
// is missing; its dense columns are I1..I13 (0 when missing).
func NewCriteo(paths []string, opt CriteoOptions) (Source, error) {
	if opt.NoLabel && opt.NeedsLabels {
		return nil, errs.Invalidf("criteo: NeedsLabels (a caller that trains on the labels) contradicts NoLabel (a file without them)")
	}
	l, err := newLines(paths, opt.Options, false, nil, 0)
	if err != nil {
		return nil, err
	}
	s := &textSource{l: l, schema: criteoSchema(!opt.NoLabel)}
	p := criteoParser{hasLabel: !opt.NoLabel, needsLabels: opt.NeedsLabels, raw: opt.RawDense,
		file: func() string { return l.name() }}
	s.parse = p.parse
	return s, nil
}

type criteoParser struct {
	hasLabel, needsLabels, raw bool
	file                       func() string
}

func (p *criteoParser) fail(line int64, col int, format string, args ...any) error {
	return &ParseError{File: p.file(), Line: line, Row: -1, Column: col,
		Name: CriteoColumnName(col, p.hasLabel), Msg: fmt.Sprintf(format, args...)}
}

// parse appends one Criteo line to b. A malformed line whose field count is the other layout's
// (a test file's 39 fields read with labels, a training file's 40 without) says so and what to do:
// with the columns shifted by one, its error alone (a label "" that is no number, a hex value
// that is no integer, a long line) would not name the cause.
func (p *criteoParser) parse(line []byte, lineNo int64, b *Batch) error {
	err := p.parseLine(line, lineNo, b)
	if pe, ok := err.(*ParseError); ok {
		pe.Msg += p.layoutHint(line)
	}
	return err
}

// layoutHint is what a malformed line's error adds when the line has as many fields as the other
// Criteo layout's lines: labels=False/True are CriteoSource's (the reader's NoLabel option). A
// caller that trains on the labels (NeedsLabels) is told to give a labelled file instead.
func (p *criteoParser) layoutHint(line []byte) string {
	n := bytes.Count(line, []byte{'\t'}) + 1
	const unlabelled = " (the line has %d fields, as Criteo's unlabelled test files do: I1..I13 and C1..C26, no label; "
	switch {
	case p.hasLabel && n == criteoInts+criteoCats && p.needsLabels:
		return fmt.Sprintf(unlabelled+"training needs the clicks: give a Criteo training file, a label first on each line)", n)
	case p.hasLabel && n == criteoInts+criteoCats:
		return fmt.Sprintf(unlabelled+"if the file has no label column, read it with labels=False)", n)
	case !p.hasLabel && n == 1+criteoInts+criteoCats:
		return fmt.Sprintf(" (the line has %d fields, as Criteo's training files do: a label, then I1..I13 and C1..C26; if the file has a label column, read it with labels=True, the default)", n)
	}
	return ""
}

// parseLine appends one Criteo line to b.
func (p *criteoParser) parseLine(line []byte, lineNo int64, b *Batch) error {
	want := criteoInts + criteoCats
	if p.hasLabel {
		want++
	}
	col := 0
	rest := line
	nextField := func() ([]byte, bool) {
		if rest == nil {
			return nil, false
		}
		i := bytes.IndexByte(rest, '\t')
		var f []byte
		if i < 0 {
			f, rest = rest, nil
		} else {
			f, rest = rest[:i], rest[i+1:]
		}
		col++
		return f, true
	}
	if len(line) == 0 {
		return p.fail(lineNo, 0, "empty line")
	}
	full := b.atBound() // every field takes a value a row at most (see fitsOne)
	label := float32(0)
	if p.hasLabel {
		f, _ := nextField()
		v, ok := parseFloat(f)
		if !ok {
			return p.fail(lineNo, col, "label %q is not a number", f)
		}
		if label, ok = toFloat32(v); !ok {
			return p.fail(lineNo, col, "label %q is out of float32 range", f)
		}
	}
	for i := 0; i < criteoInts; i++ {
		f, ok := nextField()
		if !ok {
			return p.fail(lineNo, 0, "short line: %d fields, expected %d", col, want)
		}
		in := &b.Inputs[i]
		d := float32(0)
		if len(f) > 0 {
			v, ok := parseInt(f)
			if !ok {
				return p.fail(lineNo, col, "%q is not an integer", f)
			}
			if !b.fitsOne(in, 0, full) {
				return b.overLimit(p.file(), CriteoColumnName(i+1, false), in, 1, 0)
			}
			in.Ints = append(in.Ints, v)
			in.Lengths = append(in.Lengths, 1)
			if p.raw {
				d = float32(v)
			} else {
				d = log1pClip(float64(v))
			}
		} else {
			in.Lengths = append(in.Lengths, 0)
		}
		b.Dense = append(b.Dense, d)
	}
	for i := 0; i < criteoCats; i++ {
		f, ok := nextField()
		if !ok {
			return p.fail(lineNo, 0, "short line: %d fields, expected %d", col, want)
		}
		in := &b.Inputs[criteoInts+i]
		if len(f) == 0 {
			in.Lengths = append(in.Lengths, 0)
			continue
		}
		v, ok := parseHex(f)
		if !ok {
			return p.fail(lineNo, col, "%q is not a hex categorical value", f)
		}
		if !b.fitsOne(in, 0, full) {
			return b.overLimit(p.file(), CriteoColumnName(criteoInts+i+1, false), in, 1, 0)
		}
		in.Ints = append(in.Ints, v)
		in.Lengths = append(in.Lengths, 1)
	}
	if rest != nil {
		return p.fail(lineNo, 0, "long line: more than %d fields", want)
	}
	b.Labels = append(b.Labels, label)
	b.Size++
	return nil
}
