package dynamic_test

import (
	"fmt"

	"github.com/recgo/recgo/engine/dynamic"
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
