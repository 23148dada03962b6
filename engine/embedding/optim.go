package embedding

import (
	"fmt"
	"math"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// OptimizerKind selects the update a table applies in backward.
type OptimizerKind int

// The optimizers. OptNone hands gradients back to the caller (for a torch optimizer) instead of
// updating rows in the backward pass.
const (
	OptNone OptimizerKind = iota
	OptSGD
	OptAdagrad
	OptRowwiseAdagrad
	OptAdam
	OptAdamW
)

var kindNames = [...]string{"none", "sgd", "adagrad", "rowwise_adagrad", "adam", "adamw"}

// String is the kind's name as Python spells it ("rowwise_adagrad"), or OptimizerKind(n) for others.
func (k OptimizerKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("OptimizerKind(%d)", int(k))
}

// OptimizerConfig holds a fused optimizer's hyper-parameters. Every optimizer takes LR and
// WeightDecay (an L2 term added to the gradient, as torch.optim does; AdamW decays the weights
// instead); Adagrad, row-wise Adagrad and Adam take Eps; Adam and AdamW take Beta1 and Beta2. A
// parameter an optimizer does not take must be zero (Validate refuses it: it would be ignored).
type OptimizerConfig struct {
	Kind        OptimizerKind
	LR          float64
	Eps         float64
	Beta1       float64
	Beta2       float64
	WeightDecay float64
}

// Validate checks the hyper-parameters are in range for the kind, and that those it does not take
// are zero.
//
// The kernels compute in float32, so a value must also be one there: a learning rate or weight decay
// past float32's range would be infinite, and an eps below its smallest positive value zero (a row
// whose merged gradient is zero, e.g. under per-ID weights of zero, then becomes 0/0 = NaN).
func (c OptimizerConfig) Validate() error {
	// finite: finite in float32 too (the comparison is false for NaN)
	finite := func(x float64) bool { return math.Abs(x) <= math.MaxFloat32 }
	switch {
	case c.Kind < OptNone || c.Kind > OptAdamW:
		return errs.Invalidf("optimizer: unknown kind %d", int(c.Kind))
	case c.Kind == OptNone:
		return nil
	case !finite(c.LR) || c.LR < 0:
		return errs.Invalidf("optimizer %s: learning rate %g must be finite in float32 and ≥ 0", c.Kind, c.LR)
	case !finite(c.WeightDecay) || c.WeightDecay < 0:
		return errs.Invalidf("optimizer %s: weight decay %g must be finite in float32 and ≥ 0", c.Kind, c.WeightDecay)
	}
	adam := c.Kind == OptAdam || c.Kind == OptAdamW
	unused := func(name string, v float64) error {
		if v != 0 {
			return errs.Invalidf("optimizer %s: %s=%g has no meaning for %s and would be ignored; leave it unset",
				c.Kind, name, v, c.Kind)
		}
		return nil
	}
	if c.Kind == OptSGD {
		if err := unused("eps", c.Eps); err != nil {
			return err
		}
	} else if !finite(c.Eps) || float32(c.Eps) <= 0 {
		return errs.Invalidf("optimizer %s: eps %g must be finite and > 0 in float32 (at least %g)", c.Kind, c.Eps,
			math.SmallestNonzeroFloat32)
	}
	for _, b := range []struct {
		name string
		v    float64
	}{{"beta1", c.Beta1}, {"beta2", c.Beta2}} {
		if !adam {
			if err := unused(b.name, b.v); err != nil {
				return err
			}
		} else if !finite(b.v) || b.v < 0 || b.v >= 1 {
			return errs.Invalidf("optimizer %s: %s %g must be in [0, 1)", c.Kind, b.name, b.v)
		}
	}
	return nil
}

// StateWidth is the number of float32 state values the optimizer keeps per row of a dim-wide
// table: 0 (none, SGD), 1 (row-wise Adagrad), dim (Adagrad) or 2·dim (Adam/AdamW: m then v).
func (c OptimizerConfig) StateWidth(dim int) int {
	switch c.Kind {
	case OptRowwiseAdagrad:
		return 1
	case OptAdagrad:
		return dim
	case OptAdam, OptAdamW:
		return 2 * dim
	default:
		return 0
	}
}

// rowUpdater applies one step of the optimizer to rows of one table.
type rowUpdater struct {
	cfg  OptimizerConfig
	adam kernels.AdamParams
}

func newRowUpdater(c OptimizerConfig, step int64) rowUpdater {
	u := rowUpdater{cfg: c}
	if c.Kind == OptAdam || c.Kind == OptAdamW {
		u.adam = kernels.NewAdamParams(c.LR, c.Beta1, c.Beta2, c.Eps, c.WeightDecay, c.Kind == OptAdamW, step)
	}
	return u
}

// applyRows updates the given distinct rows of t (−1 entries skipped) with their gradients g
// (len(rows)·Dim values, row-major).
func (u *rowUpdater) applyRows(t *Table, rows []int64, g []float32) {
	ws, ss, d := t.Stride, t.StateWidth(), t.Dim
	// The rows are scattered over the table: their data and state stream in ahead (streamRows).
	streamRows(len(rows), len(rows), func(lo, hi int) {
		kernels.PrefetchRows(t.Data, rows[lo:hi], int64(ws), d)
		if ss > 0 {
			kernels.PrefetchRows(t.State, rows[lo:hi], int64(ss), ss)
		}
	}, func(lo, hi int) {
		u.applyChunk(t, rows[lo:hi], g[lo*d:hi*d])
	})
}

func (u *rowUpdater) applyChunk(t *Table, rows []int64, g []float32) {
	lr, eps := float32(u.cfg.LR), float32(u.cfg.Eps)
	w, ws, s, ss, d := t.Data, t.Stride, t.State, t.StateWidth(), t.Dim
	if wd := float32(u.cfg.WeightDecay); wd != 0 && u.cfg.Kind != OptAdam && u.cfg.Kind != OptAdamW {
		kernels.AddWeightDecay(g, w, ws, d, rows, wd) // g ← g + wd·w, torch.optim's L2 term (Adam does its own)
	}
	switch u.cfg.Kind {
	case OptSGD:
		kernels.SGDRows(w, ws, d, rows, g, lr)
	case OptAdagrad:
		kernels.AdagradRows(w, ws, s, ss, d, rows, g, lr, eps)
	case OptRowwiseAdagrad:
		kernels.RowwiseAdagradRows(w, ws, s, ss, d, rows, g, lr, eps)
	case OptAdam, OptAdamW:
		kernels.AdamRows(w, ws, s, ss, d, rows, g, u.adam)
	}
}
