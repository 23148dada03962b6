package dynamic

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// The admission sketch's width was checked only against the int32 range, then rounded up and
// allocated: a sketch_width far past a small table's rows allocated gigabytes of counters when the
// table was built. Now a sketch past MaxSketchBytes (and past the default sketch of the row bound)
// is refused before anything is allocated.
func TestSketchWidthIsBounded(t *testing.T) {
	fixed := MaxSketchBytes / sketchDepth // the widest sketch any table may have
	cases := []struct {
		name  string
		cfg   Config
		class error // nil: the table's config is accepted
		want  string
	}{
		{"default width", Config{MaxRows: 1000, MinCount: 2}, nil, ""},
		{"at the fixed bound", Config{MaxRows: 1000, MinCount: 2, SketchWidth: fixed}, nil, ""},
		{"past the fixed bound", Config{MaxRows: 1000, MinCount: 2, SketchWidth: fixed + 1}, errs.ErrCapacity,
			`dynamic table "t": sketch_width 268435457 (536870912 counters a row once rounded up to a power of two) ` +
				"makes an admission sketch of 2147483648 bytes (4 rows of one-byte counters), past the limit of " +
				"1073741824 bytes (the larger of 1073741824 bytes and the default sketch of the row bound 1000); lower sketch_width"},
		{"the reported width", Config{MaxRows: 1000, MinCount: 2, SketchWidth: 1 << 30}, errs.ErrCapacity,
			"sketch_width 1073741824 (1073741824 counters a row once rounded up to a power of two) makes an admission " +
				"sketch of 4294967296 bytes"},
		{"the default of a larger bound", Config{MaxRows: 1 << 29, MinCount: 2, SketchWidth: 1 << 29}, nil, ""},
		{"past the default of a larger bound", Config{MaxRows: 1 << 29, MinCount: 2, SketchWidth: 1<<29 + 1}, errs.ErrCapacity,
			"makes an admission sketch of 4294967296 bytes (4 rows of one-byte counters), past the limit of 2147483648 bytes"},
		{"no sketch without admission", Config{MaxRows: 1000, MinCount: 1, SketchWidth: 1 << 30}, nil, ""},
		{"past any table's width", Config{MaxRows: 1000, MinCount: 2, SketchWidth: 1<<31 + 1}, errs.ErrInvalid,
			"sketch width must be in [0, 2147483648], got 2147483649"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Name, cfg.Dim = "t", 1
			got, err := cfg.withDefaults()
			if c.class == nil {
				require.NoError(t, err)
				if cfg.MinCount > 1 {
					assert.LessOrEqual(t, sketchDepth*got.SketchWidth, max(MaxSketchBytes, sketchDepth*defaultSketchWidth(got.MaxRows)))
				}
				return
			}
			require.ErrorIs(t, err, c.class)
			assert.ErrorContains(t, err, c.want)
			// A table of it is refused the same way, before its sketch is allocated.
			_, err = New(cfg)
			require.ErrorIs(t, err, c.class)
			assert.ErrorContains(t, err, c.want)
		})
	}
}
