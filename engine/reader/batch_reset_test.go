package reader

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/feature"
)

// Reset(schema, rows) empties a used batch for the schema, keeping its buffers, and records the rows
// its Read asked for, which a capacity error names (every source's Read set them after Reset, one
// line each; session 43 made it Reset's).
func TestBatchResetRecordsRows(t *testing.T) {
	schema := Schema{Fields: []Field{{Name: "a", Kind: feature.KindInt64}, {Name: "s", Kind: feature.KindBytes}}, Dense: []string{"d"}}
	for _, c := range []struct {
		name      string
		rows      int
		wantBatch string
	}{
		{"a batch of 7", 7, "by row 1 of a batch of 7 rows"},
		{"a batch of 1", 1, "by row 1 of a batch of 1 rows"},
		{"no rows asked", 0, "by row 1 of a batch of 1 rows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := Batch{MaxValues: 2}
			b.Reset(schema, 3)
			b.Inputs[0].Ints = append(b.Inputs[0].Ints, 1, 2)
			b.Inputs[1].Bytes, b.Inputs[1].ByteLens = append(b.Inputs[1].Bytes, "xy"...), append(b.Inputs[1].ByteLens, 2)
			b.Labels, b.Dense, b.Size = append(b.Labels, 1), append(b.Dense, 0.5), 1
			ints := cap(b.Inputs[0].Ints)
			b.Reset(schema, c.rows)
			assert.Equal(t, c.rows, b.rows)
			assert.Zero(t, b.Size)
			assert.Empty(t, b.Labels)
			assert.Empty(t, b.Dense)
			require.Len(t, b.Inputs, 2)
			for i, in := range b.Inputs {
				assert.Equal(t, schema.Fields[i].Kind, in.Kind)
				assert.Zero(t, fieldValues(&in))
				assert.Empty(t, in.Lengths)
			}
			assert.Equal(t, ints, cap(b.Inputs[0].Ints), "the field's memory is kept")
			assert.ErrorContains(t, b.overLimit("f", "a", &b.Inputs[0], 3, 0), c.wantBatch)
		})
	}
}
