package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// inputDesc is one row of the descriptor array Python passes per batch (FeatureDescWords 8-byte
// words): the element kind (feature.Kind), the values (or, for byte strings, the bytes) and their
// count, the per-sample bag lengths (null: dense, one value per sample), the per-string lengths and
// the value count (for byte strings the string count), and the per-value float32 weights (null:
// unweighted; a non-null pointer with no values still marks the input weighted) and their count,
// which must be the value count.
type inputDesc struct {
	Kind     int64
	Data     unsafe.Pointer
	NData    int64
	Lengths  unsafe.Pointer
	ElemLens unsafe.Pointer
	NElems   int64
	Weights  unsafe.Pointer
	NWeights int64
}

// recgo_feature_new compiles a JSON feature spec (feature.Spec) into an engine handle.
//
//export recgo_feature_new
func recgo_feature_new(spec unsafe.Pointer, specLen C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		data, err := viewSlice[byte](spec, int64(specLen), "spec")
		if err != nil {
			return err
		}
		s, err := feature.ParseSpec(data)
		if err != nil {
			return err
		}
		eng, err := feature.Compile(s)
		if err != nil {
			return err
		}
		return putHandle(out, eng)
	})
}

// recgo_feature_info writes the engine's inputs, output keys and fused plan as JSON into buf
// (capacity buflen) and the JSON's length into needed; a short buffer receives nothing and the
// caller retries with needed bytes.
//
//export recgo_feature_info
func recgo_feature_info(h C.uintptr_t, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		eng, err := lookup[*feature.Engine](h, "feature engine")
		if err != nil {
			return err
		}
		return writeJSON(map[string]any{"inputs": eng.Inputs(), "outputs": eng.OutputKeys(), "plan": eng.Plan(),
			"max_values": eng.MaxValues()}, buf, buflen, needed)
	})
}

// recgo_feature_run transforms one batch of size batch. Its ninputs inputs (in the engine's input
// order) are described by descs (ninputs inputDesc rows); rows with kind 0 come from a
// KeyedJaggedTensor instead: kjtValues/kjtLengths (nkeys·batch lengths) and kjtWeights (nvalues
// float32, or null when unweighted; non-null even when there are no values), whose key k feeds input row keyRows[k] (-1: not read). It returns a result
// handle and the output's total value and length counts; recgo_feature_output lays the result out
// for Python and frees it.
//
//export recgo_feature_run
func recgo_feature_run(h C.uintptr_t, descs unsafe.Pointer, ninputs, batch C.int64_t,
	kjtValues unsafe.Pointer, nvalues C.int64_t, kjtWeights unsafe.Pointer, kjtLengths unsafe.Pointer, keyRows unsafe.Pointer, nkeys C.int64_t,
	outResult *C.uintptr_t, outValues, outLengths *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		eng, err := lookup[*feature.Engine](h, "feature engine")
		if err != nil {
			return err
		}
		rows, err := viewSlice[inputDesc](descs, int64(ninputs), "inputs")
		if err != nil {
			return err
		}
		names := eng.Inputs()
		if len(rows) != len(names) {
			return errs.Invalidf("feature batch: %d inputs given, the engine reads %d", len(rows), len(names))
		}
		if outValues == nil || outLengths == nil || outResult == nil {
			return errs.Invalidf("feature apply: null output pointer")
		}
		if batch < 0 || nkeys < 0 || (nkeys > 0 && int64(batch) > (1<<62)/int64(nkeys)) {
			return errs.Invalidf("feature batch: bad size %d with %d keys", int64(batch), int64(nkeys))
		}
		b := feature.Batch{Size: int(batch), Inputs: make([]feature.Input, len(rows))}
		filled := make([]bool, len(rows))
		if nkeys > 0 {
			if err := kjtInputs(&b, filled, kjtValues, int64(nvalues), kjtWeights, kjtLengths, keyRows, int64(nkeys)); err != nil {
				return err
			}
		}
		for i, d := range rows {
			if d.Kind == 0 {
				if !filled[i] {
					return errs.Invalidf("feature batch lacks input %q", names[i].Name)
				}
				continue
			}
			in, err := viewInput(d, int64(batch))
			if err != nil {
				return wrapInput(names[i].Name, err)
			}
			b.Inputs[i] = in
			filled[i] = true
		}
		res, err := eng.Apply(b)
		if err != nil {
			return err
		}
		*outValues = C.int64_t(res.NumValues())
		*outLengths = C.int64_t(len(res.Keys()) * res.Size())
		return putHandle(outResult, res)
	})
}

// kjtInputs views the keys of a KeyedJaggedTensor (values feature-major, optional weights alongside,
// lengths nkeys·B) as the int64 inputs keyRows names.
func kjtInputs(b *feature.Batch, filled []bool, valuesPtr unsafe.Pointer, nvalues int64, weightsPtr, lengthsPtr, keyRowsPtr unsafe.Pointer, nkeys int64) error {
	values, err := viewSlice[int64](valuesPtr, nvalues, "kjt values")
	if err != nil {
		return err
	}
	var weights []float32
	if weightsPtr != nil {
		if weights, err = viewSlice[float32](weightsPtr, nvalues, "kjt weights"); err != nil {
			return err
		}
		if weights == nil {
			weights = []float32{} // weighted, but no values
		}
	}
	lengths, err := viewGrid[int64](lengthsPtr, nkeys, int64(b.Size), "kjt lengths")
	if err != nil {
		return err
	}
	keyRows, err := viewSlice[int64](keyRowsPtr, nkeys, "kjt key rows")
	if err != nil {
		return err
	}
	B := b.Size
	start := int64(0)
	for k, row := range keyRows {
		lens := lengths[k*B : (k+1)*B : (k+1)*B]
		n, past := int64(0), false
		for _, l := range lens {
			if l < 0 {
				return errs.Invalidf("kjt lengths: negative length %d for key %d", l, k)
			}
			past = past || l > int64(len(values))-start-n // before adding: a sum past int64 would wrap around
			n += l
		}
		if past {
			return errs.Invalidf("kjt: lengths sum past the %d values", len(values))
		}
		if row >= 0 {
			if row >= int64(len(filled)) {
				return errs.Invalidf("kjt key %d maps to input %d of %d", k, row, len(filled))
			}
			if lens == nil {
				lens = []int64{}
			}
			b.Inputs[row] = feature.Input{Kind: feature.KindInt64, Ints: values[start : start+n : start+n], Lengths: lens}
			if weights != nil {
				b.Inputs[row].Weights = weights[start : start+n : start+n]
			}
			filled[row] = true
		}
		start += n
	}
	if start != int64(len(values)) {
		return errs.Invalidf("kjt: lengths sum to %d but there are %d values", start, len(values))
	}
	return nil
}

func wrapInput(name string, err error) error {
	return fmt.Errorf("input %q: %w", name, err)
}

// viewInput turns one descriptor into a feature.Input viewing the caller's memory.
func viewInput(d inputDesc, batch int64) (feature.Input, error) {
	in := feature.Input{Kind: feature.Kind(d.Kind)}
	var err error
	if d.Lengths != nil {
		if in.Lengths, err = viewSlice[int64](d.Lengths, batch, "lengths"); err != nil {
			return in, err
		}
		if in.Lengths == nil {
			in.Lengths = []int64{}
		}
	}
	switch in.Kind {
	case feature.KindInt64:
		in.Ints, err = viewSlice[int64](d.Data, d.NData, "values")
	case feature.KindFloat32:
		in.F32, err = viewSlice[float32](d.Data, d.NData, "values")
	case feature.KindFloat64:
		in.F64, err = viewSlice[float64](d.Data, d.NData, "values")
	case feature.KindBytes:
		if in.Bytes, err = viewSlice[byte](d.Data, d.NData, "bytes"); err == nil {
			in.ByteLens, err = viewSlice[int64](d.ElemLens, d.NElems, "string lengths")
			if in.ByteLens == nil {
				in.ByteLens = []int64{}
			}
		}
	default:
		return in, errs.Invalidf("unknown value kind %d", d.Kind)
	}
	if err == nil && d.Weights != nil {
		n, what := d.NData, "values"
		if in.Kind == feature.KindBytes {
			n, what = d.NElems, "strings"
		}
		if d.NWeights != n {
			return in, errs.Invalidf("weights: %d of them for %d %s (one weight per value)", d.NWeights, n, what)
		}
		in.Weights, err = viewSlice[float32](d.Weights, n, "weights")
		if in.Weights == nil {
			in.Weights = []float32{} // weighted, but no values
		}
	}
	return in, err
}

// recgo_feature_output turns a result into one off-heap KeyedJaggedTensor buffer that Python wraps
// without copying: it writes the values', lengths' and weights' addresses (weights: float32, as
// many as values, 0 when no output feature is weighted; also 0 when there are no values and
// *outWeighted tells the two apart) and the handle that owns them (free it when the tensors are
// gone), and frees the result handle, also on failure.
//
//export recgo_feature_output
func recgo_feature_output(rh C.uintptr_t, outValues, outLengths, outWeights *C.uintptr_t, outWeighted *C.int64_t, outHandle *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		res, err := lookup[*feature.Result](rh, "feature result")
		if err != nil {
			return err
		}
		deleteHandle(rh)
		out, err := res.Assemble()
		if err != nil {
			return err
		}
		*outValues, *outLengths, *outWeights, *outWeighted = 0, 0, 0, 0
		if out.Weights != nil {
			*outWeighted = 1
			if len(out.Weights) > 0 {
				*outWeights = C.uintptr_t(uintptr(unsafe.Pointer(&out.Weights[0])))
			}
		}
		if len(out.Values) > 0 {
			*outValues = C.uintptr_t(uintptr(unsafe.Pointer(&out.Values[0])))
		}
		if len(out.Lengths) > 0 {
			*outLengths = C.uintptr_t(uintptr(unsafe.Pointer(&out.Lengths[0])))
		}
		return putHandle(outHandle, out)
	})
}
