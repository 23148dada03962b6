// Package offheap allocates long-lived numeric buffers outside the Go heap, with anonymous mmap.
//
// Table storage and optimizer state live here so that their addresses never move (the garbage
// collector does not know them) and Python can wrap them zero-copy as torch tensors. Large buffers
// are advised for transparent huge pages, which cuts TLB misses on random row gathers. Every
// buffer must be released with Free exactly once; the owner (a table) does that.
package offheap

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// hugePageThreshold is the size above which a buffer is advised for transparent huge pages.
const hugePageThreshold = 4 << 20

// mapped counts the bytes of address space mapped by Alloc and Reserve and not yet unmapped by Free.
var mapped atomic.Int64

// Mapped returns the bytes of address space the package holds mapped now (reserved buffers count
// whole, touched or not): for leak checks, since the garbage collector never sees this memory.
func Mapped() int64 { return mapped.Load() }

// newBuffer wraps a mapping of len(mem) bytes and counts it in Mapped.
func newBuffer(mem []byte) *Buffer {
	mapped.Add(int64(len(mem)))
	return &Buffer{mem: mem, size: len(mem)}
}

// Buffer is a zero-filled region of memory outside the Go heap.
type Buffer struct {
	mu   sync.Mutex
	mem  []byte
	size int
}

// Alloc returns a zero-filled buffer of n bytes (n may be 0).
func Alloc(n int) (*Buffer, error) {
	if n < 0 {
		return nil, errs.Invalidf("offheap: negative size %d", n)
	}
	if n == 0 {
		return &Buffer{}, nil
	}
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, errs.Capacityf("offheap: cannot map %d bytes: %v", n, err)
	}
	if n >= hugePageThreshold {
		// Advice only: a kernel without THP simply ignores it.
		_ = syscall.Madvise(mem, 14 /* MADV_HUGEPAGE */)
	}
	return newBuffer(mem), nil
}

// Len returns the size in bytes (0 after Free).
func (b *Buffer) Len() int { return len(b.mem) }

// Bytes returns the buffer's memory. It is invalid after Free.
func (b *Buffer) Bytes() []byte { return b.mem }

// Pointer returns the address of the first byte, or nil for an empty or freed buffer.
func (b *Buffer) Pointer() unsafe.Pointer {
	if len(b.mem) == 0 {
		return nil
	}
	return unsafe.Pointer(&b.mem[0])
}

// Free unmaps the buffer. A second Free is a no-op.
func (b *Buffer) Free() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mem == nil {
		return nil
	}
	err := syscall.Munmap(b.mem)
	if err == nil {
		mapped.Add(-int64(len(b.mem)))
	}
	b.mem = nil
	if err != nil {
		return fmt.Errorf("offheap: munmap: %w", err)
	}
	return nil
}

// Float32s returns a zero-filled buffer of n float32 values and the slice that views it.
func Float32s(n int) (*Buffer, []float32, error) {
	if n < 0 {
		return nil, nil, errs.Invalidf("offheap: negative length %d", n)
	}
	b, err := Alloc(n * 4)
	if err != nil {
		return nil, nil, err
	}
	return b, AsFloat32s(b), nil
}

// AsFloat32s views the buffer as float32 values (len = bytes/4).
func AsFloat32s(b *Buffer) []float32 {
	if len(b.mem) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b.mem[0])), len(b.mem)/4)
}

// AsInt64s views the buffer as int64 values (len = bytes/8).
func AsInt64s(b *Buffer) []int64 {
	if len(b.mem) == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&b.mem[0])), len(b.mem)/8)
}
