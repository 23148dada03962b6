package reader

import (
	"errors"
	"fmt"
	"io"
)

// Parquet's footer and page headers are thrift compact-protocol structs. parquet-go decodes them
// trusting every declared size: a list header of 2^31−1 elements is a make of that many structs
// before one is read (a 40-byte file made it allocate 188 GB, a fatal error no recover() catches).
// thriftWalk checks such bytes first, allocating nothing: every declared size must fit the bytes
// that remain, nesting is bounded, and the memory the decoded value would take is added up and
// bounded too (a list element of one byte can decode to a struct of hundreds).

// thriftMaxDepth bounds struct and container nesting (Parquet's own structs nest about 8 deep).
const thriftMaxDepth = 64

// Compact-protocol type codes (field headers and container elements).
const (
	tcStop, tcTrue, tcFalse, tcI8, tcI16, tcI32, tcI64, tcDouble = 0, 1, 2, 3, 4, 5, 6, 7
	tcBinary, tcList, tcSet, tcMap, tcStruct, tcUUID             = 8, 9, 10, 11, 12, 13
)

// thriftScalarSize is the most memory one decoded non-struct container element takes (a []byte
// header; strings, integers and bools take less).
const thriftScalarSize = 24

// errThriftShort marks bytes that end inside the value.
var errThriftShort = errors.New("ends inside the value")

// byteSource is what thriftWalk reads: bytes, a way past many of them, and how many are left.
type byteSource interface {
	ReadByte() (byte, error)
	Skip(n int64) error
	Remaining() int64
}

// thriftPath names where a value sits: the field IDs from the walked struct down, one byte each
// (an ID outside 1..255 counts as 255), the innermost in the low byte.
type thriftPath uint64

func pathOf(ids ...int) thriftPath {
	p := thriftPath(0)
	for _, id := range ids {
		p = p.child(int16(id))
	}
	return p
}

func (p thriftPath) child(id int16) thriftPath {
	b := thriftPath(255)
	if id > 0 && id < 255 {
		b = thriftPath(id)
	}
	return p<<8 | b
}

// thriftWalk checks one compact-protocol struct read from src.
type thriftWalk struct {
	src byteSource
	// maxCost bounds cost: the memory the decoded struct would take, as elemSize counts it.
	maxCost int64
	cost    int64
	// elemSize is the memory one element of a list (or set) of structs at path takes once decoded;
	// nil or 0 is 1 KiB, more than any Parquet struct.
	elemSize func(path thriftPath) int64
	// onInt, when set, sees every integer and bool (1 or 0) field (not container elements) with its path.
	onInt func(path thriftPath, v int64)
}

// walk reads one struct from w.src, checking it.
func (w *thriftWalk) walk() error {
	return w.structure(0, 0)
}

func (w *thriftWalk) byte() (byte, error) {
	b, err := w.src.ReadByte()
	if err != nil {
		return 0, errThriftShort
	}
	return b, nil
}

func (w *thriftWalk) uvarint() (uint64, error) {
	var x uint64
	for shift := uint(0); shift < 70; shift += 7 {
		b, err := w.byte()
		if err != nil {
			return 0, err
		}
		if shift == 63 && b > 1 {
			return 0, errors.New("varint overflows 64 bits")
		}
		x |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("varint overflows 64 bits")
}

func (w *thriftWalk) addCost(n, each int64) error {
	if n > 0 && each > 0 && (n > (w.maxCost-w.cost)/each) {
		return fmt.Errorf("declares %d elements, past the %d bytes of memory allowed to decode it", n, w.maxCost)
	}
	w.cost += n * each
	return nil
}

func (w *thriftWalk) structure(path thriftPath, depth int) error {
	if depth >= thriftMaxDepth {
		return fmt.Errorf("nested deeper than %d levels", thriftMaxDepth)
	}
	id := int16(0)
	for {
		b, err := w.byte()
		if err != nil {
			return err
		}
		if b == tcStop {
			return nil
		}
		t := b & 0x0f
		if d := int16(b >> 4); d != 0 {
			id += d
		} else {
			u, err := w.uvarint()
			if err != nil {
				return err
			}
			v := int64(u>>1) ^ -int64(u&1)
			if v < -1<<15 || v >= 1<<15 {
				return fmt.Errorf("field ID %d is out of range", v)
			}
			id = int16(v)
		}
		if t == tcTrue || t == tcFalse { // a bool field's value is its type
			if w.onInt != nil {
				w.onInt(path.child(id), int64(2-t)) // true 1, false 0
			}
			continue
		}
		if err := w.value(t, path.child(id), depth+1, true); err != nil {
			return err
		}
	}
}

// minSize is the fewest bytes a container element of type t takes; 0 for no valid type.
func minSize(t byte) int64 {
	switch t {
	case tcTrue, tcFalse, tcI8, tcI16, tcI32, tcI64, tcBinary, tcList, tcSet, tcMap, tcStruct:
		return 1
	case tcDouble:
		return 8
	case tcUUID:
		return 16
	}
	return 0
}

// value walks one value of type t; field says it is a struct field (an element otherwise: a bool
// element takes one byte, a bool field none).
func (w *thriftWalk) value(t byte, path thriftPath, depth int, field bool) error {
	switch t {
	case tcTrue, tcFalse, tcI8:
		if !field || t == tcI8 {
			_, err := w.byte()
			return err
		}
		return nil
	case tcI16, tcI32, tcI64:
		u, err := w.uvarint()
		if err == nil && field && w.onInt != nil {
			w.onInt(path, int64(u>>1)^-int64(u&1))
		}
		return err
	case tcDouble:
		return w.skip(8)
	case tcUUID:
		return w.skip(16)
	case tcBinary:
		n, err := w.uvarint()
		if err != nil {
			return err
		}
		if n > uint64(w.src.Remaining()) {
			return fmt.Errorf("a string of %d bytes has %d left", n, w.src.Remaining())
		}
		if err := w.addCost(int64(n), 1); err != nil {
			return err
		}
		return w.skip(int64(n))
	case tcList, tcSet:
		return w.list(path, depth)
	case tcMap:
		return w.mapping(path, depth)
	case tcStruct:
		return w.structure(path, depth)
	}
	return fmt.Errorf("unknown type %d", t)
}

func (w *thriftWalk) skip(n int64) error {
	if w.src.Skip(n) != nil {
		return errThriftShort
	}
	return nil
}

func (w *thriftWalk) list(path thriftPath, depth int) error {
	if depth >= thriftMaxDepth {
		return fmt.Errorf("nested deeper than %d levels", thriftMaxDepth)
	}
	h, err := w.byte()
	if err != nil {
		return err
	}
	n, et := uint64(h>>4), h&0x0f
	if n == 15 {
		if n, err = w.uvarint(); err != nil {
			return err
		}
	}
	each := minSize(et)
	if each == 0 {
		return fmt.Errorf("a list of unknown element type %d", et)
	}
	if n > uint64(w.src.Remaining()/each) {
		return fmt.Errorf("a list of %d elements has %d bytes left", n, w.src.Remaining())
	}
	size := int64(thriftScalarSize)
	if et == tcStruct {
		size = 1024
		if w.elemSize != nil {
			if s := w.elemSize(path); s > 0 {
				size = s
			}
		}
	}
	if err := w.addCost(int64(n), size); err != nil {
		return err
	}
	for range n {
		if err := w.value(et, path, depth+1, false); err != nil {
			return err
		}
	}
	return nil
}

func (w *thriftWalk) mapping(path thriftPath, depth int) error {
	if depth >= thriftMaxDepth {
		return fmt.Errorf("nested deeper than %d levels", thriftMaxDepth)
	}
	n, err := w.uvarint()
	if err != nil || n == 0 {
		return err
	}
	kv, err := w.byte()
	if err != nil {
		return err
	}
	k, v := kv>>4, kv&0x0f
	each := minSize(k) + minSize(v)
	if minSize(k) == 0 || minSize(v) == 0 {
		return fmt.Errorf("a map of unknown key or value type %d, %d", k, v)
	}
	if n > uint64(w.src.Remaining()/each) {
		return fmt.Errorf("a map of %d entries has %d bytes left", n, w.src.Remaining())
	}
	if err := w.addCost(int64(n), 2*1024); err != nil {
		return err
	}
	for range n {
		if err := w.value(k, path, depth+1, false); err != nil {
			return err
		}
		if err := w.value(v, path, depth+1, false); err != nil {
			return err
		}
	}
	return nil
}

// sliceSource reads a byte slice.
type sliceSource struct {
	b   []byte
	off int
}

func (s *sliceSource) ReadByte() (byte, error) {
	if s.off >= len(s.b) {
		return 0, io.ErrUnexpectedEOF
	}
	s.off++
	return s.b[s.off-1], nil
}

func (s *sliceSource) Skip(n int64) error {
	if n < 0 || n > int64(len(s.b)-s.off) {
		return io.ErrUnexpectedEOF
	}
	s.off += int(n)
	return nil
}

func (s *sliceSource) Remaining() int64 { return int64(len(s.b) - s.off) }
