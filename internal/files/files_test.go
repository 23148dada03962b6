package files

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
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

// WriteAtomic replaces a file only when the write succeeds: a failed write (here: the source had
// nothing to write) leaves the old bytes and no temporary file; the write's own error comes back.
func TestWriteAtomic(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name  string
		write func(w io.Writer) error
		want  string
		err   error
	}{
		{"written", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, "new", nil},
		{"failed half-way", func(w io.Writer) error { _, _ = io.WriteString(w, "ne"); return boom }, "old", boom},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.tsv")
			require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
			err := WriteAtomic(path, "test", tc.write)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
			} else {
				assert.NoError(t, err)
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, left, 1, "only the file itself")
		})
	}
	err := WriteAtomic(filepath.Join(t.TempDir(), "no", "such", "folder"), "test", func(io.Writer) error { return nil })
	assert.ErrorIs(t, err, errs.ErrIO)
	assert.ErrorContains(t, err, "test: ")
}
