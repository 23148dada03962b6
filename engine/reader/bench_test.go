package reader

import (
	"io"
	"os"
	"testing"
)

// BenchmarkCriteoRead reads the Criteo sample in batches of 4096 (set RECGO_CRITEO to another file).
func BenchmarkCriteoRead(b *testing.B) {
	path := os.Getenv("RECGO_CRITEO")
	if path == "" {
		path = "/work/shared/data/criteo/criteo_dac_train_head10109.txt"
	}
	if _, err := os.Stat(path); err != nil {
		b.Skip("no Criteo file")
	}
	var batch Batch
	rows := 0
	for b.Loop() {
		src, err := NewCriteo([]string{path}, CriteoOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for {
			n, err := src.Read(&batch, 4096)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			rows += n
		}
		src.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
}
