package offheap

import (
	"syscall"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// Reserve returns a buffer of n bytes whose address space is reserved but whose memory is committed
// lazily, page by page, as it is first written (anonymous mmap with MAP_NORESERVE). A table that
// may grow up to a bound reserves the bound once: its address never moves, and resident memory
// grows only with the pages it touches. Reads of untouched pages see zeros. Free it like any Buffer.
func Reserve(n int) (*Buffer, error) {
	if n < 0 {
		return nil, errs.Invalidf("offheap: negative size %d", n)
	}
	if n == 0 {
		return &Buffer{}, nil
	}
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, errs.Capacityf("offheap: cannot reserve %d bytes: %v", n, err)
	}
	return newBuffer(mem), nil
}

// PageSize is the operating system's page size, the unit in which reserved memory is committed.
var PageSize = syscall.Getpagesize()

// ResidentBytes returns how many bytes of the buffer's range [off, off+n) are resident in memory
// (counted in whole pages, with mincore), which is what a reserved buffer has actually committed.
func (b *Buffer) ResidentBytes(off, n int) (int, error) {
	if off < 0 || n < 0 || off+n > len(b.mem) {
		return 0, errs.Invalidf("offheap: range [%d, %d) outside a buffer of %d bytes", off, off+n, len(b.mem))
	}
	if n == 0 {
		return 0, nil
	}
	start := off / PageSize * PageSize
	end := off + n
	pages := (end - start + PageSize - 1) / PageSize
	vec := make([]byte, pages)
	_, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&b.mem[start])),
		uintptr(end-start), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return 0, errs.IOf("offheap: mincore: %v", e)
	}
	resident := 0
	for _, v := range vec {
		if v&1 != 0 {
			resident++
		}
	}
	return resident * PageSize, nil
}

// Discard returns the pages wholly inside [off, off+n) to the operating system (MADV_DONTNEED);
// they read as zeros afterwards and count as resident again only once written.
func (b *Buffer) Discard(off, n int) error {
	if off < 0 || n < 0 || off+n > len(b.mem) {
		return errs.Invalidf("offheap: range [%d, %d) outside a buffer of %d bytes", off, off+n, len(b.mem))
	}
	lo := (off + PageSize - 1) / PageSize * PageSize
	hi := (off + n) / PageSize * PageSize
	if hi <= lo {
		return nil
	}
	if err := syscall.Madvise(b.mem[lo:hi], syscall.MADV_DONTNEED); err != nil {
		return errs.IOf("offheap: madvise: %v", err)
	}
	return nil
}
