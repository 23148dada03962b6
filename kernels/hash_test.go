package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Published XXH64 vectors (xxHash reference implementation as quoted by Boost.Hash2's tests and
// ClickHouse's xxHash64 tests).
func TestXXH64Vectors(t *testing.T) {
	cases := []struct {
		in   string
		seed uint64
		want uint64
	}{
		{"", 0, 0xef46db3751d8e999},
		{"The quick brown fox jumps over the lazy dog", 43, 0x9a11f5e9468d7425},
		{"test", 0, 5754696928334414137},
		{"test", 123, 3134990500624303823},
		{"ABC", 0, 0xe66ae7354fcfee98},
		{"xxhash", 0, 0x32dd38952c4bc720},
		{"foo", 0, 3728699739546630719},
		{"The quick brown fox jumps over the lazy dog", 0, 0x0b242d361fda71bc},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) { assert.Equal(t, c.want, XXH64([]byte(c.in), c.seed)) })
	}
}

func TestHashIDMatchesBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		x, y, seed := int64(r.Uint64()), int64(r.Uint64()), r.Uint64()
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], uint64(x))
		binary.LittleEndian.PutUint64(b[8:], uint64(y))
		assert.Equal(t, XXH64(b[:8], seed), HashID(x, seed))
		assert.Equal(t, XXH64(b[:], seed), HashPair(x, y, seed))
	}
}

func TestHashBytes(t *testing.T) {
	data := []byte("abcfoobar")
	offs := []int64{0, 3, 3, 9}
	dst := make([]int64, 3)
	HashBytes(dst, data, offs, 7)
	assert.Equal(t, []int64{int64(XXH64([]byte("abc"), 7)), int64(XXH64(nil, 7)), int64(XXH64([]byte("foobar"), 7))}, dst)
}
