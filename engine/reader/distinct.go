package reader

import (
	"os"

	"github.com/recgo/recgo/internal/errs"
)

// checkFiles refuses what no file reader opens: an empty file list, options that do not check, or a
// file listed twice (checkDistinct).
func checkFiles(paths []string, opt *Options) error {
	if len(paths) == 0 {
		return errs.Invalidf("reader: no files given")
	}
	if err := opt.check(); err != nil {
		return err
	}
	return checkDistinct(paths)
}

// checkDistinct refuses a file list that names one file twice, by any spelling: the same path
// twice, "a.csv" and "./a.csv", a symbolic or hard link beside its target, or a file that two glob
// patterns (expanded before the list reaches the reader) both match. Every reader reads each row
// once, so a file listed twice would be read twice, its rows counted twice in every epoch, without
// a word. A path that cannot be examined is left to the open, which names its problem.
func checkDistinct(paths []string) error {
	type entry struct {
		at int
		st os.FileInfo
	}
	bySize := map[int64][]entry{} // one file has one size: compare only within a size
	for i, p := range paths {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		for _, e := range bySize[st.Size()] {
			if os.SameFile(e.st, st) {
				return errs.Invalidf("reader: file %d (%q) and file %d (%q) of the %d listed are the same file, which "+
					"would be read twice: list each file once (glob patterns are expanded into the list)",
					e.at+1, paths[e.at], i+1, p, len(paths))
			}
		}
		bySize[st.Size()] = append(bySize[st.Size()], entry{i, st})
	}
	return nil
}
