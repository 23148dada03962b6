package offheap

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReserveCommitsLazily(t *testing.T) {
	const size = 64 << 20 // far more than the test touches
	b, err := Reserve(size)
	require.NoError(t, err)
	defer b.Free()
	require.Equal(t, size, b.Len())

	res, err := b.ResidentBytes(0, size)
	require.NoError(t, err)
	assert.Zero(t, res, "nothing written yet")

	xs := AsFloat32s(b)
	assert.Zero(t, xs[len(xs)-1], "untouched pages read as zeros")
	for i := 0; i < 3*PageSize/4; i++ { // three pages
		xs[i] = 1
	}
	res, err = b.ResidentBytes(0, size)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res, 3*PageSize)
	assert.Less(t, res, 8<<20, "only the touched region (at most a huge page or few) is resident")

	require.NoError(t, b.Discard(0, 3*PageSize))
	res, err = b.ResidentBytes(0, 3*PageSize)
	require.NoError(t, err)
	assert.Zero(t, res)
	assert.Zero(t, xs[5], "discarded pages read as zeros")
}

func TestReserveRanges(t *testing.T) {
	cases := []struct {
		name    string
		off, n  int
		wantErr bool
	}{
		{"whole", 0, 4 * PageSize, false},
		{"empty", 10, 0, false},
		{"partial page", 1, 10, false},
		{"negative offset", -1, 4, true},
		{"past end", 4 * PageSize, 1, true},
	}
	b, err := Reserve(4 * PageSize)
	require.NoError(t, err)
	defer b.Free()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.ResidentBytes(c.off, c.n)
			assert.Equal(t, c.wantErr, err != nil)
			assert.Equal(t, c.wantErr, b.Discard(c.off, c.n) != nil)
		})
	}
	_, err = Reserve(-1)
	assert.Error(t, err)
	e, err := Reserve(0)
	require.NoError(t, err)
	assert.Zero(t, e.Len())
}
