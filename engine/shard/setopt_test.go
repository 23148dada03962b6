package shard

import (
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/require"
)

// TestSetOptimizer checks that a sharded collection takes new hyper-parameters of the same kind on
// every shard and refuses, leaving every shard as it was, another kind, invalid values and a closed
// collection.
func TestSetOptimizer(t *testing.T) {
	adagrad := embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: 0.1, Eps: 1e-8}
	cases := []struct {
		name    string
		opt     embedding.OptimizerConfig
		closed  bool
		wantErr string
	}{
		{"new rate", embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: 0.02, Eps: 1e-6}, false, ""},
		{"other kind", embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.02}, false, "cannot change optimizer"},
		{"negative rate", embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: -1, Eps: 1e-8}, false, "learning rate -1"},
		{"closed", adagrad, true, "used after close"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := NewTopology(1, 1, 1)
			require.NoError(t, err)
			var ls []*Layout
			for _, name := range []string{"a", "b"} {
				l, err := NewLayout(name, 100, 4, Hash, 0, 1)
				require.NoError(t, err)
				ls = append(ls, l)
			}
			feats := []embedding.Feature{{Name: "fa", Table: 0}, {Name: "fb", Table: 1}}
			c, err := NewCollection(ls, topo, 0, Flat, adagrad, feats)
			require.NoError(t, err)
			if tc.closed {
				require.NoError(t, c.Close())
			} else {
				defer c.Close()
			}
			err = c.SetOptimizer(tc.opt)
			want := tc.opt
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				want = adagrad
			} else {
				require.NoError(t, err)
			}
			for _, sh := range c.Shards {
				require.Equal(t, want, sh.Opt, sh.Name)
			}
		})
	}
}
