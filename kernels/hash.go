package kernels

import (
	"encoding/binary"
	"math/bits"
)

// recgo's feature hash is XXH64 (xxHash, 64-bit variant, Yann Collet; specification:
// https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md) with a caller-chosen 64-bit seed.
// It is part of recgo's stable contract: the same input and seed give the same hash on every
// platform and in every release.
//
//   - A byte string hashes as XXH64(bytes, seed).
//   - An int64 ID x hashes as XXH64 of its 8 bytes in little-endian order (two's complement), i.e.
//     XXH64(le64(x), seed), whatever the host's byte order.
//   - A crossed pair (a, b) hashes as XXH64(le64(a) || le64(b), seed), 16 bytes.
//
// The 64-bit result is returned as int64 with the same bits.
const (
	xxPrime1 uint64 = 0x9E3779B185EBCA87
	xxPrime2 uint64 = 0xC2B2AE3D27D4EB4F
	xxPrime3 uint64 = 0x165667B19E3779F9
	xxPrime4 uint64 = 0x85EBCA77C2B2AE63
	xxPrime5 uint64 = 0x27D4EB2F165667C5
)

func xxRound(acc, input uint64) uint64 {
	acc += input * xxPrime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * xxPrime1
}

// xxConverge folds XXH64's four lane accumulators into one (the step after the 32-byte stripes).
func xxConverge(v1, v2, v3, v4 uint64) uint64 {
	h := bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
	h = xxMergeRound(h, v1)
	h = xxMergeRound(h, v2)
	h = xxMergeRound(h, v3)
	return xxMergeRound(h, v4)
}

func xxMergeRound(acc, val uint64) uint64 {
	acc ^= xxRound(0, val)
	return acc*xxPrime1 + xxPrime4
}

func xxAvalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}

// XXH64 returns the XXH64 hash of b with the given seed.
func XXH64(b []byte, seed uint64) uint64 {
	n := len(b)
	var h uint64
	if n >= 32 {
		v1 := seed + xxPrime1 + xxPrime2
		v2 := seed + xxPrime2
		v3 := seed
		v4 := seed - xxPrime1
		for len(b) >= 32 {
			v1 = xxRound(v1, binary.LittleEndian.Uint64(b[0:8]))
			v2 = xxRound(v2, binary.LittleEndian.Uint64(b[8:16]))
			v3 = xxRound(v3, binary.LittleEndian.Uint64(b[16:24]))
			v4 = xxRound(v4, binary.LittleEndian.Uint64(b[24:32]))
			b = b[32:]
		}
		h = xxConverge(v1, v2, v3, v4)
	} else {
		h = seed + xxPrime5
	}
	h += uint64(n)
	for len(b) >= 8 {
		h ^= xxRound(0, binary.LittleEndian.Uint64(b[:8]))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
		b = b[8:]
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b[:4])) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	return xxAvalanche(h)
}

// Mix64 is the splitmix64 finalizer: a cheap, well-spread 64-bit mix for hash tables keyed by IDs
// (which are often sequential or strided). Not a stable hash format, unlike XXH64.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// HashID returns XXH64(le64(x), seed): the hash of one int64 ID, without building the byte slice.
func HashID(x int64, seed uint64) uint64 {
	h := seed + xxPrime5 + 8
	h ^= xxRound(0, uint64(x))
	h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	return xxAvalanche(h)
}

// HashPair returns XXH64(le64(a) || le64(b), seed): the hash of a crossed pair of IDs.
func HashPair(a, b int64, seed uint64) uint64 {
	h := seed + xxPrime5 + 16
	h ^= xxRound(0, uint64(a))
	h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	h ^= xxRound(0, uint64(b))
	h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	return xxAvalanche(h)
}

// HashIDsGeneric writes dst[i] = int64(HashID(src[i], seed)); dst and src may be the same slice.
func HashIDsGeneric(dst, src []int64, seed uint64) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = int64(HashID(x, seed))
	}
}

// HashBytes writes dst[i] = int64(XXH64(data[offs[i]:offs[i+1]], seed)); offs has len(dst)+1
// entries, monotone, within data.
func HashBytes(dst []int64, data []byte, offs []int64, seed uint64) {
	offs = offs[:len(dst)+1]
	for i := range dst {
		dst[i] = int64(XXH64(data[offs[i]:offs[i+1]], seed))
	}
}
