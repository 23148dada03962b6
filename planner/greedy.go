package planner

import (
	"cmp"
	"slices"

	"github.com/recgo/recgo/planner/cost"
)

// GreedyKey orders and balances tables in the whole-table baselines of the RecShard paper.
type GreedyKey int

// Whole-table greedy variants.
const (
	// BySize sorts tables by bytes and balances bytes per GPU.
	BySize GreedyKey = iota
	// ByLookups sorts by lookups per step (coverage × pooling) and balances lookups.
	ByLookups
	// BySizeLookups uses the sum of the two normalized shares (bytes/total + lookups/total).
	BySizeLookups
)

// String names the variant as strategy names do.
func (k GreedyKey) String() string {
	return [...]string{"greedy_size", "greedy_lookups", "greedy_size_lookups"}[k]
}

// WholeTableGreedy is the paper's baseline: tables in decreasing key order, each whole table into
// the HBM of the GPU with the smallest key load that has room; when no GPU has room, the whole
// table goes to UVM (host memory) on the least-loaded GPU whose node has room.
func WholeTableGreedy(m *cost.Model, key GreedyKey) ([]cost.Assignment, error) {
	n := len(m.Tables)
	var totalBytes, totalLookups float64
	for _, t := range m.Tables {
		totalBytes += float64(t.Rows * t.RowBytes())
		totalLookups += t.AccessesPerSample()
	}
	weight := make([]float64, n)
	for i, t := range m.Tables {
		b := float64(t.Rows * t.RowBytes())
		l := t.AccessesPerSample()
		switch key {
		case BySize:
			weight[i] = b
		case ByLookups:
			weight[i] = l
		default:
			weight[i] = b/max(totalBytes, 1) + l/max(totalLookups, 1e-300)
		}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(weight[b], weight[a]) })
	s := newState(m)
	keyLoad := make([]float64, m.Topo.NumGPUs())
	gpus := make([]int, m.Topo.NumGPUs())
	for _, i := range order {
		for g := range gpus {
			gpus[g] = g
		}
		slices.SortStableFunc(gpus, func(a, b int) int { return cmp.Compare(keyLoad[a], keyLoad[b]) })
		placed := false
		if k := allHot(m.Tables[i]); k >= 0 {
			for _, g := range gpus {
				if s.fits(i, k, g) {
					s.place(i, k, g)
					placed = true
					break
				}
			}
		}
		if !placed { // spill: the whole table in UVM (the smallest-hot option when all-UVM cannot fit)
			for _, g := range gpus {
				if s.fits(i, 0, g) {
					s.place(i, 0, g)
					placed = true
					break
				}
			}
		}
		if !placed {
			return nil, s.noRoom(key.String(), i)
		}
		keyLoad[s.choice[i].gpu] += weight[i]
	}
	return s.assignments(), nil
}
