package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/files"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
)

// plan.json is the plan's JSON object whose last member is a checksum of every byte before it:
//
//	{
//	 "version": 2,
//	 ...
//	 "checksum": "crc32c:0a1b2c3d"
//	}
//
// The trailer (from the comma before "checksum" to the final newline) has one exact form, so every
// byte of the file is covered: the body by the CRC-32C, the trailer by its form and value.

const checksumKey = ",\n \"checksum\": \"crc32c:"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func trailer(body []byte) string {
	return fmt.Sprintf("%s%08x\"\n}\n", checksumKey, crc32.Checksum(body, castagnoli))
}

// MarshalFile renders the plan as the plan.json file (indented JSON with the checksum trailer).
func (p *Plan) MarshalFile() ([]byte, error) {
	q := *p
	q.Checksum = ""
	data, err := json.MarshalIndent(&q, "", " ")
	if err != nil {
		return nil, errs.Invalidf("plan: %v", err)
	}
	if !bytes.HasSuffix(data, []byte("\n}")) {
		return nil, errs.Invalidf("plan: unexpected JSON layout")
	}
	body := data[:len(data)-2]
	return append(body, trailer(body)...), nil
}

// remapFile is the name of the remap [Plan.Save] writes beside plan.json.
const remapFile = "remap.bin"

// Save writes dir/plan.json and dir/report.md, and dir/remap.bin when prof has ranked rows for
// every table (profiles counted from data; synthetic ones have none). A remap.bin already in dir is
// removed first, unless prof is nil and it is this plan's (the same tables, rows and hot rows: a plan
// loaded and saved again): beside the new plan.json another plan's would read as this plan's remap,
// and a failed write leaves no remap rather than another plan's.
func (p *Plan) Save(dir string, prof *profile.Profile) error {
	var r *Remap
	if prof != nil {
		var err error
		if r, err = NewRemap(p, prof); err != nil && !errors.Is(err, errNoRanks) {
			return err
		}
	}
	data, err := p.MarshalFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errs.IOf("plan: %v", err)
	}
	remapPath := filepath.Join(dir, remapFile)
	kept := false
	if prof == nil { // a plan saved without its profile (loaded, then saved): its own remap stays
		old, err := LoadRemap(remapPath, 0)
		kept = err == nil && old.fits(p)
	}
	if !kept {
		if err := os.Remove(remapPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errs.IOf("plan: removing the previous plan's remap: %v", err)
		}
	}
	for name, b := range map[string][]byte{"plan.json": data, "report.md": []byte(p.Report(r != nil || kept))} {
		if err := files.WriteAtomic(filepath.Join(dir, name), "plan", func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		}); err != nil {
			return err
		}
	}
	if r != nil {
		return r.Save(remapPath)
	}
	return nil
}

// ParsePlanFile verifies a plan.json file's checksum and parses it: a truncated or altered file is
// an ErrIO error naming the part (checksum trailer, or body) that does not match.
func ParsePlanFile(data []byte) (*Plan, error) {
	i := bytes.LastIndex(data, []byte(checksumKey))
	if i < 0 {
		return nil, errs.IOf("plan: the checksum trailer is missing (truncated file, or not written by recgo)")
	}
	body, tail := data[:i], data[i:]
	var sum uint32
	if n, err := fmt.Sscanf(string(tail[len(checksumKey):]), "%08x", &sum); n != 1 || err != nil ||
		string(tail) != fmt.Sprintf("%s%08x\"\n}\n", checksumKey, sum) {
		return nil, errs.IOf("plan: the checksum trailer is malformed (truncated or altered file)")
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, errs.IOf("plan: the body does not match its checksum (crc32c %08x, trailer says %08x): the file is corrupted",
			got, sum)
	}
	p, err := ParsePlan(data)
	if err != nil {
		return nil, err
	}
	p.Checksum = fmt.Sprintf("crc32c:%08x", sum)
	return p, nil
}

// ParsePlan reads and checks a plan document (JSON, without verifying a checksum).
func ParsePlan(data []byte) (*Plan, error) {
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, errs.Invalidf("plan: %v", err)
	}
	if p.Version != PlanVersion {
		return nil, errs.Invalidf("plan: version %d, this recgo reads version %d (re-run the planner)", p.Version, PlanVersion)
	}
	if err := p.Topology.Validate(); err != nil {
		return nil, err
	}
	if len(p.Tables) == 0 {
		return nil, errs.Invalidf("plan: no tables")
	}
	seen := make(map[string]bool, len(p.Tables))
	p.Assign = make([]cost.Assignment, len(p.Tables))
	for i, t := range p.Tables {
		if t.GPU < 0 || t.GPU >= p.Topology.NumGPUs() || t.HotRows < 0 || t.HotRows > t.Rows || t.Rows <= 0 {
			return nil, errs.Invalidf("plan: table %q: rank %d of %d, hot rows %d of %d", t.Name, t.GPU,
				p.Topology.NumGPUs(), t.HotRows, t.Rows)
		}
		if t.Name == "" || t.Dim <= 0 || t.Node != p.Topology.Node(t.GPU) || t.HotBytes < 0 || t.ColdBytes < 0 {
			return nil, errs.Invalidf("plan: table %q: dim %d, node %d for rank %d (node %d), hot bytes %d, cold "+
				"bytes %d: a name, a positive dim, the rank's node and byte counts of zero or more are needed",
				t.Name, t.Dim, t.Node, t.GPU, p.Topology.Node(t.GPU), t.HotBytes, t.ColdBytes)
		}
		if seen[t.Name] {
			return nil, errs.Invalidf("plan: table %q appears twice", t.Name)
		}
		seen[t.Name] = true
		p.Assign[i] = cost.Assignment{GPU: t.GPU, Hot: t.HotRows}
	}
	return &p, nil
}

// maxPlanBytes bounds the plan files LoadPlan reads (a plan holds a line per table).
const maxPlanBytes = 1 << 30

// LoadPlan reads and verifies dir/plan.json (or the file itself when path names one).
func LoadPlan(path string) (*Plan, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "plan.json")
	}
	data, err := files.ReadRegular(path, maxPlanBytes, "plan")
	if err != nil {
		return nil, err
	}
	p, err := ParsePlanFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
