package cost

import (
	"math"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func twoTables() *profile.Profile {
	return &profile.Profile{Version: 1, SampleRate: 1, Tables: []profile.Table{
		{Name: "a", Rows: 100, Dim: 4, ElemBytes: 4, Coverage: 0.5, Pooling: 4, Touched: 10,
			CDF: []profile.Point{{Rows: 0, Frac: 0}, {Rows: 1, Frac: 0.5}, {Rows: 10, Frac: 1}}},
		{Name: "b", Rows: 20, Dim: 2, ElemBytes: 2, Coverage: 1, Pooling: 1, Touched: 20,
			CDF: []profile.Point{{Rows: 0, Frac: 0}, {Rows: 20, Frac: 1}}},
	}}
}

func topo() Topology {
	return Topology{Nodes: 1, GPUsPerNode: 2, HBMBytes: 1000, HostBytes: 10000, HBMBandwidth: 100,
		UVMBandwidth: 10, BatchSize: 8}
}

func TestOptionsAndPrices(t *testing.T) {
	m, err := New(topo(), twoTables(), nil, Full)
	require.NoError(t, err)
	a := m.Tables[0]
	// hot candidates: 0, 1, 10 (touched) and 100 (all rows, 1600 bytes > 1000 HBM: dropped).
	require.Len(t, a.Options, 3)
	assert.Equal(t, []int64{0, 1, 10}, []int64{a.Options[0].Hot, a.Options[1].Hot, a.Options[2].Hot})
	bytes := 0.5 * 4 * 8 * 16.0 // coverage × pooling × batch × row bytes
	assert.InDelta(t, bytes/10, a.Options[0].Cost, 1e-12)
	assert.InDelta(t, bytes*(0.5/100+0.5/10), a.Options[1].Cost, 1e-12)
	assert.InDelta(t, bytes/100, a.Options[2].Cost, 1e-12)
	assert.Equal(t, int64(16), a.Options[1].HotBytes)
	assert.Equal(t, int64(99*16), a.Options[1].ColdBytes)

	e, err := m.Evaluate([]Assignment{{GPU: 0, Hot: 1}, {GPU: 0, Hot: 20}})
	require.NoError(t, err)
	bBytes := 1 * 1 * 8 * 4.0
	assert.InDelta(t, bytes*(0.5/100+0.5/10)+bBytes/100, e.GPUSeconds[0], 1e-12)
	assert.Zero(t, e.GPUSeconds[1])
	assert.InDelta(t, 2.0, e.Spread, 1e-12)
	acc := 0.5*4*8 + 8.0
	assert.InDelta(t, (0.5*4*8*0.5+8)/acc, e.HBMAccessShare, 1e-12)
	assert.InDelta(t, 99.0/120, e.UVMRowShare, 1e-12)
	assert.InDelta(t, 0.5*4*8*0.5, e.UVMAccesses[0], 1e-12)
	assert.Equal(t, int64(16+80), e.GPUHBM[0])
	assert.Empty(t, e.Violation)

	e, err = m.Evaluate([]Assignment{{GPU: 1, Hot: 100}, {GPU: 1, Hot: 0}})
	require.NoError(t, err)
	assert.Contains(t, e.Violation, "gpu 1 holds 1600 HBM bytes")
	_, err = m.Evaluate([]Assignment{{GPU: 2, Hot: 0}, {GPU: 0, Hot: 0}})
	assert.ErrorIs(t, err, errs.ErrInvalid)
}

func TestAblationWeights(t *testing.T) {
	for _, tc := range []struct {
		w    Weights
		want float64 // option 1 of table a (hot share 0.5)
	}{{CDFOnly, 0.5}, {WithCoverage, 0.25}, {WithPooling, 0.5 * 4 * 8 * 0.5}} {
		m, err := New(topo(), twoTables(), nil, tc.w)
		require.NoError(t, err)
		assert.InDelta(t, tc.want, m.Tables[0].Options[1].Cost, 1e-12, tc.w.String())
		assert.InDelta(t, 0.5*4*8*16.0*(0.5/100+0.5/10), m.Seconds(0, 1), 1e-12)
	}
}

func TestNewRejects(t *testing.T) {
	bad := func(edit func(*Topology)) Topology { tp := topo(); edit(&tp); return tp }
	tests := []struct {
		name  string
		topo  Topology
		names []string
		class error
		match string
	}{
		{"negative hbm", bad(func(t *Topology) { t.HBMBytes = -5 }), nil, errs.ErrInvalid, "negative budget"},
		{"negative host", bad(func(t *Topology) { t.HostBytes = -5 }), nil, errs.ErrInvalid, "negative budget"},
		{"no gpus", bad(func(t *Topology) { t.GPUsPerNode = 0 }), nil, errs.ErrInvalid, "must be positive"},
		{"bandwidth", bad(func(t *Topology) { t.UVMBandwidth = 0 }), nil, errs.ErrInvalid, "bandwidths"},
		{"batch", bad(func(t *Topology) { t.BatchSize = 0 }), nil, errs.ErrInvalid, "batch_size"},
		{"missing", topo(), []string{"a", "q"}, errs.ErrNotFound, `"q" is missing`},
		{"one table too big", bad(func(t *Topology) { t.HBMBytes, t.HostBytes = 100, 1000 }), nil, errs.ErrCapacity, "1.6 kB but one GPU's HBM plus its node's host memory hold 1.1 kB: 500 B more needed"},
		{"all too big", bad(func(t *Topology) { t.HBMBytes, t.HostBytes = 0, 1600 }), nil, errs.ErrCapacity, "more needed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.topo, twoTables(), tc.names, Full)
			assert.ErrorIs(t, err, tc.class)
			assert.ErrorContains(t, err, tc.match)
		})
	}
}

// A profile may hold any finite pooling and a topology any bandwidth above zero; an overflowing
// per-step traffic or a denormal bandwidth made costs infinite or NaN, which failed only at the
// end, as an internal JSON error, instead of naming the table or the bandwidth.
func TestNewRejectsOverflowingCosts(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*profile.Profile, *Topology)
		match string
	}{
		{"one table", func(p *profile.Profile, _ *Topology) { p.Tables[0].Pooling = 1e308 },
			`table "a": its bytes read per step, coverage 0.5 × pooling 1e+308 × batch 8 × 16-byte rows, overflows float64:`},
		{"the sum", func(p *profile.Profile, _ *Topology) {
			p.Tables[0].Pooling, p.Tables[1].Pooling = 2e306, 2e306 // each finite alone, past float64 together
		}, `table "b": its bytes read per step, coverage 1 × pooling 2e+306 × batch 8 × 4-byte rows, overflows float64 once added`},
		{"denormal bandwidth", func(_ *profile.Profile, tp *Topology) { tp.HBMBandwidth = 5e-324 },
			"bandwidths must be finite and at least 1 byte per second (hbm 5e-324, uvm 10)"},
		{"NaN bandwidth", func(_ *profile.Profile, tp *Topology) { tp.UVMBandwidth = math.NaN() }, "uvm NaN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, tp := twoTables(), topo()
			tc.edit(p, &tp)
			_, err := New(tp, p, nil, Full)
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.ErrorContains(t, err, tc.match)
		})
	}
}
