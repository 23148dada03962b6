package reader

import (
	"io"
	"math"
	"slices"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// PowerLawExponent is the least-squares slope α of log(count) against log(rank) over the ranks
// (at most maxRank) whose count is at least 2; ok is false with fewer than 5 such ranks.
func PowerLawExponent(counts []int64, maxRank int) (alpha float64, ok bool) {
	c := slices.Clone(counts)
	slices.SortFunc(c, func(a, b int64) int { return int(b - a) })
	var xs, ys []float64
	for r, v := range c[:min(len(c), maxRank)] {
		if v >= 2 {
			xs = append(xs, math.Log(float64(r+1)))
			ys = append(ys, math.Log(float64(v)))
		}
	}
	if len(xs) < 5 {
		return 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(xs))
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, false
	}
	return -sxy / sxx, true
}

// FitSynthetic measures, on up to maxRows samples of src, each sparse field's distinct IDs (its
// Rows), coverage, mean bag length when present (at most the generator's 512) and power-law
// exponent (1 when too few repeats to fit), and the number of dense columns; the result generates samples with those statistics
// (labels from a planted model with unit scales). Byte-string fields are counted by their XXH64.
func FitSynthetic(src Source, maxRows int) (SyntheticConfig, error) {
	schema := src.Schema()
	counts := make([]map[int64]int64, len(schema.Fields))
	for i := range counts {
		counts[i] = map[int64]int64{}
	}
	present := make([]int64, len(schema.Fields))
	values := make([]int64, len(schema.Fields))
	rows := 0
	var b Batch
	for rows < maxRows {
		n, err := src.Read(&b, min(4096, maxRows-rows))
		if err == io.EOF {
			break
		}
		if err != nil {
			return SyntheticConfig{}, err
		}
		rows += n
		for f, in := range b.Inputs {
			at, boff := 0, int64(0)
			for _, l := range in.Lengths {
				if l > 0 {
					present[f]++
				}
				for k := at; k < at+int(l); k++ {
					counts[f][fieldKey(&in, k, &boff)]++
				}
				at += int(l)
				values[f] += l
			}
		}
	}
	if rows == 0 {
		return SyntheticConfig{}, errs.Invalidf("synthetic fit: the source has no samples")
	}
	cfg := SyntheticConfig{Samples: int64(rows), Dense: len(schema.Dense), Seed: 1,
		Label: &PlantedLabel{IDScale: 1, DenseScale: 0.25, Bias: -1}, Fields: []SyntheticField{}}
	for f, fld := range schema.Fields {
		sf := SyntheticField{Name: fld.Name, Rows: max(int64(len(counts[f])), 1), Alpha: 1,
			Coverage: float64(present[f]) / float64(rows), Pooling: 1}
		if present[f] > 0 { // (longer bags than the generator draws are drawn at its longest)
			sf.Pooling = min(max(1, float64(values[f])/float64(present[f])), maxSyntheticBag/8)
		}
		cs := make([]int64, 0, len(counts[f]))
		for _, c := range counts[f] {
			cs = append(cs, c)
		}
		if a, ok := PowerLawExponent(cs, 2000); ok {
			sf.Alpha = min(max(a, 0), 10)
		}
		cfg.Fields = append(cfg.Fields, sf)
	}
	return cfg, nil
}

// fieldKey is value k of in as an int64 (byte strings by XXH64, floats by their bits); boff is the
// running byte offset of string k, advanced past it.
func fieldKey(in *feature.Input, k int, boff *int64) int64 {
	switch in.Kind {
	case feature.KindBytes:
		off := *boff
		*boff += in.ByteLens[k]
		return int64(kernels.XXH64(in.Bytes[off:off+in.ByteLens[k]], 0))
	case feature.KindFloat64:
		return int64(math.Float64bits(in.F64[k]))
	case feature.KindFloat32:
		return int64(math.Float32bits(in.F32[k]))
	}
	return in.Ints[k]
}
