package shard_test

import (
	"fmt"

	"github.com/recgo/recgo/engine/shard"
)

// Simulate gives both exchange modes' traffic for a cluster without running it: here 2 nodes × 2
// ranks, where the two ranks of node 0 both need ID 7 of a table.
func ExampleSimulate() {
	topo, _ := shard.NewTopology(2, 2, 4)
	batch := [][][]int64{{{7, 8}}, {{7}}, {{9}}, {{10}}}
	tr, _ := shard.Simulate(topo, batch, func(_ int, id int64) int { return int(id % 4) })
	fmt.Println("flat inter-node IDs:", tr.FlatInter, "hierarchical:", tr.HierInter)
	// Output: flat inter-node IDs: 3 hierarchical: 2
}
