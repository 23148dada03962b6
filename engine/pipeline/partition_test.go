package pipeline

import (
	"context"
	"io"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/engine/shard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shardOf builds rank 0's sharded collection of two ranks over synthTables' tables (features in
// the pipeline's order), hash and table-wise sharded.
func shardOf(t *testing.T, kinds [2]shard.Kind, mode shard.Mode) *shard.Collection {
	topo, err := shard.NewTopology(1, 2, 2)
	require.NoError(t, err)
	var ls []*shard.Layout
	for i, tb := range []struct {
		name string
		rows int64
	}{{"t_ui", 1000}, {"t_h", 1000}} {
		l, err := shard.NewLayout(tb.name, tb.rows, 4, kinds[i], 1, 2)
		require.NoError(t, err)
		ls = append(ls, l)
	}
	c, err := shard.NewCollection(ls, topo, 0, mode, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1},
		[]embedding.Feature{{Name: "u", Table: 0}, {Name: "i", Table: 0}, {Name: "h", Table: 1}})
	require.NoError(t, err)
	return c
}

// With a sharded collection's partitioner, FORMAT partitions each of its tables' distinct IDs as
// the partitioner does (and leaves the pipeline's other tables unpartitioned), for every depth.
func TestFormatPartitionsForShard(t *testing.T) {
	c := shardOf(t, [2]shard.Kind{shard.Hash, shard.TableWise}, shard.Flat)
	defer c.Close()
	pt := c.Partitioner()
	for _, depth := range []int{0, 2} {
		syn, _ := reader.NewSynthetic(synthCfg(500), reader.Options{})
		p, err := New(context.Background(), syn, synthEngine(t), Config{BatchSize: 128, Depth: depth, Workers: 2, Tables: synthTables, Partitioner: pt})
		require.NoError(t, err)
		n := 0
		for ; ; n++ {
			pb, err := p.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			checkDedup(t, pb, synthTables)
			require.NotNil(t, pb.Partition)
			require.Same(t, pt, pb.Partition.By)
			require.Len(t, pb.Partition.Tables, len(synthTables))
			for i, d := range pb.Dedup {
				got := pb.Partition.Tables[i]
				if d.Table == "t_x" {
					require.Empty(t, got.Dest, "t_x is not a table of the collection")
					continue
				}
				ti := map[string]int{"t_ui": 0, "t_h": 1}[d.Table]
				want := shard.TablePartition{Dest: make([]int32, len(d.Uniq)), Perm: make([]int32, len(d.Uniq)), Count: make([]int64, 2)}
				require.NoError(t, pt.Partition(ti, d.Uniq, want))
				require.Equal(t, want, got, "step %d table %s", n, d.Table)
				var sum int64
				for _, k := range got.Count {
					sum += k
				}
				require.Equal(t, int64(len(d.Uniq)), sum)
			}
			require.NoError(t, pb.Close())
		}
		require.Equal(t, 4, n)
		require.NoError(t, p.Close())
	}
}

func TestPartitionerTablesMustBeDeduplicated(t *testing.T) {
	c := shardOf(t, [2]shard.Kind{shard.Hash, shard.Hash}, shard.Flat)
	defer c.Close()
	for _, tc := range []struct {
		name   string
		tables []Table
		want   string
	}{
		{"missing table", []Table{{Name: "t_ui", Keys: []string{"u", "i"}}}, `table "t_h" is not one of the tables to deduplicate`},
		{"other feature order", []Table{{Name: "t_ui", Keys: []string{"i", "u"}}, {Name: "t_h", Keys: []string{"h"}}},
			`table "t_ui" deduplicates features [i u], the sharded collection looks it up with [u i]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			syn, _ := reader.NewSynthetic(synthCfg(100), reader.Options{})
			_, err := New(context.Background(), syn, synthEngine(t), Config{BatchSize: 10, Tables: tc.tables, Partitioner: c.Partitioner()})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// An out-of-range ID fails the FORMAT stage of its step when the pipeline partitions.
func TestPartitionErrorNamesFormatStage(t *testing.T) {
	topo, _ := shard.NewTopology(1, 2, 2)
	var ls []*shard.Layout
	for _, name := range []string{"t_ui", "t_h"} {
		l, err := shard.NewLayout(name, 10, 4, shard.Hash, 0, 2) // the engine's IDs reach 1000
		require.NoError(t, err)
		ls = append(ls, l)
	}
	c, err := shard.NewCollection(ls, topo, 0, shard.Flat, embedding.OptimizerConfig{},
		[]embedding.Feature{{Name: "u", Table: 0}, {Name: "i", Table: 0}, {Name: "h", Table: 1}})
	require.NoError(t, err)
	defer c.Close()
	syn, _ := reader.NewSynthetic(synthCfg(100), reader.Options{})
	p, err := New(context.Background(), syn, synthEngine(t), Config{BatchSize: 50, Depth: 1, Tables: synthTables, Partitioner: c.Partitioner()})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Next()
	var se *StageError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, StageFormat, se.Stage)
	assert.ErrorContains(t, err, "out of range [0, 10)")
}
