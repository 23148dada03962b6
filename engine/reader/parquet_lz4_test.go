package reader

import (
	"math/rand/v2"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type pqID struct {
	A int64 `parquet:"a"`
}

// TestParquetLZ4RawReadsItsValues: LZ4_RAW pages (pyarrow's compression="lz4") that compress less
// than 3x read as written. parquet-go's own codec left them as the page buffer's old bytes: random
// IDs, for a required column, without an error.
func TestParquetLZ4RawReadsItsValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var parts [][]pqID
	var want []int64
	for g := 0; g < 3; g++ {
		var part []pqID
		for i := 0; i < 1000; i++ {
			v := rng.Int64() >> (i % 40) // from incompressible to a ratio of about 2
			part = append(part, pqID{A: v})
			want = append(want, v)
		}
		parts = append(parts, part)
	}
	for name, opts := range map[string][]parquet.WriterOption{
		"v1": {parquet.DataPageVersion(1)}, "v2": {parquet.DataPageVersion(2)},
	} {
		opts = append(opts, parquet.Compression(&parquet.Lz4Raw))
		path := saveFile(t, "lz4.parquet", writeGroups(t, parts, opts...))
		ids, _, err := readInts(t, path, []Column{{Name: "a", Role: RoleSparse}}, false)
		require.NoError(t, err, name)
		require.Len(t, ids, len(want), name)
		wrong := 0
		for i := range ids {
			if ids[i] != want[i] {
				wrong++
			}
		}
		assert.Zero(t, wrong, "%s: IDs read wrong", name)
	}
}
