package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"io"
	"unsafe"

	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/files"
)

func openSourceSpec(spec unsafe.Pointer, specLen C.int64_t) (reader.Source, error) {
	data, err := viewSlice[byte](spec, int64(specLen), "spec")
	if err != nil {
		return nil, err
	}
	s, err := reader.ParseSpec(data)
	if err != nil {
		return nil, err
	}
	return reader.Open(s)
}

// recgo_source_info opens the source a JSON reader.Spec describes, writes its schema as JSON into
// buf (the writeJSON convention) and closes it: it validates a source without reading samples.
//
//export recgo_source_info
func recgo_source_info(spec unsafe.Pointer, specLen C.int64_t, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		src, err := openSourceSpec(spec, specLen)
		if err != nil {
			return err
		}
		defer src.Close()
		s := src.Schema()
		fields := make([]map[string]string, len(s.Fields))
		for i, f := range s.Fields {
			fields[i] = map[string]string{"name": f.Name, "kind": f.Kind.String()}
		}
		return writeJSON(map[string]any{"fields": fields, "dense": s.Dense, "has_label": s.HasLabel}, buf, buflen, needed)
	})
}

// recgo_source_fit reads up to maxRows samples of the source a JSON reader.Spec describes and
// writes the fitted reader.SyntheticConfig as JSON into buf (the writeJSON convention).
//
//export recgo_source_fit
func recgo_source_fit(spec unsafe.Pointer, specLen C.int64_t, maxRows C.int64_t, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if maxRows <= 0 {
			return errs.Invalidf("fit: max_rows must be positive, got %d", int64(maxRows))
		}
		src, err := openSourceSpec(spec, specLen)
		if err != nil {
			return err
		}
		defer src.Close()
		cfg, err := reader.FitSynthetic(src, int(min(int64(maxRows), 1<<40)))
		if err != nil {
			return err
		}
		return writeJSON(cfg, buf, buflen, needed)
	})
}

// recgo_source_write_criteo writes up to n samples of the source a JSON reader.Spec describes to
// the file at path as Criteo TSV (reader.WriteCriteo) and the number written into written.
//
//export recgo_source_write_criteo
func recgo_source_write_criteo(spec unsafe.Pointer, specLen C.int64_t, path *C.char, n C.int64_t, written *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		src, err := openSourceSpec(spec, specLen)
		if err != nil {
			return err
		}
		defer src.Close()
		return files.WriteAtomic(goString(path), "write criteo", func(f io.Writer) error {
			w, err := reader.WriteCriteo(f, src, int64(n))
			*written = C.int64_t(w)
			return err
		})
	})
}
