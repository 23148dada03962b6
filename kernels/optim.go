package kernels

import "math"

// The optimizer kernels update a batch of table rows in place: for each k with rows[k] ≥ 0, the
// weights w[rows[k]*wStride : +dim] take one step with the gradient g[k*dim : +dim], and the row's
// optimizer state starts at s[rows[k]*sStride]. Rows must be distinct (one writer per row); a
// negative row is skipped. The formulas are torch.optim's and FBGEMM's, in float32.

// AdamParams are one step's Adam/AdamW hyper-parameters in float32, derived in float64 by
// [NewAdamParams] (1−β rounds badly when computed from a float32 β: 1−float32(0.999) is off by 1e-5).
type AdamParams struct {
	LR, Beta1, Beta2, OneMinusBeta1, OneMinusBeta2, Eps, WeightDecay float32
	// Decoupled selects AdamW (w ← w·(1-lr·wd)) instead of Adam's L2 term (g ← g + wd·w).
	Decoupled bool
	// StepSize is lr/(1−β1^t), SqrtBC2 is √(1−β2^t), Decay is 1−lr·wd.
	StepSize, SqrtBC2, Decay float32
}

// NewAdamParams derives the float32 parameters of Adam step t (t ≥ 1) in float64.
func NewAdamParams(lr, beta1, beta2, eps, weightDecay float64, decoupled bool, t int64) AdamParams {
	return AdamParams{
		LR: float32(lr), Beta1: float32(beta1), Beta2: float32(beta2),
		OneMinusBeta1: float32(1 - beta1), OneMinusBeta2: float32(1 - beta2),
		Eps: float32(eps), WeightDecay: float32(weightDecay), Decoupled: decoupled,
		StepSize: float32(lr / (1 - math.Pow(beta1, float64(t)))),
		SqrtBC2:  float32(math.Sqrt(1 - math.Pow(beta2, float64(t)))),
		Decay:    float32(1 - lr*weightDecay),
	}
}

// AddWeightDecay adds the L2 term of torch.optim's weight_decay to each row's gradient:
// g ← g + wd·w (before the optimizer's own formula, as SGD, Adagrad and Adam do in torch).
func AddWeightDecay(g, w []float32, wStride, dim int, rows []int64, wd float32) {
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		for i := range gr {
			gr[i] += wd * wr[i]
		}
	}
}

// SGDRows applies w ← w − lr·g to each row.
func SGDRows(w []float32, wStride, dim int, rows []int64, g []float32, lr float32) {
	sgdRows(w, wStride, dim, rows, g, lr)
}

// SGDRowsGeneric is the portable SGDRows.
func SGDRowsGeneric(w []float32, wStride, dim int, rows []int64, g []float32, lr float32) {
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		for i := range wr {
			wr[i] -= lr * gr[i]
		}
	}
}

// AdagradRows applies s ← s + g², w ← w − lr·g/(√s + eps) to each row (torch.optim.Adagrad,
// FBGEMM EXACT_ADAGRAD); the row's state is dim accumulators.
func AdagradRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	adagradRows(w, wStride, s, sStride, dim, rows, g, lr, eps)
}

// AdagradRowsGeneric is the portable AdagradRows.
func AdagradRowsGeneric(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, sr, gr := w[r*int64(wStride):][:dim], s[r*int64(sStride):][:dim], g[k*dim:][:dim]
		for i := range wr {
			sr[i] += gr[i] * gr[i]
			wr[i] -= lr * gr[i] / (float32(math.Sqrt(float64(sr[i]))) + eps)
		}
	}
}

// RowwiseAdagradRows applies FBGEMM's EXACT_ROWWISE_ADAGRAD: one accumulator per row,
// s ← s + mean(g²), w ← w − lr·g/(√s + eps).
func RowwiseAdagradRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	// The scalar pass (accumulators and per-row multipliers) runs before any vector code.
	mult := make([]float32, len(rows))
	for k, r := range rows {
		if r < 0 {
			continue
		}
		var sq float32
		for _, x := range g[k*dim:][:dim] {
			sq += x * x
		}
		acc := &s[r*int64(sStride)]
		*acc += sq / float32(dim)
		mult[k] = -(lr / (float32(math.Sqrt(float64(*acc))) + eps)) // negated here: see ScaledRowsGeneric
	}
	scaledRows(w, wStride, dim, rows, g, mult)
}

// ScaledRowsGeneric applies w ← w + mult_k·g to each row (row-wise Adagrad's second pass, whose
// multipliers are its steps negated: w − m·g exactly, the sign flipped in scalar code before any
// vector code, as the vector kernels need; a float negation inside them is a legacy-SSE instruction).
func ScaledRowsGeneric(w []float32, wStride, dim int, rows []int64, g, mult []float32) {
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr, m := w[r*int64(wStride):][:dim], g[k*dim:][:dim], mult[k]
		for i := range wr {
			wr[i] += m * gr[i]
		}
	}
}

// AdamRows applies one Adam/AdamW step to each row; the row's state is the first moment (dim
// values) then the second moment (dim values). Order of operations as torch.optim.Adam:
// denom = √v/√bc2 + eps, w ← w − (lr/bc1)·m/denom.
func AdamRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p AdamParams) {
	adamRows(w, wStride, s, sStride, dim, rows, g, p)
}

// AdamRowsGeneric is the portable AdamRows.
func AdamRowsGeneric(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p AdamParams) {
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		st := s[r*int64(sStride):][:2*dim]
		m, v := st[:dim], st[dim:]
		for i := range wr {
			gi := gr[i]
			if p.WeightDecay != 0 {
				if p.Decoupled {
					wr[i] *= p.Decay
				} else {
					gi += p.WeightDecay * wr[i]
				}
			}
			m[i] = p.Beta1*m[i] + p.OneMinusBeta1*gi
			v[i] = p.Beta2*v[i] + p.OneMinusBeta2*gi*gi
			denom := float32(math.Sqrt(float64(v[i])))/p.SqrtBC2 + p.Eps
			wr[i] -= p.StepSize * m[i] / denom
		}
	}
}
