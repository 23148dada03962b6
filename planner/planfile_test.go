package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/gpuinfo"
	"github.com/recgo/recgo/planner/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallPlanFile is a two-table plan and its plan.json bytes.
func smallPlanFile(t testing.TB) (*Plan, []byte) {
	prof := countedProfile(t)
	p, err := Make(prof, smallTopo(), Options{Strategy: StrategyRowGreedy, Tables: []string{"a", "c"}})
	require.NoError(t, err)
	data, err := p.MarshalFile()
	require.NoError(t, err)
	return p, data
}

// smallRemapFile is a two-table remap and its remap.bin bytes.
func smallRemapFile(t testing.TB) (*Remap, []byte) {
	r := &Remap{Tables: []RemapTable{{Name: "ab", Rows: 10, Hot: 2, Ranked: []int64{4, 1, 7}},
		{Name: "c", Rows: 6, Hot: 6, Ranked: []int64{5}}}}
	require.NoError(t, r.init())
	path := filepath.Join(t.TempDir(), "remap.bin")
	require.NoError(t, r.Save(path))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return r, data
}

func TestPlanFileRoundTripAndTruncation(t *testing.T) {
	p, data := smallPlanFile(t)
	back, err := ParsePlanFile(data)
	require.NoError(t, err)
	assert.Equal(t, p.Tables, back.Tables)
	assert.Equal(t, p.Assign, back.Assign)
	for n := 0; n < len(data); n++ {
		_, err := ParsePlanFile(data[:n])
		require.Error(t, err, "truncated to %d bytes", n)
		assert.ErrorIs(t, err, errs.ErrIO, "truncated to %d bytes", n)
	}
	_, err = ParsePlanFile(bytes.Replace(data, []byte(`"rank": 0`), []byte(`"rank": 1`), 1))
	assert.ErrorContains(t, err, "the body does not match its checksum")
}

// Every single-bit flip of a small plan.json is refused (an ErrIO error) or, where a flip could
// leave the meaning intact, loads a plan equal to the original. With the trailer covering every
// byte, no flip loads at all.
func TestPlanFileEverySingleBitFlip(t *testing.T) {
	p, data := smallPlanFile(t)
	loaded := 0
	for i := range data {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(data)
			c[i] ^= 1 << bit
			got, err := ParsePlanFile(c)
			if err != nil {
				require.ErrorIs(t, err, errs.ErrIO, "byte %d bit %d: %v", i, bit, err)
				continue
			}
			loaded++
			require.Equal(t, p.Tables, got.Tables, "byte %d bit %d loaded a different plan", i, bit)
		}
	}
	assert.Zero(t, loaded, "flips that loaded")
}

func TestRemapEverySingleBitFlipAndTruncation(t *testing.T) {
	r, data := smallRemapFile(t)
	back, err := ReadRemap(bytes.NewReader(data), int64(len(data)), 0)
	require.NoError(t, err)
	assert.Equal(t, r.Tables[0].Ranked, back.Tables[0].Ranked)
	for n := 0; n < len(data); n++ {
		for _, size := range []int64{int64(n), -1} {
			_, err := ReadRemap(bytes.NewReader(data[:n]), size, 0)
			require.ErrorIs(t, err, errs.ErrIO, "truncated to %d bytes", n)
		}
	}
	_, err = ReadRemap(bytes.NewReader(append(bytes.Clone(data), 0)), -1, 0)
	assert.ErrorContains(t, err, "trailing bytes")
	for i := range data {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(data)
			c[i] ^= 1 << bit
			got, err := ReadRemap(bytes.NewReader(c), int64(len(c)), 0)
			if err != nil {
				require.ErrorIs(t, err, errs.ErrIO, "byte %d bit %d: %v", i, bit, err)
				continue
			}
			for k := range r.Tables { // provably identical: same names, sizes and mapping
				require.Equal(t, r.Tables[k].Name, got.Tables[k].Name)
				require.Equal(t, r.Tables[k].Ranked, got.Tables[k].Ranked)
				require.Equal(t, r.Tables[k].Rows, got.Tables[k].Rows)
				require.Equal(t, r.Tables[k].Hot, got.Tables[k].Hot)
			}
		}
	}
	c := bytes.Clone(data)
	c[len(c)-9] ^= 1 // inside table "c"'s ranked rows
	_, err = ReadRemap(bytes.NewReader(c), int64(len(c)), 0)
	assert.ErrorContains(t, err, `table "c" ranked rows does not match its checksum`)
	_, err = ReadRemap(bytes.NewReader(data), int64(len(data)), 10)
	assert.ErrorIs(t, err, errs.ErrCapacity)
	old := bytes.Clone(data)
	copy(old, "RGREMAP1")
	_, err = ReadRemap(bytes.NewReader(old), int64(len(old)), 0)
	assert.ErrorContains(t, err, "re-run the planner")
}

func TestLoadNamesTheFile(t *testing.T) {
	_, data := smallPlanFile(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.json")
	data[10] ^= 4
	require.NoError(t, os.WriteFile(path, data, 0o644))
	_, err := LoadPlan(dir)
	assert.ErrorIs(t, err, errs.ErrIO)
	assert.ErrorContains(t, err, path+": plan: ")
	_, rdata := smallRemapFile(t)
	rpath := filepath.Join(dir, "remap.bin")
	require.NoError(t, os.WriteFile(rpath, rdata[:len(rdata)-3], 0o644))
	_, err = LoadRemap(rpath, 0)
	assert.ErrorIs(t, err, errs.ErrIO)
	assert.ErrorContains(t, err, rpath+": remap: truncated file (checksum of table \"c\" ranked rows)")
}

func FuzzParsePlanFile(f *testing.F) {
	_, data := smallPlanFile(f)
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePlanFile(data)
		if err != nil {
			if !errors.Is(err, errs.ErrIO) && !errors.Is(err, errs.ErrInvalid) && !errors.Is(err, errs.ErrCapacity) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		for i, a := range p.Assign {
			if a.GPU < 0 || a.GPU >= p.Topology.NumGPUs() || a.Hot < 0 || a.Hot > p.Tables[i].Rows {
				t.Fatalf("accepted an out-of-range assignment %+v", a)
			}
		}
	})
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// Every JSON contract between Go and Python (and every file format) names its fields in snake_case.
func TestJSONContractsAreSnakeCase(t *testing.T) {
	for _, v := range []any{Config{}, Plan{}, TablePlan{}, SolverInfo{}, SyntheticSpec{}, cost.Topology{}, cost.Eval{},
		cost.Option{}, cost.Assignment{}, profile.Profile{}, profile.Table{}, profile.Point{}, gpuinfo.GPU{}} {
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			tag, ok := f.Tag.Lookup("json")
			require.True(t, ok, "%s.%s has no json tag", typ.Name(), f.Name)
			name := regexp.MustCompile(`,.*`).ReplaceAllString(tag, "")
			if name == "-" {
				continue
			}
			assert.Regexp(t, snakeCase, name, "%s.%s", typ.Name(), f.Name)
		}
	}
	var spec map[string]any
	data, err := json.Marshal(SyntheticSpec{Tables: 1})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &spec))
	assert.Contains(t, spec, "elem_bytes")
}

// unranked is prof without ranked rows (as a synthetic profile, or one saved without them).
func unranked(prof *profile.Profile) *profile.Profile {
	p := *prof
	p.Tables = append([]profile.Table(nil), prof.Tables...)
	for i := range p.Tables {
		p.Tables[i].Ranked = nil
	}
	return &p
}

// A save into the folder of an earlier plan leaves no remap.bin of that plan: one was kept beside
// the new plan.json when the new save wrote none, and report.md told the user to load it.
func TestSaveLeavesNoRemapOfAnotherPlan(t *testing.T) {
	prof := countedProfile(t)
	p, err := Make(prof, smallTopo(), Options{Strategy: StrategyRowGreedy})
	require.NoError(t, err)
	tight := smallTopo()
	tight.HBMBytes /= 4
	other, err := Make(prof, tight, Options{Strategy: StrategyRowGreedy})
	require.NoError(t, err)
	require.NotEqual(t, p.Tables, other.Tables) // other hot rows: another remap
	tests := []struct {
		name    string
		earlier *Plan
		prof    *profile.Profile
		remap   bool
	}{
		{"no profile", other, nil, false},
		{"a profile without ranked rows", other, unranked(prof), false},
		{"a counted profile", other, prof, true},
		{"the same plan saved again without a profile", p, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, tc.earlier.Save(dir, prof)) // the earlier plan, with its remap
			require.FileExists(t, filepath.Join(dir, "remap.bin"))
			require.NoError(t, p.Save(dir, tc.prof))
			_, err := os.Stat(filepath.Join(dir, "remap.bin"))
			assert.Equal(t, tc.remap, err == nil, "remap.bin present: %v", err)
			report, err := os.ReadFile(filepath.Join(dir, "report.md"))
			require.NoError(t, err)
			assert.Equal(t, tc.remap, bytes.Contains(report, []byte("Remap.load(dir + \"/remap.bin\")")))
			assert.Equal(t, !tc.remap, bytes.Contains(report, []byte("No remap.bin was written")))
			if tc.remap {
				_, err := LoadRemap(filepath.Join(dir, "remap.bin"), 0)
				assert.NoError(t, err)
			}
		})
	}
}

// LoadRemap refuses what is not a regular file by name, as LoadPlan does: it opened a FIFO and
// blocked until a writer came (forever), and read a directory as a corrupted file.
func TestLoadRemapRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "remap.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	tests := []struct {
		name, path, match string
	}{
		{"fifo", fifo, "is not a regular file (a pipe, socket or device): give the remap.bin file itself"},
		{"directory", dir, "is a directory, not a file"},
		{"missing", filepath.Join(dir, "nope.bin"), "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := LoadRemap(tc.path, 0)
				done <- err
			}()
			select {
			case err := <-done:
				assert.ErrorIs(t, err, errs.ErrIO)
				assert.ErrorContains(t, err, "remap: ")
				assert.ErrorContains(t, err, tc.match)
			case <-time.After(10 * time.Second):
				t.Fatal("LoadRemap blocked") // the FIFO's open waits for a writer
			}
		})
	}
}

// A plan document with a table that no planner writes (edited by hand, checksum recomputed) is
// refused by ParsePlan: an empty name or a dim of 0 loaded, and torchrec_sharding_plan then raised
// a bare KeyError.
func TestParsePlanRefusesImpossibleTables(t *testing.T) {
	p, _ := smallPlanFile(t)
	tests := []struct {
		name string
		edit func(tp *TablePlan)
	}{
		{"empty name", func(tp *TablePlan) { tp.Name = "" }},
		{"zero dim", func(tp *TablePlan) { tp.Dim = 0 }},
		{"another node than its rank's", func(tp *TablePlan) { tp.Node = 3 }},
		{"negative hot bytes", func(tp *TablePlan) { tp.HotBytes = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := *p
			bad.Tables = append([]TablePlan(nil), p.Tables...)
			tc.edit(&bad.Tables[0])
			data, err := bad.MarshalFile()
			require.NoError(t, err)
			_, err = ParsePlanFile(data)
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.ErrorContains(t, err, "a name, a positive dim, the rank's node")
		})
	}
}
