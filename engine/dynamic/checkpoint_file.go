package dynamic

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/files"
)

// The checkpoint file of one dynamic table (written by [Table.Save], read by [Table.Load]) holds the
// rows in use only, so its size follows the table's high water mark, not its bound. Layout, all
// little-endian:
//
//	magic "RGDYNCK1"
//	header: version (uint32), then 14 int64: dim, state width, row bound, sketch width, step,
//	        admitted, evicted, high water, free-list length, sketch length, sketch-adds length,
//	        optimizer step, seed (the uint64's bits), sketch indexing (1 or 2: [SketchIndexing]).
//	        Version 2 (sessions 34 to 43) has the first 13 only, version 1 (before) the first 12: read
//	        with the indexing unmarked (and version 1 the seed unknown), and written back so.
//	CRC-32C of magic and header (uint32)
//	sections, each followed by its CRC-32C (uint32): ids, counts, last seen, free (int64 each);
//	        weights, state (float32); sketch (uint8); sketch adds (int64)
//
// Reading checks the magic, version, every checksum and every size against the file's length before
// allocating, then [Snapshot.validate] checks the contents against the table.
//
// Nothing in a version-2 file says which indexing placed its sketch's counters: it is read as
// SketchV1, which wrote every such file but those of the day between session 43's change of the
// indexing and version 3 (this repository's own runs; see [SketchUnmarked]).
const (
	fileMagic      = "RGDYNCK1"
	fileVersion    = 3
	headerInts     = 14 // version 1: 12 (no seed), version 2: 13 (no sketch indexing)
	sectionCount   = 8
	maxFileDim     = 1 << 20
	maxStateFactor = 2 // Adam keeps 2·dim state values per row
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// headerBytes is the length of a file's magic, version and header of the given version (1 to 3):
// each version added one int64 to the header.
func headerBytes(version uint32) int {
	return len(fileMagic) + 4 + 8*(headerInts-fileVersion+int(version))
}

// sectionNames name the file's sections in errors.
var sectionNames = [sectionCount]string{"ids", "counts", "last_seen", "free", "weights", "state", "sketch", "sketch_adds"}

// Checkpoint is what a dynamic-table checkpoint file holds: the table's snapshot and the collection's
// optimizer step counter for the table (Adam's bias correction).
type Checkpoint struct {
	Snapshot      *Snapshot
	OptimizerStep int64
}

// Encode returns the checkpoint's file contents.
func (c *Checkpoint) Encode() []byte {
	s := c.Snapshot
	hdr := []int64{int64(s.Dim), int64(s.StateWidth), int64(s.MaxRows), int64(s.SketchWidth), s.Step,
		s.Admitted, s.Evicted, int64(len(s.IDs)), int64(len(s.Free)), int64(len(s.Sketch)), int64(len(s.SketchAdds)),
		c.OptimizerStep, int64(s.Seed), int64(s.SketchIndexing)}
	// An older file read back is written as it was (the encoding is canonical): version 2 without
	// the indexing, version 1 without the seed either. (A marked indexing comes with the seed: Export
	// and the readers set both.)
	version := uint32(fileVersion)
	if s.SketchIndexing == SketchUnmarked {
		version = 2
		if !s.SeedKnown {
			version = 1
		}
	}
	hdr = hdr[:headerInts-fileVersion+int(version)]
	size := headerBytes(version) + 4 + 4*sectionCount + 8*(3*len(s.IDs)+len(s.Free)+len(s.SketchAdds)) +
		4*(len(s.Weights)+len(s.State)) + len(s.Sketch)
	b := make([]byte, 0, size)
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint32(b, version)
	for _, v := range hdr {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	section := func(appendValues func([]byte) []byte) {
		start := len(b)
		b = appendValues(b)
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
	}
	ints := func(v []int64) func([]byte) []byte {
		return func(b []byte) []byte {
			for _, x := range v {
				b = binary.LittleEndian.AppendUint64(b, uint64(x))
			}
			return b
		}
	}
	floats := func(v []float32) func([]byte) []byte {
		return func(b []byte) []byte {
			for _, x := range v {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
			}
			return b
		}
	}
	section(ints(s.IDs))
	section(ints(s.Counts))
	section(ints(s.LastSeen))
	section(ints(s.Free))
	section(floats(s.Weights))
	section(floats(s.State))
	section(func(b []byte) []byte { return append(b, s.Sketch...) })
	section(ints(s.SketchAdds))
	return b
}

// DecodeCheckpoint parses file contents written by [Checkpoint.Encode]. It checks structure and
// checksums (naming the damaged part), not whether the snapshot fits a table: [Table.Import] does.
func DecodeCheckpoint(b []byte) (*Checkpoint, error) {
	bad := func(format string, args ...any) error { return errs.IOf("dynamic checkpoint: "+format, args...) }
	if len(b) < headerBytes(1)+4 {
		return nil, bad("truncated: %d bytes, shorter than the %d-byte header", len(b), headerBytes(1)+4)
	}
	if string(b[:len(fileMagic)]) != fileMagic {
		return nil, bad("not a recgo dynamic-table checkpoint (bad magic %q)", b[:len(fileMagic)])
	}
	version := binary.LittleEndian.Uint32(b[len(fileMagic):])
	if version < 1 || version > fileVersion {
		return nil, bad("format version %d, this recgo reads 1 to %d (or the file is corrupted)", version, fileVersion)
	}
	hb := headerBytes(version)
	if len(b) < hb+4 {
		return nil, bad("truncated: %d bytes, shorter than the %d-byte header", len(b), hb+4)
	}
	if got := binary.LittleEndian.Uint32(b[hb:]); got != crc32.Checksum(b[:hb], castagnoli) {
		return nil, bad("header checksum mismatch (the file is corrupted)")
	}
	var h [headerInts]int64
	for i := range (hb - len(fileMagic) - 4) / 8 {
		h[i] = int64(binary.LittleEndian.Uint64(b[len(fileMagic)+4+8*i:]))
	}
	dim, width, maxRows, sketchWidth := h[0], h[1], h[2], h[3]
	hw, nfree, nsketch, nadds := h[7], h[8], h[9], h[10]
	switch {
	case dim <= 0 || dim > maxFileDim:
		return nil, bad("header: dim %d out of range", dim)
	case width < 0 || width > maxStateFactor*dim:
		return nil, bad("header: state width %d out of range for dim %d", width, dim)
	case maxRows <= 0 || maxRows > MaxRowBound:
		return nil, bad("header: row bound %d out of range", maxRows)
	case sketchWidth < 0 || sketchWidth > math.MaxInt32:
		return nil, bad("header: sketch width %d out of range", sketchWidth)
	case hw < 0 || hw > maxRows || nfree < 0 || nfree > hw:
		return nil, bad("header: %d rows and %d free rows for a bound of %d", hw, nfree, maxRows)
	case nsketch < 0 || nsketch > sketchDepth*sketchWidth || (nadds != 0 && nadds != numShards):
		return nil, bad("header: %d sketch counters and %d sketch totals", nsketch, nadds)
	case version >= 3 && h[13] != int64(SketchV1) && h[13] != int64(SketchV2):
		// (unmarked is what versions 1 and 2 say: in version 3 it would not be written back as read)
		return nil, bad("header: sketch indexing %d, this recgo knows %d and %d", h[13], SketchV1, SketchV2)
	}
	// Every size is now bounded (rows < 2^31, dim ≤ 2^20): the expected length cannot overflow.
	lens := [sectionCount]int64{hw * 8, hw * 8, hw * 8, nfree * 8, hw * dim * 4, hw * width * 4, nsketch, nadds * 8}
	want := int64(hb + 4)
	for _, n := range lens {
		want += n + 4
	}
	if int64(len(b)) != want {
		return nil, bad("%d bytes where the header declares %d (truncated or corrupted)", len(b), want)
	}
	var sec [sectionCount][]byte
	off := int64(hb + 4)
	for i, n := range lens {
		sec[i] = b[off : off+n]
		if got := binary.LittleEndian.Uint32(b[off+n:]); got != crc32.Checksum(sec[i], castagnoli) {
			return nil, bad("checksum mismatch in section %s (the file is corrupted)", sectionNames[i])
		}
		off += n + 4
	}
	ints := func(p []byte) []int64 {
		out := make([]int64, len(p)/8)
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(p[8*i:]))
		}
		return out
	}
	floats := func(p []byte) []float32 {
		out := make([]float32, len(p)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
		}
		return out
	}
	s := &Snapshot{Dim: int(dim), StateWidth: int(width), MaxRows: int(maxRows), SketchWidth: int(sketchWidth),
		Step: h[4], Admitted: h[5], Evicted: h[6], IDs: ints(sec[0]), Counts: ints(sec[1]), LastSeen: ints(sec[2]),
		Free: ints(sec[3]), Weights: floats(sec[4]), State: floats(sec[5]), SketchAdds: ints(sec[7]),
		Seed: uint64(h[12]), SeedKnown: version >= 2, SketchIndexing: SketchIndexing(h[13])}
	if nsketch > 0 {
		s.Sketch = append([]uint8(nil), sec[6]...)
	}
	if nadds == 0 {
		s.SketchAdds = nil
	}
	return &Checkpoint{Snapshot: s, OptimizerStep: h[11]}, nil
}

// maxFileBytes bounds the checkpoint files Load reads (checked against the file's size first).
const maxFileBytes = 1 << 40

// Save writes the table's checkpoint (with optimizerStep, the collection's step counter for it) to
// path atomically: a temporary file in the same folder, fsynced and renamed over path.
func (t *Table) Save(path string, optimizerStep int64) error {
	s, err := t.Export()
	if err != nil {
		return err
	}
	data := (&Checkpoint{Snapshot: s, OptimizerStep: optimizerStep}).Encode()
	return files.WriteAtomic(path, fmt.Sprintf("dynamic table %q: save %s", t.cfg.Name, path), func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Load reads a checkpoint file written by [Table.Save], verifies it and imports it; it returns the
// optimizer step counter the file holds. On any error (naming the file and the damaged part) the
// table is unchanged.
func (t *Table) Load(path string) (int64, error) {
	data, err := files.ReadRegular(path, maxFileBytes, fmt.Sprintf("dynamic table %q: load", t.cfg.Name))
	if err != nil {
		return 0, err
	}
	c, err := DecodeCheckpoint(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if c.OptimizerStep < 0 || c.OptimizerStep >= 1<<53 {
		return 0, errs.IOf("%s: dynamic checkpoint: optimizer step %d out of range", path, c.OptimizerStep)
	}
	if err := t.Import(c.Snapshot); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return c.OptimizerStep, nil
}
