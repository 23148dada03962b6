// Package files opens and reads the files the engine is given by path (reader inputs, dynamic-table
// checkpoints, plans, profiles), refusing what is not a regular file before reading it: /dev/zero
// would be read without end, a FIFO blocks the open until a writer comes, and neither has a size to
// check a limit against. It writes the files the engine saves atomically.
package files

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

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

// WriteAtomic writes the file at path with write, atomically: into a temporary file in the same
// folder, fsynced, then renamed over path, so a failed or interrupted write leaves what was at path
// as it was (a source that cannot be written no longer empties the file it was to replace). The
// temporary file is named as recgo's Python checkpoints name theirs (.name.host-pid.*.tmp), so that
// a later save can tell a killed writer's file from a live one's and remove it; it is removed when
// the write fails. Errors are errs.ErrIO prefixed with what; an error write returns is kept as is.
func WriteAtomic(path, what string, write func(w io.Writer) error) error {
	host, _ := os.Hostname()
	f, err := os.CreateTemp(filepath.Dir(path), fmt.Sprintf(".%s.%s-%d.*.tmp", filepath.Base(path), host, os.Getpid()))
	if err != nil {
		return errs.IOf("%s: %v", what, err)
	}
	tmp := f.Name()
	err = write(f)
	werr := err
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		if err != nil {
			return err
		}
		return errs.IOf("%s: %v", what, werr)
	}
	return nil
}
