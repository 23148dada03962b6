package planner

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/files"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/planner/profile"
)

var errNoRanks = errs.Invalidf("remap: the profile has no ranked rows (synthetic profile?)")

// RemapTable renumbers one table's rows so the hot ones come first: the profiled rows hottest
// first, then the never-seen rows in ascending ID order. New IDs below Hot live in HBM.
type RemapTable struct {
	Name string
	Rows int64
	Hot  int64
	// Ranked are the profiled rows, hottest first (new ID = position).
	Ranked []int64
	pos    map[int64]int64
	sorted []int64 // Ranked, ascending, to count profiled rows below an unseen ID
}

func (t *RemapTable) index() error {
	t.pos = make(map[int64]int64, len(t.Ranked))
	for i, id := range t.Ranked {
		if id < 0 || id >= t.Rows {
			return errs.Invalidf("remap: table %q: ranked row %d outside [0, %d)", t.Name, id, t.Rows)
		}
		if _, dup := t.pos[id]; dup {
			return errs.Invalidf("remap: table %q: row %d ranked twice", t.Name, id)
		}
		t.pos[id] = int64(i)
	}
	t.sorted = slices.Clone(t.Ranked)
	slices.Sort(t.sorted)
	return nil
}

// Map returns the new ID of row id (which must be in [0, Rows)).
func (t *RemapTable) Map(id int64) int64 {
	if p, ok := t.pos[id]; ok {
		return p
	}
	below, _ := slices.BinarySearch(t.sorted, id)
	return int64(len(t.Ranked)) + id - int64(below)
}

// Remap holds every planned table's renumbering; the data loader applies it to incoming IDs.
type Remap struct {
	Tables []RemapTable
	byName map[string]int
}

// NewRemap builds the remap of plan's tables from the profile's ranked rows.
func NewRemap(p *Plan, prof *profile.Profile) (*Remap, error) {
	r := &Remap{}
	for _, tp := range p.Tables {
		pt, err := prof.Table(tp.Name)
		if err != nil {
			return nil, fmt.Errorf("remap: %w", err)
		}
		if pt.Ranked == nil && pt.Touched > 0 {
			return nil, errNoRanks
		}
		r.Tables = append(r.Tables, RemapTable{Name: tp.Name, Rows: tp.Rows, Hot: tp.HotRows, Ranked: pt.Ranked})
	}
	return r, r.init()
}

func (r *Remap) init() error {
	r.byName = make(map[string]int, len(r.Tables))
	for i := range r.Tables {
		t := &r.Tables[i]
		if t.Rows <= 0 || t.Hot < 0 || t.Hot > t.Rows || int64(len(t.Ranked)) > t.Rows {
			return errs.Invalidf("remap: table %q: rows %d, hot %d, ranked %d", t.Name, t.Rows, t.Hot, len(t.Ranked))
		}
		if _, dup := r.byName[t.Name]; dup {
			return errs.Invalidf("remap: table %q appears twice", t.Name)
		}
		r.byName[t.Name] = i
		if err := t.index(); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the index of the named table or an ErrNotFound error.
func (r *Remap) Lookup(name string) (int, error) {
	i, ok := r.byName[name]
	if !ok {
		return -1, errs.NotFoundf("remap: no table %q in the plan", name)
	}
	return i, nil
}

// Apply writes the new IDs of table ti's ids into out (same length; may alias ids).
func (r *Remap) Apply(ti int, ids, out []int64) error {
	if ti < 0 || ti >= len(r.Tables) {
		return errs.Invalidf("remap: table index %d of %d", ti, len(r.Tables))
	}
	if len(out) != len(ids) {
		return errs.Invalidf("remap: %d ids but room for %d", len(ids), len(out))
	}
	t := &r.Tables[ti]
	for _, id := range ids {
		if id < 0 || id >= t.Rows {
			return errs.Invalidf("remap: table %q: id %d outside [0, %d)", t.Name, id, t.Rows)
		}
	}
	parallel.For(len(ids), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = t.Map(ids[i])
		}
	})
	return nil
}

const remapMagic = "RGREMAP2"

// Save writes the remap (little-endian), each part followed by the CRC-32C of its bytes: magic and
// table count; then per table its header (name length, name, rows, hot rows, ranked count) and its
// ranked rows.
func (r *Remap) Save(path string) error {
	return files.WriteAtomic(path, "remap", func(f io.Writer) error {
		w := bufio.NewWriter(f)
		crc := crc32.New(castagnoli)
		mw := io.MultiWriter(w, crc)
		put := func(v any) { _ = binary.Write(mw, binary.LittleEndian, v) }
		seal := func() { _ = binary.Write(w, binary.LittleEndian, crc.Sum32()); crc.Reset() }
		_, _ = io.WriteString(mw, remapMagic)
		put(uint32(len(r.Tables)))
		seal()
		for _, t := range r.Tables {
			put(uint32(len(t.Name)))
			_, _ = io.WriteString(mw, t.Name)
			put([]int64{t.Rows, t.Hot, int64(len(t.Ranked))})
			seal()
			put(t.Ranked)
			seal()
		}
		if err := w.Flush(); err != nil {
			return errs.IOf("remap: %v", err)
		}
		return nil
	})
}

// remapReader reads the parts of a remap file, checking each part's CRC-32C.
type remapReader struct {
	br   *bufio.Reader
	crc  hash.Hash32
	left int64 // bytes left when the size is known, else -1
}

func (rr *remapReader) read(buf []byte, part string) error {
	if rr.left >= 0 && int64(len(buf)) > rr.left {
		return errs.IOf("remap: truncated file (%s)", part)
	}
	if _, err := io.ReadFull(rr.br, buf); err != nil {
		return errs.IOf("remap: truncated file (%s)", part)
	}
	if rr.left >= 0 {
		rr.left -= int64(len(buf))
	}
	rr.crc.Write(buf)
	return nil
}

func (rr *remapReader) check(part string) error {
	want := rr.crc.Sum32()
	var buf [4]byte
	if _, err := io.ReadFull(rr.br, buf[:]); err != nil || (rr.left >= 0 && rr.left < 4) {
		return errs.IOf("remap: truncated file (checksum of %s)", part)
	}
	if rr.left >= 0 {
		rr.left -= 4
	}
	rr.crc.Reset()
	if binary.LittleEndian.Uint32(buf[:]) != want {
		return errs.IOf("remap: %s does not match its checksum: the file is corrupted", part)
	}
	return nil
}

// ReadRemap parses a remap written by Save from rd, whose size is size bytes (-1: unknown). Every
// part's checksum is verified (ErrIO naming the part); the rows it would hold are checked against
// memoryLimit (0: DefaultMemoryLimit) before they are read (ErrCapacity).
func ReadRemap(rd io.Reader, size, memoryLimit int64) (*Remap, error) {
	rr := &remapReader{br: bufio.NewReader(rd), crc: crc32.New(castagnoli), left: size}
	if size < 0 {
		rr.left = -1
	}
	var b8 [8]byte
	if err := rr.read(b8[:], "magic"); err != nil {
		return nil, err
	}
	if string(b8[:]) != remapMagic {
		if string(b8[:6]) == remapMagic[:6] {
			return nil, errs.IOf("remap: format %q, this recgo reads %q (re-run the planner)", b8[:], remapMagic)
		}
		return nil, errs.IOf("remap: not a remap file (magic %q)", b8[:])
	}
	if err := rr.read(b8[:4], "header"); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(b8[:4])
	if err := rr.check("header"); err != nil {
		return nil, err
	}
	r := &Remap{}
	ranked := 0.0
	for i := uint32(0); i < n; i++ {
		part := fmt.Sprintf("table %d header", i)
		if err := rr.read(b8[:4], part); err != nil {
			return nil, err
		}
		nl := binary.LittleEndian.Uint32(b8[:4])
		if nl > 1<<12 {
			return nil, errs.IOf("remap: %s: name length %d (corrupted file)", part, nl)
		}
		name := make([]byte, nl)
		hdr := make([]byte, 24)
		if err := rr.read(name, part); err != nil {
			return nil, err
		}
		if err := rr.read(hdr, part); err != nil {
			return nil, err
		}
		if err := rr.check(part); err != nil {
			return nil, err
		}
		rows := int64(binary.LittleEndian.Uint64(hdr))
		hot := int64(binary.LittleEndian.Uint64(hdr[8:]))
		nr := int64(binary.LittleEndian.Uint64(hdr[16:]))
		part = fmt.Sprintf("table %q ranked rows", name)
		if nr < 0 || nr > rows {
			return nil, errs.IOf("remap: %s: count %d for %d rows (corrupted file)", part, nr, rows)
		}
		if rr.left >= 0 && nr > rr.left/8 {
			return nil, errs.IOf("remap: truncated file (%s: %d rows need %d bytes, %d remain)", part, nr, 8*nr, rr.left)
		}
		ranked += float64(nr)
		if err := checkBytes(fmt.Sprintf("remap of %.0f ranked rows", ranked), ranked*bytesPerRankedRow, memoryLimit); err != nil {
			return nil, err
		}
		ids := make([]int64, 0, min(nr, 1<<16))
		buf := make([]byte, 8*4096)
		for left := nr; left > 0; {
			k := min(left, 4096)
			if err := rr.read(buf[:8*k], part); err != nil {
				return nil, err
			}
			for j := int64(0); j < k; j++ {
				ids = append(ids, int64(binary.LittleEndian.Uint64(buf[8*j:])))
			}
			left -= k
		}
		if err := rr.check(part); err != nil {
			return nil, err
		}
		r.Tables = append(r.Tables, RemapTable{Name: string(name), Rows: rows, Hot: hot, Ranked: ids})
	}
	if _, err := rr.br.ReadByte(); err == nil {
		return nil, errs.IOf("remap: trailing bytes after the last table (corrupted file)")
	}
	if err := r.init(); err != nil {
		return nil, errs.IOf("remap: checksums match but the content is invalid: %v", err)
	}
	return r, nil
}

// fits reports whether r is a remap of p: the same tables in the same order, each with p's rows and
// hot rows (what NewRemap would have made of them).
func (r *Remap) fits(p *Plan) bool {
	if len(r.Tables) != len(p.Tables) {
		return false
	}
	for i, tp := range p.Tables {
		t := &r.Tables[i]
		if t.Name != tp.Name || t.Rows != tp.Rows || t.Hot != tp.HotRows {
			return false
		}
	}
	return true
}

// LoadRemap reads and verifies a remap file; memoryLimit as for [ReadRemap]. A directory, pipe,
// socket or device is refused by name before it is opened (a FIFO's open would block until a writer
// came).
func LoadRemap(path string, memoryLimit int64) (*Remap, error) {
	f, st, err := files.OpenRegular(path, "remap", "give the remap.bin file itself")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := ReadRemap(f, st.Size(), memoryLimit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ApplyKJT remaps a KJT's values: key i (lengths key-major, batch per key) goes through table
// tables[i], or is copied unchanged when tables[i] is -1.
func (r *Remap) ApplyKJT(tables []int64, batch int, lengths, values, out []int64) error {
	if len(lengths) != len(tables)*batch || len(out) != len(values) {
		return errs.Invalidf("remap: %d lengths for %d keys x batch %d, %d values into %d", len(lengths),
			len(tables), batch, len(values), len(out))
	}
	off := int64(0)
	for i, t := range tables {
		n := int64(0)
		for _, l := range lengths[i*batch : (i+1)*batch] {
			if l < 0 {
				return errs.Invalidf("remap: negative length %d", l)
			}
			n += l
		}
		if off+n > int64(len(values)) {
			return errs.Invalidf("remap: lengths sum past the %d values", len(values))
		}
		if t == -1 {
			copy(out[off:off+n], values[off:off+n])
		} else if err := r.Apply(int(t), values[off:off+n], out[off:off+n]); err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
		off += n
	}
	if off != int64(len(values)) {
		return errs.Invalidf("remap: lengths sum to %d but there are %d values", off, len(values))
	}
	return nil
}
