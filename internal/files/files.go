// Package files opens and reads the files the engine is given by path (reader inputs, dynamic-table
// checkpoints, plans, profiles), refusing what is not a regular file before reading it: /dev/zero
// would be read without end, a FIFO blocks the open until a writer comes, and neither has a size to
// check a limit against.
package files

import (
	"io"
	"io/fs"
	"os"

	"github.com/recgo/recgo/internal/errs"
)

// OpenRegular opens the regular file at path. A missing file, a directory, a pipe, socket or device
// is an errs.ErrIO naming it, prefixed with what (the caller's name for the file, "reader",
// "plan"); why says why such a file cannot do (for a pipe, socket or device).
func OpenRegular(path, what, why string) (*os.File, os.FileInfo, error) {
	st, err := os.Stat(path)
	if pe, ok := err.(*fs.PathError); ok {
		pe.Op = "open" // what the caller asked for ("stat" would read as a different step)
	}
	if err != nil {
		return nil, nil, errs.IOf("%s: %v", what, err)
	}
	if st.IsDir() {
		return nil, nil, errs.IOf("%s: %s is a directory, not a file", what, path)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, errs.IOf("%s: %s is not a regular file (a pipe, socket or device): %s", what, path, why)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, errs.IOf("%s: %v", what, err)
	}
	return f, st, nil
}

// ReadRegular reads the whole regular file at path (see OpenRegular), refusing one of more than
// limit bytes, by its size before reading and by what it holds while reading (a file that grows).
func ReadRegular(path string, limit int64, what string) ([]byte, error) {
	f, st, err := OpenRegular(path, what, "give the file itself")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooBig := func() error {
		return errs.IOf("%s: %s: more than the %d-byte limit", what, path, limit)
	}
	if st.Size() > limit {
		return nil, tooBig()
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, errs.IOf("%s: read %s: %v", what, path, err)
	}
	if int64(len(data)) > limit {
		return nil, tooBig()
	}
	return data, nil
}
