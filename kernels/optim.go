package kernels

import "math"

// AdamParams are one step's Adam/AdamW hyper-parameters, with the bias corrections for the step
// already computed (BiasCorrection1 = 1-β1^t, BiasCorrection2 = 1-β2^t).
type AdamParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	// Decoupled selects AdamW (w ← w·(1-lr·wd)) instead of Adam's L2 term (g ← g + wd·w).
	Decoupled                        bool
	BiasCorrection1, BiasCorrection2 float32
}

// SGDRow applies w ← w − lr·g.
func SGDRow(w, g []float32, lr float32) { sgdRow(w, g, lr) }

// SGDRowGeneric is the portable SGDRow.
func SGDRowGeneric(w, g []float32, lr float32) {
	g = g[:len(w)]
	for i := range w {
		w[i] -= lr * g[i]
	}
}

// AdagradRow applies s ← s + g², w ← w − lr·g/(√s + eps) (torch.optim.Adagrad, FBGEMM EXACT_ADAGRAD).
func AdagradRow(w, s, g []float32, lr, eps float32) { adagradRow(w, s, g, lr, eps) }

// AdagradRowGeneric is the portable AdagradRow.
func AdagradRowGeneric(w, s, g []float32, lr, eps float32) {
	s, g = s[:len(w)], g[:len(w)]
	for i := range w {
		s[i] += g[i] * g[i]
		w[i] -= lr * g[i] / (float32(math.Sqrt(float64(s[i]))) + eps)
	}
}

// RowwiseAdagradRow applies FBGEMM's EXACT_ROWWISE_ADAGRAD to one row: one accumulator per row,
// s ← s + mean(g²), w ← w − lr·g/(√s + eps).
func RowwiseAdagradRow(w []float32, s *float32, g []float32, lr, eps float32) {
	g = g[:len(w)]
	var sq float32
	for _, x := range g {
		sq += x * x
	}
	if len(w) > 0 {
		*s += sq / float32(len(w))
	}
	mult := lr / (float32(math.Sqrt(float64(*s))) + eps)
	sgdRow(w, g, mult)
}

// AdamRow applies one Adam/AdamW step to a row with first moment m and second moment v, in
// torch.optim.Adam's order of operations: denom = √v/√bc2 + eps, w ← w − (lr/bc1)·m/denom.
func AdamRow(w, m, v, g []float32, p AdamParams) { adamRow(w, m, v, g, p) }

// AdamRowGeneric is the portable AdamRow.
func AdamRowGeneric(w, m, v, g []float32, p AdamParams) {
	m, v, g = m[:len(w)], v[:len(w)], g[:len(w)]
	step := p.LR / p.BiasCorrection1
	sqrtBC2 := float32(math.Sqrt(float64(p.BiasCorrection2)))
	for i := range w {
		gi := g[i]
		if p.WeightDecay != 0 {
			if p.Decoupled {
				w[i] *= 1 - p.LR*p.WeightDecay
			} else {
				gi += p.WeightDecay * w[i]
			}
		}
		m[i] = p.Beta1*m[i] + (1-p.Beta1)*gi
		v[i] = p.Beta2*v[i] + (1-p.Beta2)*gi*gi
		denom := float32(math.Sqrt(float64(v[i])))/sqrtBC2 + p.Eps
		w[i] -= step * m[i] / denom
	}
}
