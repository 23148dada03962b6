package reader

import (
	"math"
	"strconv"
	"unsafe"
)

// parseInt parses a decimal int64 (optional sign), rejecting empty input, other bytes and overflow.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	if b[0] == '-' || b[0] == '+' {
		neg = b[0] == '-'
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var u uint64
	for _, c := range b {
		d := uint64(c - '0')
		if d > 9 || u > (math.MaxUint64-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// parseHex parses 1 to 16 hex digits as the bits of an int64 (Criteo's categorical fields).
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		u = u<<4 | uint64(d)
	}
	return int64(u), true
}

// parseFloat parses a decimal float (strconv syntax), rejecting NaN and infinities.
func parseFloat(b []byte) (float64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	if b[0] >= '0' && b[0] <= '9' && len(b) < 19 { // plain integers, the common case
		if v, ok := parseInt(b); ok {
			return float64(v), true
		}
	}
	v, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// toFloat32 narrows a label or dense value to float32; false when |x| exceeds float32's range
// (where the conversion would give ±Inf).
func toFloat32(x float64) (float32, bool) {
	if math.Abs(x) > math.MaxFloat32 {
		return 0, false
	}
	return float32(x), true
}

// log1pClip is DLRM's dense transform for Criteo's counts: log(1 + max(x, 0)).
func log1pClip(x float64) float32 { return float32(math.Log1p(max(x, 0))) }
