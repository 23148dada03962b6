package reader

import (
	"fmt"
	"io"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/stretchr/testify/require"
)

// pqBench is a row of a few columns, as click logs have.
type pqBench struct {
	Label float64 `parquet:"label"`
	D     float64 `parquet:"d"`
	A     int64   `parquet:"a"`
	B     int64   `parquet:"b"`
	S     []int64 `parquet:"s,list"`
}

// BenchmarkParquetRead reads 100,000 rows written by parquet-go under each codec (its pages decoded
// by the bounded codecs of parquet_codecs.go).
func BenchmarkParquetRead(b *testing.B) {
	rows := make([]pqBench, 100_000)
	for i := range rows {
		rows[i] = pqBench{Label: float64(i % 2), D: float64(i) / 7, A: int64(i * 31 % 1000), B: int64(i), S: []int64{int64(i), int64(i % 97), 3}}
	}
	cols := []Column{{Name: "label", Role: RoleLabel}, {Name: "d", Role: RoleDense}, {Name: "a", Role: RoleSparse},
		{Name: "b", Role: RoleSparse}, {Name: "s", Role: RoleSequence}}
	for _, codec := range []compress.Codec{&parquet.Uncompressed, &parquet.Snappy, &parquet.Zstd, &parquet.Gzip} {
		path := saveFile(b, "bench.parquet", writeGroups(b, [][]pqBench{rows[:50_000], rows[50_000:]}, parquet.Compression(codec)))
		b.Run(fmt.Sprint(codec), func(b *testing.B) {
			for b.Loop() {
				src, err := NewParquet([]string{path}, ParquetOptions{Columns: cols})
				require.NoError(b, err)
				var batch Batch
				for {
					if _, err := src.Read(&batch, 4096); err == io.EOF {
						break
					} else {
						require.NoError(b, err)
					}
				}
				require.NoError(b, src.Close())
			}
		})
	}
}
