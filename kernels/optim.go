package kernels

import "math"

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
	for i := range w {
		gi := g[i]
		if p.WeightDecay != 0 {
			if p.Decoupled {
				w[i] *= p.Decay
			} else {
				gi += p.WeightDecay * w[i]
			}
		}
		m[i] = p.Beta1*m[i] + p.OneMinusBeta1*gi
		v[i] = p.Beta2*v[i] + p.OneMinusBeta2*gi*gi
		denom := float32(math.Sqrt(float64(v[i])))/p.SqrtBC2 + p.Eps
		w[i] -= p.StepSize * m[i] / denom
	}
}
