package reader

import (
	"fmt"
	"math"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// Field is one sparse input a source produces: a jagged field of Kind values per sample (an empty
// bag is a missing value). Its Name is what a feature spec's input refers to.
type Field struct {
	Name string
	Kind feature.Kind
}

// Schema describes the batches of a source: the sparse fields (in [Batch.Inputs] order), the dense
// columns (in [Batch.Dense] column order), and whether a label column exists (labels are 0 if not).
type Schema struct {
	Fields   []Field
	Dense    []string
	HasLabel bool
}

// FieldIndex returns the index of the named field, or -1.
func (s Schema) FieldIndex(name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// DefaultMaxValues is the default of [Batch.MaxValues]: 2^28 values (2 GiB of int64) in a field, the
// feature engine's default max_values. A pipeline bounds its raw batches at the larger of this and
// its engine's max_values (see [Batch.MaxValues]).
const DefaultMaxValues = feature.DefaultMaxValues

// Batch is a batch of raw samples: Size labels, a Size × len(Schema.Dense) row-major dense matrix
// and one jagged [feature.Input] per sparse field (Lengths always set). A source reuses the memory
// of the batch it is given.
type Batch struct {
	Size   int
	Labels []float32
	Dense  []float32
	Inputs []feature.Input
	// MaxValues bounds each sparse field of the batch: at most MaxValues values, and a byte-string
	// field at most the bytes of strings that MaxValues int64s take. It bounds the reader's memory
	// (the values a compact or compressed file may declare), not what a feature engine takes: a
	// source checks the bound before it grows a field's buffers, so a row whose values would pass it
	// fails the Read with an errs.ErrCapacity error naming the field (never skipped as a malformed
	// row: the row is well formed, the batch too large). Zero means DefaultMaxValues. A pipeline sets
	// the larger of DefaultMaxValues and its engine's max_values, not the engine's alone: a transform
	// that shrinks a field before the engine checks its buffers (truncate, filter) takes a raw field
	// of more values than max_values, and a field no feature reads is not the engine's to bound.
	MaxValues int64
	// rows is the number of rows the Read filling the batch asked for (for errors; see Reset).
	rows int
}

// limits returns the values and the bytes of strings one sparse field of b may hold.
func (b *Batch) limits() (values, bytes int64) {
	values = b.MaxValues
	if values <= 0 {
		values = DefaultMaxValues
	}
	return values, min(values, math.MaxInt64/8) * 8
}

// fieldValues is the number of values in.
func fieldValues(in *feature.Input) int64 {
	return int64(len(in.Ints) + len(in.F32) + len(in.F64) + len(in.ByteLens))
}

// fits reports whether sparse field in of b can take values more values holding nbytes more bytes
// of strings, and when it can, grows the field's buffers to hold them. It is called before the values
// are appended.
func (b *Batch) fits(in *feature.Input, values, nbytes int64) bool {
	lv, lb := b.limits()
	if fieldValues(in) > lv-values || int64(len(in.Bytes)) > lb-nbytes {
		return false
	}
	switch in.Kind {
	case feature.KindInt64:
		in.Ints = grow(in.Ints, values, lv)
	case feature.KindFloat64:
		in.F64 = grow(in.F64, values, lv)
	case feature.KindFloat32:
		in.F32 = grow(in.F32, values, lv)
	case feature.KindBytes:
		in.ByteLens = grow(in.ByteLens, values, lv)
		in.Bytes = grow(in.Bytes, nbytes, lb)
	}
	return true
}

// grow returns s with room for k more elements, never past limit (which len(s)+k is within): its
// capacity doubles, so that a field grown to the limit leaves less garbage behind than append's
// smaller steps for large slices, which took several times the field's memory before a collection.
func grow[T any](s []T, k, limit int64) []T {
	n := int64(len(s)) + k
	if n <= int64(cap(s)) {
		return s
	}
	g := make([]T, len(s), min(max(n, 2*int64(cap(s))), limit))
	copy(g, s)
	return g
}

// overLimit is the error for sparse field in of b, named name, that cannot take values more values
// holding nbytes more bytes of strings (see fits); where names the source (its file).
func (b *Batch) overLimit(where, name string, in *feature.Input, values, nbytes int64) error {
	lv, lb := b.limits()
	batch := fmt.Sprintf("by row %d of a batch of %d rows", b.Size+1, max(b.rows, b.Size+1))
	const bound = "a field of a raw batch may hold (the reader's memory bound: in a pipeline, the larger of 2^28 " +
		"values and the feature engine's max_values); read smaller batches or raise max_values"
	if n := fieldValues(in) + values; n > lv {
		return errs.Capacityf("reader: %s: field %q would hold %d values %s, past the limit of %d values "+bound,
			where, name, n, batch, lv)
	}
	return errs.Capacityf("reader: %s: field %q would hold %d bytes of strings %s, past the limit of %d bytes (8 "+
		"for each of %d values) "+bound, where, name, int64(len(in.Bytes))+nbytes, batch, lb, lv)
}

// atBound reports whether b holds as many rows as its fields' bound: only then can a field that
// takes at most one value a row pass the bound with the next row's. A parser asks once a row and
// passes the answer to fitsOne.
func (b *Batch) atBound() bool {
	lv, _ := b.limits()
	return int64(b.Size) >= lv
}

// fitsOne is fits for one value holding nbytes bytes of strings in sparse field in of b, a field
// that takes at most one value a row; full is atBound's answer for the row. A numeric value is
// checked only when full (before, the field holds at most a value for each of the batch's rows,
// fewer than the bound), which spares a check per value of every row; a byte string always (its
// bytes are not bounded by the rows). Buffers a value is not checked for grow as append grows them.
func (b *Batch) fitsOne(in *feature.Input, nbytes int64, full bool) bool {
	return !full && in.Kind != feature.KindBytes || b.fits(in, 1, nbytes)
}

// Reset empties b for a Read of up to rows rows from a source with schema s, keeping its memory.
func (b *Batch) Reset(s Schema, rows int) {
	b.Size, b.rows = 0, rows
	b.Labels = b.Labels[:0]
	b.Dense = b.Dense[:0]
	if len(b.Inputs) != len(s.Fields) {
		b.Inputs = make([]feature.Input, len(s.Fields))
	}
	for i, f := range s.Fields {
		in := &b.Inputs[i]
		in.Kind = f.Kind
		in.Ints, in.F32, in.F64 = in.Ints[:0], in.F32[:0], in.F64[:0]
		in.Bytes, in.ByteLens = in.Bytes[:0], in.ByteLens[:0]
		if in.Lengths == nil {
			in.Lengths = make([]int64, 0, 64)
		}
		in.Lengths = in.Lengths[:0]
	}
}

// mark records the lengths of every slice so a half-parsed row can be rolled back.
type mark struct {
	size, labels, dense int
	inputs              []inputMark
}

type inputMark struct{ ints, f64, bytes, byteLens, lengths int }

func (b *Batch) mark(m *mark) {
	m.size, m.labels, m.dense = b.Size, len(b.Labels), len(b.Dense)
	if len(m.inputs) != len(b.Inputs) {
		m.inputs = make([]inputMark, len(b.Inputs))
	}
	for i := range b.Inputs {
		in := &b.Inputs[i]
		m.inputs[i] = inputMark{len(in.Ints), len(in.F64), len(in.Bytes), len(in.ByteLens), len(in.Lengths)}
	}
}

func (b *Batch) rollback(m *mark) {
	b.Size, b.Labels, b.Dense = m.size, b.Labels[:m.labels], b.Dense[:m.dense]
	for i := range b.Inputs {
		in, im := &b.Inputs[i], m.inputs[i]
		in.Ints, in.F64, in.Bytes = in.Ints[:im.ints], in.F64[:im.f64], in.Bytes[:im.bytes]
		in.ByteLens, in.Lengths = in.ByteLens[:im.byteLens], in.Lengths[:im.lengths]
	}
}

// Position is where a source stands: enough to continue from there after a restart.
type Position struct {
	// File is the index of the file being read (its path list order).
	File int `json:"file"`
	// Row is the number of physical rows (lines after any header, or records) consumed in File.
	Row int64 `json:"row"`
	// Offset is the byte offset after those rows in an uncompressed text file, or -1.
	Offset int64 `json:"offset"`
	// Global is the number of physical rows consumed over all files: the sharding counter.
	Global int64 `json:"global"`
	// Skipped counts the malformed rows of this rank dropped so far (Options.SkipBad).
	Skipped int64 `json:"skipped"`
	// Name is the base name of File, which Seek checks: a position taken over other files, or the
	// same files in another order, is refused rather than resumed at the wrong rows ("" in positions
	// saved before session 35 and the synthetic source's: not checked).
	Name string `json:"name,omitempty"`
	// Shuffle and Seed are the window and seed of a shuffled source ([NewShuffled]; 0: not
	// shuffled), Window the windows it started, Taken the rows of the last one it handed out (0:
	// none started; the other fields are then where the source stands, else where that window
	// began).
	Shuffle int    `json:"shuffle,omitempty"`
	Seed    uint64 `json:"seed,omitempty"`
	Window  int64  `json:"window,omitempty"`
	Taken   int64  `json:"taken,omitempty"`
}

// Source is a stream of samples. It is not safe for concurrent use.
type Source interface {
	// Schema describes the batches Read produces.
	Schema() Schema
	// Read resets b and fills it with up to n of this rank's next samples, returning how many;
	// it returns 0 and io.EOF when the source is exhausted. After any other error the source
	// stands after the failing row and the batch must be discarded.
	Read(b *Batch, n int) (int, error)
	// Position reports where the source stands (after the last sample Read returned).
	Position() Position
	// Seek continues from a position an equal source reported.
	Seek(p Position) error
	// Close releases the open file; further calls fail.
	Close() error
}

// Options are the settings every source shares.
type Options struct {
	// Rank and WorldSize shard the rows: row g is read when g mod WorldSize == Rank.
	Rank, WorldSize int
	// SkipBad drops malformed rows (counted in Position.Skipped) instead of failing.
	SkipBad bool
}

func (o *Options) check() error {
	if o.WorldSize == 0 {
		o.WorldSize = 1
	}
	if o.WorldSize < 0 || o.Rank < 0 || o.Rank >= o.WorldSize {
		return errs.Invalidf("reader: rank %d outside a world of %d", o.Rank, o.WorldSize)
	}
	return nil
}

// ParseError is a malformed row: the file, the 1-based line (text) or 0-based row (Parquet), the
// 1-based column and its name where known.
type ParseError struct {
	File   string
	Line   int64 // 1-based line number, or -1
	Row    int64 // 0-based record index (Parquet), or -1
	Column int   // 1-based, 0 when the whole row is at fault
	Name   string
	Msg    string
	// Truncated marks a file that ends inside a record or a compressed stream (an errs.ErrIO).
	Truncated bool
	// Consumed marks an error after which the reader can go on: it read past the bad line (or, when
	// Truncated, gives up the rest of the file), so skip_bad skips it as one malformed row, or as
	// Rows of them.
	Consumed bool
	Rows     int64 // the malformed rows a Consumed error covers (0: one)
}

// Error names where the malformed input is (file, line, row, column) and what was wrong with it.
func (e *ParseError) Error() string {
	where := e.File
	if e.Line >= 0 {
		where += fmt.Sprintf(" line %d", e.Line)
	}
	if e.Row >= 0 {
		where += fmt.Sprintf(" row %d", e.Row)
	}
	if e.Column > 0 {
		where += fmt.Sprintf(" column %d", e.Column)
		if e.Name != "" {
			where += fmt.Sprintf(" (%s)", e.Name)
		}
	}
	return where + ": " + e.Msg
}

// Is makes a ParseError an errs.ErrInvalid, or an errs.ErrIO when the file is truncated.
func (e *ParseError) Is(target error) bool {
	if e.Truncated {
		return target == errs.ErrIO
	}
	return target == errs.ErrInvalid
}
