package profile_test

import (
	"fmt"

	"github.com/recgo/recgo/planner/profile"
)

func ExampleProfiler() {
	p, err := profile.NewProfiler([]profile.Spec{{Name: "user", Rows: 100, Dim: 16, ElemBytes: 4}}, 1, 0, 4)
	if err != nil {
		panic(err)
	}
	// One key, batch of 4: lengths [2 1 0 1], ids 7 7 | 7 | - | 3.
	if err := p.Add([]int{0}, 4, []int64{2, 1, 0, 1}, []int64{7, 7, 7, 3}); err != nil {
		panic(err)
	}
	prof, _ := p.Profile()
	t := prof.Tables[0]
	fmt.Printf("coverage %.2f pooling %.2f touched %d hottest-1 share %.2f\n", t.Coverage, t.Pooling, t.Touched, t.Frac(1))
	// Output: coverage 0.75 pooling 1.33 touched 2 hottest-1 share 0.75
}
