package planner

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/recgo/recgo/internal/errs"
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

const remapMagic = "RGREMAP1"

// Save writes the remap: magic, table count, then per table its name, rows, hot rows and ranked rows
// (little-endian).
func (r *Remap) Save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return errs.IOf("remap: %v", err)
	}
	w := bufio.NewWriter(f)
	put := func(v any) { _ = binary.Write(w, binary.LittleEndian, v) }
	w.WriteString(remapMagic)
	put(uint32(len(r.Tables)))
	for _, t := range r.Tables {
		put(uint32(len(t.Name)))
		w.WriteString(t.Name)
		put([]int64{t.Rows, t.Hot, int64(len(t.Ranked))})
		put(t.Ranked)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return errs.IOf("remap: %v", err)
	}
	if err := f.Close(); err != nil {
		return errs.IOf("remap: %v", err)
	}
	return nil
}

// ReadRemap parses a remap written by Save.
func ReadRemap(rd io.Reader) (*Remap, error) {
	br := bufio.NewReader(rd)
	bad := func(what string) error { return errs.Invalidf("remap: corrupt file (%s)", what) }
	magic := make([]byte, len(remapMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != remapMagic {
		return nil, bad("magic")
	}
	var n uint32
	if binary.Read(br, binary.LittleEndian, &n) != nil || n > 1<<20 {
		return nil, bad("table count")
	}
	r := &Remap{}
	for i := uint32(0); i < n; i++ {
		var nl uint32
		if binary.Read(br, binary.LittleEndian, &nl) != nil || nl > 1<<12 {
			return nil, bad("name length")
		}
		name := make([]byte, nl)
		if _, err := io.ReadFull(br, name); err != nil {
			return nil, bad("name")
		}
		hdr := make([]int64, 3)
		if binary.Read(br, binary.LittleEndian, hdr) != nil || hdr[2] < 0 || hdr[2] > hdr[0] || hdr[2] > 1<<34 {
			return nil, bad("table header")
		}
		ranked := make([]int64, 0, min(hdr[2], 1<<16))
		buf := make([]int64, 4096)
		for left := hdr[2]; left > 0; {
			k := min(left, int64(len(buf)))
			if binary.Read(br, binary.LittleEndian, buf[:k]) != nil {
				return nil, bad("ranked rows")
			}
			ranked = append(ranked, buf[:k]...)
			left -= k
		}
		r.Tables = append(r.Tables, RemapTable{Name: string(name), Rows: hdr[0], Hot: hdr[1], Ranked: ranked})
	}
	if err := r.init(); err != nil {
		return nil, err
	}
	return r, nil
}

// LoadRemap reads a remap file.
func LoadRemap(path string) (*Remap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errs.IOf("remap: %v", err)
	}
	defer f.Close()
	r, err := ReadRemap(f)
	if err != nil && !errors.Is(err, errs.ErrIO) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, err
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
