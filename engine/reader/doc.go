// Package reader holds recgo's data readers: streaming sources of raw training samples that the
// input pipeline (engine/pipeline) turns into prepared batches.
//
// Every [Source] is
//
//   - streaming: it reads a batch at a time and keeps one buffered window of its file open;
//   - sharded by rank: physical row g (counted over all files in order, malformed rows included) is
//     this source's sample when g mod WorldSize == Rank, so the ranks of a job read disjoint samples
//     that together cover the data, and the split does not depend on how many rows are skipped;
//   - deterministic: the same configuration yields the same samples in the same order;
//   - resumable: [Source.Position] is a small value that goes into a checkpoint, and [Source.Seek]
//     continues from it (text files by byte offset, gzip files by re-reading to the line, Parquet by
//     row index, the synthetic generator by sample index).
//
// The formats: Criteo's display-advertising TSV ([NewCriteo]; label, 13 integer fields, 26 hex
// categorical fields, empty fields missing; plain or gzip-compressed), CSV with a declared schema
// ([NewCSV]), Parquet with columns mapped like CSV ([NewParquet]), and the synthetic generator with
// power-law IDs and an optional planted label model ([NewSynthetic], the embedded default source).
//
// Malformed input (a short line, a bad number, a missing column, a truncated file) returns a
// [*ParseError] naming the file, the line or row and the column; with [Options.SkipBad] the row is
// dropped instead and counted (Position.Skipped; the first one's error by [SkipReporter]), but a
// file all of whose rows a rank read were malformed fails at its end (see skipLog): a file of
// another layout is an error, not an empty epoch. Sources are not safe for concurrent use: the
// pipeline's READ stage owns one.
package reader
