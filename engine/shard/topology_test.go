package shard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewTopologyChecksTheShape(t *testing.T) {
	for _, c := range []struct {
		name                  string
		nodes, perNode, world int
		ok                    bool
	}{
		{"2 × 2", 2, 2, 4, true},
		{"3 × 1", 3, 1, 3, true},
		{"1 × 8", 1, 8, 8, true},
		{"world too small", 2, 2, 3, false},
		{"world too large", 2, 2, 6, false},
		{"no nodes", 0, 2, 0, false},
		{"negative counts", -1, -1, 1, false},
		{"product wraps to zero", 1 << 32, 1 << 32, 0, false},
		{"product wraps to the world", 1<<62 + 1, 4, 4, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			topo, err := NewTopology(c.nodes, c.perNode, c.world)
			if !c.ok {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "does not match the world")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.world, topo.World())
		})
	}
}
