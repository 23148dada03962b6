// Package profile summarizes how a training data sample touches each embedding table: the access
// CDF over rows (hottest first) at a few steps, the average pooling factor, the coverage, and the
// rows never touched. RecShard (Sethi et al., ASPLOS 2023) prices every row from such a profile.
//
// A [Profiler] counts IDs from KJT-shaped batches with a sampling rate; [Profiler.Profile]
// freezes the counts into a [Profile], which saves to and loads from JSON. [Zipf] builds a
// synthetic table profile analytically (for models too large to sample).
package profile

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/files"
)

// Version is the profile file format version.
const Version = 1

// Bounds on a table's shape: byte counts of whole tables and of sums over a few thousand tables
// stay far inside int64.
const (
	MaxDim        = 1 << 20
	MaxElemBytes  = 64
	MaxTableBytes = 1 << 50
)

// cdfEndTolerance is how far from 1 the last CDF point's share may be (rounding in a writer).
const cdfEndTolerance = 1e-9

// Point is one step of a table's access CDF: the hottest Rows rows receive Frac of all accesses.
type Point struct {
	Rows int64   `json:"rows"`
	Frac float64 `json:"frac"`
}

// Table is the profile of one embedding table.
type Table struct {
	Name      string `json:"name"`
	Rows      int64  `json:"rows"`
	Dim       int    `json:"dim"`
	ElemBytes int    `json:"elem_bytes"`
	// Samples is the number of sampled training examples; Lookups the IDs they held for this table.
	Samples int64 `json:"samples"`
	Lookups int64 `json:"lookups"`
	// Coverage is the share of samples with at least one ID; Pooling the mean IDs per covered sample.
	Coverage float64 `json:"coverage"`
	Pooling  float64 `json:"pooling"`
	// Touched is the number of distinct rows seen; Rows - Touched were never accessed.
	Touched int64 `json:"touched"`
	// CDF runs from (0, 0) to (Touched, 1), Rows and Frac non-decreasing.
	CDF []Point `json:"cdf"`
	// Ranked lists the touched rows hottest first (nil for synthetic profiles); the remap puts
	// them first. Saved base64-encoded (little-endian int64).
	Ranked []int64 `json:"-"`
}

// Profile is the per-table profile of one data sample.
type Profile struct {
	Version    int     `json:"version"`
	SampleRate float64 `json:"sample_rate"`
	Tables     []Table `json:"tables"`
}

// Frac returns the access share of the hottest h rows, interpolating linearly between CDF steps.
func (t *Table) Frac(h int64) float64 {
	if h <= 0 || len(t.CDF) == 0 {
		return 0
	}
	last := t.CDF[len(t.CDF)-1]
	if h >= last.Rows {
		return last.Frac
	}
	lo := 0
	hi := len(t.CDF) - 1
	for hi-lo > 1 { // invariant: CDF[lo].Rows <= h < CDF[hi].Rows
		mid := (lo + hi) / 2
		if t.CDF[mid].Rows <= h {
			lo = mid
		} else {
			hi = mid
		}
	}
	a, b := t.CDF[lo], t.CDF[hi]
	return a.Frac + (b.Frac-a.Frac)*float64(h-a.Rows)/float64(b.Rows-a.Rows)
}

// AccessesPerSample is the expected number of this table's IDs in one sample: coverage × pooling.
func (t *Table) AccessesPerSample() float64 { return t.Coverage * t.Pooling }

// RowBytes is the size of one embedding row.
func (t *Table) RowBytes() int64 { return int64(t.Dim) * int64(t.ElemBytes) }

// Validate checks one table's fields.
func (t *Table) Validate() error {
	switch {
	case t.Name == "":
		return errs.Invalidf("profile: table with an empty name")
	case t.Rows <= 0:
		return errs.Invalidf("profile: table %q: rows %d must be positive", t.Name, t.Rows)
	case t.Dim <= 0 || t.ElemBytes <= 0 || t.Dim > MaxDim || t.ElemBytes > MaxElemBytes:
		return errs.Invalidf("profile: table %q: dim %d and elem_bytes %d must be in [1, %d] and [1, %d]", t.Name,
			t.Dim, t.ElemBytes, MaxDim, MaxElemBytes)
	case t.Rows > MaxTableBytes/t.RowBytes():
		return errs.Capacityf("profile: table %q: %d rows of %d bytes is past the planner's %d-byte table size",
			t.Name, t.Rows, t.RowBytes(), int64(MaxTableBytes))
	case !(t.Coverage >= 0 && t.Coverage <= 1):
		return errs.Invalidf("profile: table %q: coverage %g outside [0, 1]", t.Name, t.Coverage)
	case !(t.Pooling >= 0) || math.IsInf(t.Pooling, 0):
		return errs.Invalidf("profile: table %q: pooling %g must be finite and >= 0", t.Name, t.Pooling)
	case t.Samples < 0 || t.Lookups < 0:
		return errs.Invalidf("profile: table %q: samples %d and lookups %d must be >= 0", t.Name, t.Samples, t.Lookups)
	case t.Touched < 0 || t.Touched > t.Rows:
		return errs.Invalidf("profile: table %q: touched %d outside [0, %d]", t.Name, t.Touched, t.Rows)
	case len(t.CDF) < 2 && t.Touched > 0:
		return errs.Invalidf("profile: table %q: CDF needs at least 2 points", t.Name)
	}
	for i, p := range t.CDF {
		if p.Rows < 0 || p.Rows > t.Touched || !(p.Frac >= 0 && p.Frac <= 1+cdfEndTolerance) {
			return errs.Invalidf("profile: table %q: CDF point %d (%d, %g) outside [0, %d]x[0, 1]", t.Name, i, p.Rows, p.Frac, t.Touched)
		}
		if i > 0 && (p.Rows <= t.CDF[i-1].Rows || p.Frac < t.CDF[i-1].Frac) {
			return errs.Invalidf("profile: table %q: CDF point %d does not increase", t.Name, i)
		}
	}
	// The touched rows take every access: a CDF ending below 1 would price accesses no row serves.
	if last := len(t.CDF) - 1; last >= 0 && (t.CDF[0] != Point{} || t.CDF[last].Rows != t.Touched ||
		t.Touched > 0 && math.Abs(t.CDF[last].Frac-1) > cdfEndTolerance) {
		return errs.Invalidf("profile: table %q: CDF must run from (0, 0) to (touched=%d, 1), not to (%d, %g)",
			t.Name, t.Touched, t.CDF[last].Rows, t.CDF[last].Frac)
	}
	if t.Ranked != nil && int64(len(t.Ranked)) != t.Touched {
		return errs.Invalidf("profile: table %q: %d ranked rows for %d touched", t.Name, len(t.Ranked), t.Touched)
	}
	return nil
}

// Validate checks the profile: at least one table, unique names, each table valid.
func (p *Profile) Validate() error {
	if p == nil || len(p.Tables) == 0 {
		return errs.Invalidf("profile: empty profile (no tables)")
	}
	if !(p.SampleRate >= 0 && p.SampleRate <= 1) {
		return errs.Invalidf("profile: sample_rate %g outside [0, 1]", p.SampleRate)
	}
	seen := make(map[string]bool, len(p.Tables))
	for i := range p.Tables {
		t := &p.Tables[i]
		if err := t.Validate(); err != nil {
			return err
		}
		if seen[t.Name] {
			return errs.Invalidf("profile: table %q appears twice", t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// Table returns the named table's profile or an ErrNotFound error.
func (p *Profile) Table(name string) (*Table, error) {
	for i := range p.Tables {
		if p.Tables[i].Name == name {
			return &p.Tables[i], nil
		}
	}
	return nil, errs.NotFoundf("profile: no table %q", name)
}

// MarshalJSON writes the table with its ranked rows base64-encoded.
func (t Table) MarshalJSON() ([]byte, error) {
	type plain Table
	out := struct {
		plain
		RankedB64 string `json:"ranked,omitempty"`
	}{plain: plain(t)}
	if t.Ranked != nil {
		buf := make([]byte, 8*len(t.Ranked))
		for i, v := range t.Ranked {
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(v))
		}
		out.RankedB64 = base64.StdEncoding.EncodeToString(buf)
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a table written by MarshalJSON.
func (t *Table) UnmarshalJSON(data []byte) error {
	type plain Table
	var in struct {
		plain
		RankedB64 string `json:"ranked"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*t = Table(in.plain)
	if in.RankedB64 != "" {
		buf, err := base64.StdEncoding.DecodeString(in.RankedB64)
		if err != nil || len(buf)%8 != 0 {
			return errs.Invalidf("profile: table %q: bad ranked rows encoding", t.Name)
		}
		t.Ranked = make([]int64, len(buf)/8)
		for i := range t.Ranked {
			t.Ranked[i] = int64(binary.LittleEndian.Uint64(buf[8*i:]))
		}
	}
	return nil
}

// Parse reads and validates a profile from JSON.
func Parse(data []byte) (*Profile, error) {
	var p Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, errs.Invalidf("profile: %v", err)
	}
	if p.Version != Version {
		return nil, errs.Invalidf("profile: version %d, this recgo reads version %d", p.Version, Version)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// maxFileBytes bounds the profile files Load reads (a profile holds per table a CDF of a few
// thousand points).
const maxFileBytes = 1 << 30

// Load reads a profile file.
func Load(path string) (*Profile, error) {
	data, err := files.ReadRegular(path, maxFileBytes, "profile")
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Save writes the profile as JSON.
func (p *Profile) Save(path string) error {
	data, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return errs.Invalidf("profile: %v", err)
	}
	return files.WriteAtomic(path, "profile", func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
