package reader

import (
	"bytes"
	"encoding/json"

	"github.com/recgo/recgo/internal/errs"
)

// Spec is the JSON description of a source (what Python's recgo.data sources send).
type Spec struct {
	// Kind is "criteo", "csv", "parquet" or "synthetic".
	Kind        string           `json:"kind"`
	Paths       []string         `json:"paths,omitempty"`
	Rank        int              `json:"rank"`
	WorldSize   int              `json:"world_size"`
	SkipBad     bool             `json:"skip_bad,omitempty"`
	NoLabel     bool             `json:"no_label,omitempty"`     // criteo
	NeedsLabels bool             `json:"needs_labels,omitempty"` // criteo: the caller trains on the labels
	RawDense    bool             `json:"raw_dense,omitempty"`    // criteo
	Columns     []Column         `json:"columns,omitempty"`      // csv, parquet
	Header      bool             `json:"header,omitempty"`       // csv
	Delimiter   string           `json:"delimiter,omitempty"`    // csv: one byte
	Synthetic   *SyntheticConfig `json:"synthetic,omitempty"`
	// Shuffle (rows, 0: none) and Seed shuffle the rows in windows ([NewShuffled]).
	Shuffle int    `json:"shuffle,omitempty"`
	Seed    uint64 `json:"seed,omitempty"`
}

// ParseSpec decodes a source spec, rejecting unknown keys.
func ParseSpec(data []byte) (*Spec, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, errs.Invalidf("source spec: %v", err)
	}
	return &s, nil
}

// Open builds the source a spec describes (shuffled when it says so).
func Open(s *Spec) (Source, error) {
	if s.Shuffle < 0 || s.Shuffle > MaxShuffleWindow {
		return nil, errs.Invalidf("source spec: shuffle window %d outside [0, %d]", s.Shuffle, MaxShuffleWindow)
	}
	src, err := open(s)
	if err != nil || s.Shuffle == 0 {
		return src, err
	}
	return NewShuffled(src, s.Shuffle, s.Seed, s.Rank)
}

func open(s *Spec) (Source, error) {
	opt := Options{Rank: s.Rank, WorldSize: s.WorldSize, SkipBad: s.SkipBad}
	switch s.Kind {
	case "criteo":
		return NewCriteo(s.Paths, CriteoOptions{Options: opt, NoLabel: s.NoLabel, NeedsLabels: s.NeedsLabels,
			RawDense: s.RawDense})
	case "csv":
		o := CSVOptions{Options: opt, Columns: s.Columns, Header: s.Header}
		if len(s.Delimiter) > 1 {
			return nil, errs.Invalidf("source spec: the delimiter must be one byte, got %q", s.Delimiter)
		}
		if s.Delimiter != "" {
			o.Delimiter = s.Delimiter[0]
		}
		return NewCSV(s.Paths, o)
	case "parquet":
		return NewParquet(s.Paths, ParquetOptions{Options: opt, Columns: s.Columns})
	case "synthetic":
		if s.Synthetic == nil {
			return nil, errs.Invalidf("source spec: a synthetic source needs its \"synthetic\" configuration")
		}
		return NewSynthetic(*s.Synthetic, opt)
	}
	return nil, errs.Invalidf("source spec: unknown kind %q (criteo, csv, parquet, synthetic)", s.Kind)
}
