package reader

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/recgo/recgo/internal/errs"
)

// positionFields are the fields every position a source gives carries: one missing or null would
// read as 0 and resume from the data's first file or row (a forged or hand-edited checkpoint).
var positionFields = []string{"file", "row", "offset", "global", "skipped"}

// UnmarshalJSON reads a position as Position's MarshalJSON (the default encoding) writes it,
// refusing a missing or null field, an unknown one, and values no source gives (Check).
func (p *Position) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return errs.Invalidf("position: %v", err)
	}
	for _, k := range positionFields {
		if v, ok := raw[k]; !ok || string(bytes.TrimSpace(v)) == "null" {
			return errs.Invalidf("position: %q is missing or null (a position from DataPipeline.position() has it)", k)
		}
	}
	for k, v := range raw { // a shuffle window's fields too: a null "taken" read as 0 and re-read the window
		if string(bytes.TrimSpace(v)) == "null" {
			return errs.Invalidf("position: %q is null (a position from DataPipeline.position() gives a value or leaves it out)", k)
		}
	}
	type plain Position // without this method
	var q plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return errs.Invalidf("position: %v", err)
	}
	if err := Position(q).Check(); err != nil {
		return err
	}
	*p = Position(q)
	return nil
}

// Check refuses values no source gives: negative counts or indices, an offset below -1 (none), more
// rows in the file than in all files, more skipped rows than rows, a shuffle window's taken rows
// past its size. Inside a shuffle window (Taken > 0) Global is where the window began but Skipped
// counts the rows dropped reading the whole window, so it may pass Global: the shuffled source's
// Seek checks it against the window it reads again.
func (p Position) Check() error {
	switch {
	case p.File < 0 || p.Row < 0 || p.Global < 0 || p.Skipped < 0 || p.Shuffle < 0 || p.Window < 0 || p.Taken < 0:
		return errs.Invalidf("position %+v: a negative file index or row count", p)
	case p.Offset < -1:
		return errs.Invalidf("position %+v: byte offset %d (-1 for none, else at least 0)", p, p.Offset)
	case p.Row > p.Global:
		return errs.Invalidf("position %+v: %d rows read in the file but %d in all files", p, p.Row, p.Global)
	case p.Taken > int64(p.Shuffle):
		return errs.Invalidf("position %+v: %d rows taken from a shuffle window of %d", p, p.Taken, p.Shuffle)
	case p.Skipped > p.Global && p.Taken == 0:
		return errs.Invalidf("position %+v: %d rows skipped of %d read", p, p.Skipped, p.Global)
	}
	return nil
}

// fileNames gives each of paths the name positions carry (Position.Name): its base name, or, where
// other paths share it (day1/part-0.csv, day2/part-0.csv), the fewest trailing path elements that
// tell it from them, so that the same files listed in another order are refused on resume.
func fileNames(paths []string) []string {
	names := make([]string, len(paths))
	pending := make([]int, len(paths)) // paths whose name still clashes, tried one element longer
	for i := range pending {
		pending[i] = i
	}
	for n := 1; len(pending) > 0; n++ {
		owners := map[string]map[string]bool{} // a name → the files it would name
		for _, i := range pending {
			t := tail(paths[i], n)
			if owners[t] == nil {
				owners[t] = map[string]bool{}
			}
			owners[t][filepath.Clean(paths[i])] = true
		}
		next := pending[:0]
		for _, i := range pending {
			if t := tail(paths[i], n); len(owners[t]) == 1 || t == filepath.Clean(paths[i]) {
				names[i] = t
			} else {
				next = append(next, i)
			}
		}
		pending = next
	}
	return names
}

// tail is the last n elements of path (all of it when it has fewer), joined by the separator.
func tail(path string, n int) string {
	parts := strings.Split(filepath.ToSlash(filepath.Clean(path)), "/")
	return filepath.FromSlash(strings.Join(parts[max(0, len(parts)-n):], "/"))
}

// named is p with the name of the file it stands in (p.File of names, fileNames), for checkName.
func named(p Position, names []string) Position {
	if p.File >= 0 && p.File < len(names) {
		p.Name = names[p.File]
	}
	return p
}

// checkSeek refuses a seek to p in a source over paths: a closed source, a position outside the
// files, or one taken in other files (checkName). The readers share it so they refuse alike.
func checkSeek(closed bool, p Position, paths []string) error {
	if closed {
		return errs.Invalidf("reader: source is closed")
	}
	if p.File < 0 || p.File >= len(paths) || p.Row < 0 || p.Global < p.Row {
		return errs.Invalidf("reader: position %+v does not fit %d files", p, len(paths))
	}
	return checkName(p, paths)
}

// checkName refuses a position (its File within paths) whose file is not the one it was taken in:
// other files, or the same ones listed in another order, would resume at other rows. Names are the
// files' trailing path elements (fileNames; a position taken before session 40 holds base names), so
// that data moved to another folder resumes.
func checkName(p Position, paths []string) error {
	if p.Name == "" {
		return nil
	}
	depth := strings.Count(filepath.ToSlash(p.Name), "/") + 1
	if have := tail(paths[p.File], depth); have != p.Name {
		return errs.Invalidf("reader: the position was taken in file %q (number %d of the files), but file %d of "+
			"this source is %q (%s): resume with the files it was taken with, in the same order", p.Name, p.File+1,
			p.File+1, have, paths[p.File])
	}
	return nil
}
