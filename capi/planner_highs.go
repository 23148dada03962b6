package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/highs"
)

// recgo_highs_solve solves a MILP with HiGHS (row-wise CSR matrix; integer is one byte per column,
// nonzero for integral). start (optional, ncol doubles) is a warm start. On return xOut (ncol
// doubles) holds the solution and info (8 doubles) holds: model status, objective, dual bound, MIP
// gap, start accepted (0/1), seconds, branch-and-bound nodes, start objective (NaN without start).
//
//export recgo_highs_solve
func recgo_highs_solve(ncol, nrow, nnz C.int64_t, sense C.int32_t, cost, colLower, colUpper, integer,
	rowLower, rowUpper, aStart, aIndex, aValue, start unsafe.Pointer, timeLimit, mipRelGap C.double,
	threads C.int32_t, maxNodes C.int64_t, xOut, info unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		n, r, z := int64(ncol), int64(nrow), int64(nnz)
		m := &highs.Model{Sense: highs.Sense(sense)}
		var err error
		views := []struct {
			dst  *[]float64
			ptr  unsafe.Pointer
			n    int64
			name string
		}{
			{&m.ColCost, cost, n, "cost"}, {&m.ColLower, colLower, n, "col_lower"},
			{&m.ColUpper, colUpper, n, "col_upper"}, {&m.RowLower, rowLower, r, "row_lower"},
			{&m.RowUpper, rowUpper, r, "row_upper"}, {&m.AValue, aValue, z, "a_value"},
		}
		for _, v := range views {
			if *v.dst, err = viewSlice[float64](v.ptr, v.n, v.name); err != nil {
				return err
			}
		}
		ints, err := viewSlice[uint8](integer, n, "integer")
		if err != nil {
			return err
		}
		m.Integer = make([]bool, n)
		for j, b := range ints {
			m.Integer[j] = b != 0
		}
		if r > 0 {
			if m.AStart, err = viewSlice[int32](aStart, r+1, "a_start"); err != nil {
				return err
			}
		}
		if m.AIndex, err = viewSlice[int32](aIndex, z, "a_index"); err != nil {
			return err
		}
		x0, err := optionalSlice[float64](start, n, "start")
		if err != nil {
			return err
		}
		xs, err := viewSlice[float64](xOut, n, "x_out")
		if err != nil {
			return err
		}
		out, err := viewSlice[float64](info, 8, "info")
		if err != nil {
			return err
		}
		if threads < 0 || timeLimit < 0 || mipRelGap < 0 {
			return errs.Invalidf("highs: negative threads, time limit or gap")
		}
		res, err := highs.Solve(m, highs.Options{TimeLimit: float64(timeLimit),
			MipRelGap: float64(mipRelGap), Threads: int(threads), MaxNodes: int(maxNodes)}, x0)
		if err != nil {
			return err
		}
		copy(xs, res.X)
		accepted := 0.0
		if res.StartAccepted {
			accepted = 1
		}
		copy(out, []float64{float64(res.Status), res.Objective, res.DualBound, res.Gap, accepted,
			res.Seconds, float64(res.Nodes), res.StartObjective})
		return nil
	})
}
