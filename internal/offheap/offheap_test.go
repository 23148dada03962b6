package offheap

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllocZeroedAndWritable(t *testing.T) {
	cases := []struct {
		name string
		n    int
	}{{"empty", 0}, {"small", 12}, {"huge-page sized", 8 << 20}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, xs, err := Float32s(c.n)
			require.NoError(t, err)
			assert.Len(t, xs, c.n)
			for i := range xs {
				require.Zero(t, xs[i])
				xs[i] = float32(i)
			}
			if c.n > 0 {
				assert.Equal(t, float32(c.n-1), AsFloat32s(b)[c.n-1])
				assert.NotNil(t, b.Pointer())
			}
			require.NoError(t, b.Free())
			require.NoError(t, b.Free(), "second free is a no-op")
			assert.Nil(t, b.Pointer())
		})
	}
}

func TestNegativeSize(t *testing.T) {
	_, err := Alloc(-1)
	assert.Error(t, err)
	_, _, err = Float32s(-3)
	assert.Error(t, err)
}

// Mapped counts each mapping from Alloc and Reserve until its (first) Free; empty buffers count nothing.
func TestMappedCountsLiveMappings(t *testing.T) {
	base := Mapped()
	a, err := Alloc(3 * PageSize)
	require.NoError(t, err)
	r, err := Reserve(64 << 20)
	require.NoError(t, err)
	e, err := Alloc(0)
	require.NoError(t, err)
	assert.Equal(t, base+int64(3*PageSize)+64<<20, Mapped())
	require.NoError(t, r.Free())
	require.NoError(t, r.Free())
	assert.Equal(t, base+int64(3*PageSize), Mapped())
	require.NoError(t, a.Free())
	require.NoError(t, e.Free())
	assert.Equal(t, base, Mapped())
}
