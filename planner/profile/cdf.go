package profile

import "math"

// DefaultSteps is the number of CDF quantile levels a profile keeps by default.
const DefaultSteps = 16

// Levels returns the access quantiles at which a profile records its CDF: 1 - 2^-j for j = 1..k
// (0.5, 0.75, ..., dense near 1, where hot/cold splits of skewed tables lie).
func Levels(k int) []float64 {
	q := make([]float64, k)
	for j := range q {
		q[j] = 1 - math.Ldexp(1, -(j+1))
	}
	return q
}

// cdfFromCounts builds CDF points at the given quantile levels from access counts sorted hottest
// first: for each level q, the fewest rows that receive at least q of the accesses.
func cdfFromCounts(sorted []uint64, levels []float64) []Point {
	if len(sorted) == 0 {
		return nil
	}
	total := uint64(0)
	for _, c := range sorted {
		total += c
	}
	pts := []Point{{}}
	cum, h := uint64(0), 0
	for _, q := range levels {
		need := uint64(math.Ceil(q * float64(total)))
		for h < len(sorted) && cum < need {
			cum += sorted[h]
			h++
		}
		pts = appendPoint(pts, Point{int64(h), float64(cum) / float64(total)})
	}
	return appendPoint(pts, Point{int64(len(sorted)), 1})
}

// appendPoint adds p unless it repeats the last point's row count (then the larger share wins).
func appendPoint(pts []Point, p Point) []Point {
	last := &pts[len(pts)-1]
	if p.Rows == last.Rows {
		last.Frac = max(last.Frac, p.Frac)
		return pts
	}
	return append(pts, p)
}

// harmonic evaluates generalized harmonic numbers H(n, a) = Σ_{k=1..n} k^-a: exact up to 1024 terms
// (prefix sums), Euler–Maclaurin beyond.
type harmonic struct {
	a      float64
	prefix []float64 // prefix[n] = H(n, a) for n <= 1024
}

func newHarmonic(a float64) harmonic {
	p := make([]float64, 1025)
	for k := 1; k <= 1024; k++ {
		p[k] = p[k-1] + math.Pow(float64(k), -a)
	}
	return harmonic{a, p}
}

func (h harmonic) at(n int64) float64 {
	m := int64(len(h.prefix) - 1)
	if n <= m {
		return h.prefix[max(n, 0)]
	}
	a, x0, x1 := h.a, float64(m), float64(n)
	var integral float64
	if math.Abs(a-1) < 1e-12 {
		integral = math.Log(x1 / x0)
	} else {
		integral = (math.Pow(x1, 1-a) - math.Pow(x0, 1-a)) / (1 - a)
	}
	return h.prefix[m] + integral + (math.Pow(x1, -a)-math.Pow(x0, -a))/2 + a/12*(math.Pow(x0, -a-1)-math.Pow(x1, -a-1))
}

// Zipf returns a synthetic table profile whose touched rows follow a power law with exponent alpha
// (row r of touched receives a share ∝ r^-alpha), for sampled statistics too large to count.
func Zipf(name string, rows int64, dim, elemBytes int, coverage, pooling, alpha float64, touched int64, levels []float64) Table {
	touched = max(1, min(touched, rows))
	hn := newHarmonic(alpha)
	total := hn.at(touched)
	pts := []Point{{}}
	for _, q := range levels {
		lo, hi := int64(1), touched // smallest h in [1, touched] with H(h) >= q H(touched)
		for lo < hi {
			mid := lo + (hi-lo)/2
			if hn.at(mid) >= q*total {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		pts = appendPoint(pts, Point{lo, min(1, hn.at(lo)/total)})
	}
	pts = appendPoint(pts, Point{touched, 1})
	return Table{Name: name, Rows: rows, Dim: dim, ElemBytes: elemBytes, Coverage: coverage,
		Pooling: pooling, Touched: touched, CDF: pts}
}
