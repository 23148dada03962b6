package kernels

// Element-wise and per-bag feature transforms (RecIS §3.1). Each works on a contiguous slice of one
// field; the feature engine cuts fields into tiles and calls these on the pieces.

// ModFloor writes dst[i] = src[i] mod n, the floor modulo (result in [0, n), like Python's % and
// torch.remainder), for n > 0. dst and src may be the same slice.
func ModFloor(dst, src []int64, n int64) {
	src = src[:len(dst)]
	for i, x := range src {
		r := x % n
		if r < 0 {
			r += n
		}
		dst[i] = r
	}
}

// BucketizeInt64 writes dst[i] = the number of boundaries b with b <= src[i] (bounds strictly
// increasing), i.e. torch.bucketize(src, bounds, right=True). dst and src may be the same slice.
func BucketizeInt64(dst, src, bounds []int64) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = int64(countLE(bounds, x))
	}
}

// BucketizeFloat64Generic writes dst[i] = the number of boundaries b with b <= src[i] (bounds
// strictly increasing, compared in float64). It returns the index of the first NaN in src, or -1;
// NaN elements get bucket 0.
func BucketizeFloat64Generic(dst []int64, src []float64, bounds []float64) int {
	src = src[:len(dst)]
	firstNaN := -1
	for i, x := range src {
		if x != x && firstNaN < 0 {
			firstNaN = i
		}
		dst[i] = int64(countLE(bounds, x))
	}
	return firstNaN
}

// BucketizeFloat32Generic is BucketizeFloat64Generic for float32 input (each value widened to
// float64, exactly, before the comparison).
func BucketizeFloat32Generic(dst []int64, src []float32, bounds []float64) int {
	src = src[:len(dst)]
	firstNaN := -1
	for i, x := range src {
		if x != x && firstNaN < 0 {
			firstNaN = i
		}
		dst[i] = int64(countLE(bounds, float64(x)))
	}
	return firstNaN
}

// countLE returns the number of elements of bounds (sorted ascending) that are <= x.
func countLE[T int64 | float64](bounds []T, x T) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bounds[mid] <= x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Elem is an element type a filter reads: int64 IDs, or float32/float64 values.
type Elem interface{ int64 | float32 | float64 }

// Bound is the type a filter compares in: int64 for ID fields, float64 for float fields (float32
// values widen to float64 exactly before the comparison).
type Bound interface{ int64 | float64 }

// Filter selects the elements a mask/filter transform keeps: those inside Set (sorted ascending) or
// inside [Lo, Hi), kept when Keep is true and dropped when it is false. A NaN is inside no set and
// no range.
type Filter[T Bound] struct {
	Set     []T
	Lo, Hi  T
	ByRange bool
	Keep    bool
}

// Keeps reports whether x survives the filter.
func (f *Filter[T]) Keeps(x T) bool {
	var in bool
	if f.ByRange {
		in = x >= f.Lo && x < f.Hi
	} else {
		in = containsSorted(f.Set, x)
	}
	return in == f.Keep
}

func containsSorted[T Bound](s []T, x T) bool {
	lo, hi := 0, len(s)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s[mid] < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo < len(s) && s[lo] == x
}

// FilterCount returns how many elements of src the filter keeps.
func FilterCount[S Elem, T Bound](src []S, f *Filter[T]) int {
	n := 0
	for _, x := range src {
		if f.Keeps(T(x)) {
			n++
		}
	}
	return n
}

// FilterCopy copies the kept elements of src, in order, to the front of dst and returns their
// count. When srcW is not nil it holds one weight per element of src, and the kept elements'
// weights go to the front of dstW alongside.
func FilterCopy[S Elem, T Bound](dst []S, dstW []float32, src []S, srcW []float32, f *Filter[T]) int {
	n := 0
	if srcW == nil {
		for _, x := range src {
			if f.Keeps(T(x)) {
				dst[n] = x
				n++
			}
		}
		return n
	}
	srcW = srcW[:len(src)]
	for i, x := range src {
		if f.Keeps(T(x)) {
			dst[n], dstW[n] = x, srcW[i]
			n++
		}
	}
	return n
}
