package files

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// What is not a regular file is refused before a byte is read (/dev/zero was read until memory ran
// out, a FIFO hung), and so is a file past the limit; a regular file within it reads whole.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	require.NoError(t, os.WriteFile(small, []byte("0123456789"), 0o600))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, tc := range []struct {
		name, path string
		limit      int64
		want       string // error text; "" reads
	}{
		{"regular", small, 10, ""},
		{"past the limit", small, 9, "more than the 9-byte limit"},
		{"device", "/dev/zero", 1 << 20, "/dev/zero is not a regular file (a pipe, socket or device)"},
		{"fifo", fifo, 1 << 20, "fifo is not a regular file"},
		{"directory", dir, 1 << 20, "is a directory, not a file"},
		{"missing", filepath.Join(dir, "none"), 1 << 20, "plan: open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := ReadRegular(tc.path, tc.limit, "plan")
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, "0123456789", string(data))
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.ErrorIs(t, err, errs.ErrIO)
		})
	}
}
