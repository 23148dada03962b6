package highs_test

import (
	"fmt"
	"math"

	"github.com/recgo/recgo/planner/highs"
)

func ExampleSolve() {
	// maximize 8a + 11b + 6c + 4d  s.t.  5a + 7b + 4c + 3d <= 14, binary; warm-started.
	m := &highs.Model{Sense: highs.Maximize}
	for _, c := range []float64{8, 11, 6, 4} {
		m.AddCol(c, 0, 1, true)
	}
	m.AddRow(math.Inf(-1), 14, []int32{0, 1, 2, 3}, []float64{5, 7, 4, 3})
	res, err := highs.Solve(m, highs.Options{TimeLimit: 10}, []float64{1, 1, 0, 0})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Objective, res.X, res.StartAccepted)
	// Output: optimal 21 [0 1 1 1] true
}
