package dynamic_test

import (
	"fmt"

	"github.com/recgo/recgo/engine/dynamic"
	"github.com/recgo/recgo/engine/embedding"
)

// A dynamic table maps arbitrary int64 IDs to rows on demand. With MinCount 2 an ID gets a row in
// the second training batch it appears in; eval lookups of unknown IDs resolve to -1 (zeros).
func Example() {
	tab, err := dynamic.New(dynamic.Config{Name: "user_id", Dim: 8, MaxRows: 1000, MinCount: 2,
		Policy: dynamic.LRU, InitLow: -0.01, InitHigh: 0.01})
	if err != nil {
		panic(err)
	}
	defer tab.Close()

	ids := []int64{912834712983, -5, 42}
	rows := make([]int64, len(ids))
	_ = tab.Resolve(ids, rows, true) // first sighting: not admitted yet
	fmt.Println(rows)
	_ = tab.Resolve(ids[:2], rows[:2], true) // second sighting of the first two
	fmt.Println(rows[:2])
	_ = tab.Resolve([]int64{42, 7}, rows[:2], false) // eval: 42 has no row yet, 7 was never seen
	fmt.Println(rows[:2])
	st, _ := tab.Stats()
	fmt.Println(st.Rows, st.Step)
	// Output:
	// [-1 -1 -1]
	// [0 1]
	// [-1 -1]
	// 2 2
}

// A Builder plugs dynamic tables into an embedding collection: the collection pools and trains them
// like fixed tables, while the dynamic table decides which row each raw ID uses.
func ExampleBuilder() {
	b, err := dynamic.NewBuilder(dynamic.Config{MaxRows: 100, InitLow: 1, InitHigh: 1}) // all-ones init
	if err != nil {
		panic(err)
	}
	tab, err := b.BuildTable("item", 2, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.5})
	if err != nil {
		panic(err)
	}
	c, err := embedding.NewCollection([]*embedding.Table{tab}, []embedding.Feature{{Name: "item_id", Table: 0}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	batch := embedding.Batch{KeyFeature: []int64{0}, Values: []int64{1 << 50, 7, 1 << 50}, Lengths: []int64{2, 1}}
	out := make([]float32, 2*2)
	ctx, _ := c.Forward(batch, out, true, true)
	fmt.Println(out)
	_ = c.Backward(ctx, []float32{1, 1, 1, 1}, nil, nil) // d(sum)/d(row) = 2 for 1<<50, 1 for 7
	rows := make([]int64, 2)
	_ = dynamic.Of(tab).Resolve([]int64{1 << 50, 7}, rows, false)
	fmt.Println(rows, tab.Row(rows[0]), tab.Row(rows[1]))
	// Output:
	// [2 2 1 1]
	// [0 1] [0 0] [0.5 0.5]
}
