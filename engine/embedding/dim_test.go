package embedding

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// TestCheckDim covers the one embedding-dimension rule and that both table constructors apply it.
func TestCheckDim(t *testing.T) {
	cases := []struct {
		dim int
		ok  bool
	}{{1, true}, {128, true}, {MaxDim, true}, {0, false}, {-3, false}, {MaxDim + 1, false}, {1 << 40, false}}
	for _, c := range cases {
		err := CheckDim("t", c.dim)
		if c.ok {
			assert.NoError(t, err, c.dim)
			continue
		}
		require.Error(t, err, c.dim)
		assert.Equal(t, errs.CodeInvalid, errs.Code(err))
		assert.Contains(t, err.Error(), `table "t": embedding_dim`)
		_, err = NewFixedTable("t", 4, c.dim, OptimizerConfig{Kind: OptSGD, LR: 0.1})
		assert.Equal(t, errs.CodeInvalid, errs.Code(err), c.dim)
		_, err = NewTable(TableSpec{Name: "t", Source: RangeSource{Table: "t", Rows: 1}, Stride: 4, Dim: c.dim})
		assert.Equal(t, errs.CodeInvalid, errs.Code(err), c.dim)
	}
}
