package reader

import (
	"errors"

	"github.com/recgo/recgo/internal/errs"
)

// allBadMin is how many of a rank's rows of a file must all have been dropped as malformed for
// the file to fail under SkipBad when the rank shares the file with others (a rank reading all
// its rows fails on any number): with fewer, a few bad rows of a small file could fall to one
// rank alone.
const allBadMin = 8

// skipLog follows what SkipBad drops. Over the whole source it keeps the first dropped row's
// error (what the pipeline's stats report, so that a high skip count comes with its reason); per
// file it counts this rank's rows read and dropped since the file was opened, so that a file none
// of whose rows parse (a file of another layout: Criteo read with the wrong labels=, a CSV with
// the wrong columns or delimiter) fails at its end instead of vanishing into the skipped count.
// Rows lost to damage (a truncated file, an undecodable Parquet row group) are counted but never
// fail a file by themselves: skipping damage is what SkipBad is for.
type skipLog struct {
	first error // the first row dropped since the source opened
	// this rank's rows of the open file: read, dropped, and dropped as malformed (not damage)
	rows, bad, malformed int64
	fileFirst            error // the first row of the open file dropped as malformed
	// partial: the source was sought into the open file past rows of this rank, whose drops it
	// never saw, so the counts cover only the file's rest and cannot judge the file
	partial bool
}

// startFile resets the per-file counts (a file opened, or the source sought into one).
func (k *skipLog) startFile() {
	k.rows, k.bad, k.malformed, k.fileFirst, k.partial = 0, 0, 0, nil, false
}

// soughtInto notes a seek to p in the file just opened (rank of world): when this rank read rows of
// the file before p, the file is not judged at its end. Its counts start at p, and judging the
// rest alone failed a resumed run over a file whose last rows are malformed, at rows the
// uninterrupted run, which had kept rows of the file before p, read without error.
func (k *skipLog) soughtInto(p Position, rank, world int) {
	k.startFile()
	k.partial = rankRows(p.Global-p.Row, p.Global, rank, world) > 0
}

// rankRows counts the global row indices g in [lo, hi) with g mod world = rank (the rank's rows).
func rankRows(lo, hi int64, rank, world int) int64 {
	below := func(n int64) int64 { // rank's rows in [0, n)
		if n <= int64(rank) {
			return 0
		}
		return (n - int64(rank) + int64(world) - 1) / int64(world)
	}
	return below(hi) - below(lo)
}

// kept counts a row of this rank that was read.
func (k *skipLog) kept() { k.rows++ }

// dropped counts n rows of this rank dropped for err.
func (k *skipLog) dropped(n int64, err error) {
	if n <= 0 {
		return
	}
	k.rows += n
	k.bad += n
	if k.first == nil {
		k.first = err
	}
	var pe *ParseError
	if errors.As(err, &pe) && pe.Truncated {
		return
	}
	k.malformed += n
	if k.fileFirst == nil {
		k.fileFirst = err
	}
}

// endFile checks the file just read to its end (path; wholeRank: this rank reads every row of it)
// and resets the counts: unless the source was sought into it past rows of this rank, an error
// when every row of it this rank read was dropped, some as malformed, and there were allBadMin of
// them or wholeRank.
func (k *skipLog) endFile(path string, wholeRank bool) error {
	rows, bad, malformed, first := k.rows, k.bad, k.malformed, k.fileFirst
	partial := k.partial
	k.startFile()
	if partial || rows == 0 || bad < rows || malformed == 0 || (rows < allBadMin && !wholeRank) {
		return nil
	}
	return errs.Invalidf("reader: %s: all %d rows read were malformed and skipped (skip_bad), so nothing of the "+
		"file would be trained on; is it the right file, and read with the right settings (labels=, columns, "+
		"delimiter, header)? The first: %v", path, rows, first)
}

// firstSkipped is the first row dropped since the source opened, or nil.
func (k *skipLog) firstSkipped() error { return k.first }

// SkipReporter is a source that reports why rows were dropped under SkipBad.
type SkipReporter interface {
	// FirstSkipped is the error of the first row dropped since the source opened, or nil.
	FirstSkipped() error
}

// rowsOfRank is how many of the k global rows from global on fall to rank (row g falls to rank
// g mod world).
func rowsOfRank(global, k int64, world, rank int) int64 {
	w, r := int64(world), int64(rank)
	upTo := func(x int64) int64 { // rows of this rank among global rows [0, x)
		n := x / w
		if x%w > r {
			n++
		}
		return n
	}
	return upTo(global+k) - upTo(global)
}
