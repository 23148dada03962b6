package feature_test

import (
	"fmt"

	"github.com/recgo/recgo/engine/feature"
)

func Example() {
	spec, err := feature.ParseSpec([]byte(`{"features": [
	  {"name": "hist", "ops": [{"op": "truncate", "n": 2, "keep": "last"}, {"op": "mod", "n": 100}]},
	  {"name": "item", "ops": [{"op": "truncate", "n": 1}, {"op": "mod", "n": 100}]},
	  {"name": "age", "dtype": "float", "ops": [{"op": "bucketize", "boundaries": [18, 30, 50]}]},
	  {"name": "hist_x_age", "ops": [{"op": "cross", "fields": ["hist", "age"]}, {"op": "mod", "n": 1000}]}
	]}`))
	if err != nil {
		panic(err)
	}
	eng, err := feature.Compile(spec)
	if err != nil {
		panic(err)
	}
	p := eng.Plan()
	fmt.Println("calls before:", p.CallsBefore, "after:", p.CallsAfter)
	for _, g := range p.Groups {
		fmt.Println(g.Op, g.Features)
	}
	res, err := eng.Apply(feature.Batch{Size: 2, Inputs: []feature.Input{
		{Kind: feature.KindInt64, Ints: []int64{101, 102, 103, 7}, Lengths: []int64{3, 1}}, // hist
		{Kind: feature.KindInt64, Ints: []int64{5, 6, 250}, Lengths: []int64{2, 1}},        // item
		{Kind: feature.KindFloat64, F64: []float64{25, 64}},                                // age (dense)
	}})
	if err != nil {
		panic(err)
	}
	vals, lens, _ := res.Feature("hist")
	fmt.Println("hist:", vals, lens)
	vals, lens, _ = res.Feature("age")
	fmt.Println("age:", vals, lens)
	// Output:
	// calls before: 7 after: 5
	// truncate [hist item]
	// bucketize [age]
	// mod [hist item]
	// cross [hist_x_age]
	// mod [hist_x_age]
	// hist: [2 3 7] [2 1]
	// age: [1 3] [1 1]
}
