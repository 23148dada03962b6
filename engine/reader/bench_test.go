package reader

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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

// BenchmarkCSVRead reads 50,000 generated CSV rows in batches of 4096: "sparse" has a label, 13
// dense columns and 26 int sparse columns (Criteo's shape, a tenth of the values empty), "mixed" a
// label, 2 dense, 8 int and 4 hex sparse columns, a sequence of 4 and a string column.
func BenchmarkCSVRead(b *testing.B) {
	for _, c := range []struct {
		name string
		cols []Column
		row  func(w *strings.Builder, i int)
	}{
		{"sparse", benchCols(13, 26, 0, false), func(w *strings.Builder, i int) {
			fmt.Fprintf(w, "%d", i%2)
			for j := range 13 {
				fmt.Fprintf(w, ",%d", (i*7+j)%1000)
			}
			for j := range 26 {
				if (i+j)%10 == 0 {
					w.WriteString(",")
				} else {
					fmt.Fprintf(w, ",%d", (i*31+j*977)%100_000)
				}
			}
		}},
		{"mixed", benchCols(2, 8, 4, true), func(w *strings.Builder, i int) {
			fmt.Fprintf(w, "%d,%d,%d", i%2, i%100, i%7)
			for j := range 8 {
				fmt.Fprintf(w, ",%d", (i*31+j*977)%100_000)
			}
			for j := range 4 {
				fmt.Fprintf(w, ",%x", (i*131+j*7919)%1_000_000)
			}
			fmt.Fprintf(w, ",%d|%d|%d|%d,tag%d", i, i%97, i%13, 3, i%50)
		}},
	} {
		var text strings.Builder
		text.WriteString(benchHeader(c.cols))
		for i := range 50_000 {
			c.row(&text, i)
			text.WriteByte('\n')
		}
		path := saveFile(b, "bench.csv", []byte(text.String()))
		b.Run(c.name, func(b *testing.B) {
			var batch Batch
			for b.Loop() {
				src, err := NewCSV([]string{path}, CSVOptions{Columns: c.cols, Header: true})
				require.NoError(b, err)
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

// benchCols declares a label, dense dense columns, ints int and hex hex sparse columns and, with
// extra, a sequence and a string column.
func benchCols(dense, ints, hex int, extra bool) []Column {
	cols := []Column{{Name: "label", Role: RoleLabel}}
	for j := range dense {
		cols = append(cols, Column{Name: fmt.Sprintf("d%d", j), Role: RoleDense})
	}
	for j := range ints {
		cols = append(cols, Column{Name: fmt.Sprintf("i%d", j), Role: RoleSparse})
	}
	for j := range hex {
		cols = append(cols, Column{Name: fmt.Sprintf("h%d", j), Role: RoleSparse, Type: "hex"})
	}
	if extra {
		cols = append(cols, Column{Name: "seq", Role: RoleSequence}, Column{Name: "tag", Role: RoleSparse, Type: "string"})
	}
	return cols
}

// benchHeader is the header line naming cols.
func benchHeader(cols []Column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ",") + "\n"
}
