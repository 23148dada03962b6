package reader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pierrec/lz4/v4"
)

const (
	// maxPageBytes is the most bytes a compressed page may declare it decodes to: parquet-go
	// allocates that much before it decodes the page (Arrow's pages are 1 MiB, parquet-go's 256 KiB).
	maxPageBytes = 1 << 30
	// zstdMaxWindow is the largest zstd window a page's frames may declare (the reference decoder's
	// default limit, 2^27): decoding holds a window's worth of history.
	zstdMaxWindow = 1 << 27
)

// pageData checks a compressed page's data against the size its header declares it decodes to,
// before parquet-go decodes it. parquet-go's decoders size their output from the data or grow it as
// they go: a zstd frame's declared content size (a 106-byte file declaring 40 GiB ended the process
// with Go's fatal out-of-memory error), zstd frames without one and gzip or brotli streams (a 33 KB
// page decoded to 1 GiB), a snappy length prefix, and LZ4, whose decoder doubles its buffer on any
// error (a corrupt page grew it until the process died). A page checked here decodes to at most its
// declared size, which is at most maxPageBytes. It keeps a buffer between pages (LZ4's output).
type pageData struct {
	buf  []byte        // LZ4's output
	zstd *zstd.Decoder // for frames that do not declare their size (parquet-go writes such)
	gz   *gzip.Reader
	br   *brotli.Reader
}

// close releases the zstd decoder.
func (c *pageData) close() {
	if c.zstd != nil {
		c.zstd.Close()
	}
}

// check refuses data (a page's compressed bytes under codec) that is not valid data of the codec or
// decodes to more than want bytes. The cheap cases read headers only: snappy's length prefix, zstd
// frames that declare their content size; the others are decoded once, with bounded memory.
func (c *pageData) check(codec format.CompressionCodec, data []byte, want int64) error {
	if want < 0 || want > maxPageBytes {
		return fmt.Errorf("declares %d bytes decoded, past the %d a page may hold", want, maxPageBytes)
	}
	var n int64
	var err error
	switch codec {
	case format.Snappy:
		var m int
		m, err = snappy.DecodedLen(data)
		n = int64(m)
	case format.Zstd:
		declared, whole := zstdDeclared(data)
		switch {
		case declared > uint64(want):
			n = want + 1 // (refused below without decoding: the decoder would allocate it)
		case whole:
			return nil
		default:
			n, err = c.zstdDecoded(data, want)
		}
	case format.Gzip:
		if c.gz == nil {
			c.gz, err = gzip.NewReader(bytes.NewReader(data))
		} else {
			err = c.gz.Reset(bytes.NewReader(data))
		}
		if err == nil {
			n, err = io.Copy(io.Discard, io.LimitReader(c.gz, want+1))
		}
	case format.Brotli:
		if c.br == nil {
			c.br = brotli.NewReader(nil)
		}
		if err = c.br.Reset(bytes.NewReader(data)); err == nil {
			n, err = io.Copy(io.Discard, io.LimitReader(c.br, want+1))
		}
	case format.Lz4Raw:
		if int64(cap(c.buf)) < want+1 {
			c.buf = make([]byte, want+1)
		}
		var m int
		m, err = lz4.UncompressBlock(data, c.buf[:want+1])
		n = int64(m)
	default:
		return nil // uncompressed, or a codec parquet-go refuses by itself
	}
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrFrameSizeExceeded) || err == nil && n > want:
		return fmt.Errorf("decodes (%s) to more than the %d bytes its header declares", codec, want)
	case err != nil:
		return fmt.Errorf("is not valid %s data: %v", codec, err)
	}
	return nil
}

// zstdMagic starts every zstd frame (RFC 8878 §3.1.1).
const zstdMagic = 0xFD2FB528

// zstdDeclared returns the content sizes data's zstd frames declare, added up (saturating) as far as
// they do, and whether data is whole frames that all declare theirs: klauspost's decoder then
// allocates that much, and refuses a frame whose blocks decode past its declared size. The frames'
// blocks are stepped over by their headers, not decoded. Anything else (a frame that does not
// declare its size, a skippable frame, bytes that are not zstd) gives whole false, and the page is
// decoded to check it.
func zstdDeclared(data []byte) (total uint64, whole bool) {
	for len(data) > 0 {
		if len(data) < 5 || binary.LittleEndian.Uint32(data) != zstdMagic {
			return total, false
		}
		fhd := data[4] // frame header descriptor
		single, checksum := fhd&0x20 != 0, fhd&0x04 != 0
		pos := 5
		if !single {
			pos++ // the window descriptor
		}
		pos += [4]int{0, 1, 2, 4}[fhd&3] // the dictionary ID
		size := [4]int{0, 2, 4, 8}[fhd>>6]
		if size == 0 && single {
			size = 1
		}
		if size == 0 || len(data) < pos+size {
			return total, false
		}
		var fcs [8]byte
		copy(fcs[:], data[pos:pos+size])
		content := binary.LittleEndian.Uint64(fcs[:])
		if size == 2 {
			content += 256
		}
		pos += size
		if total += content; total < content {
			return math.MaxUint64, false
		}
		for last := false; !last; { // the blocks: 3-byte headers
			if len(data) < pos+3 {
				return total, false
			}
			h := uint32(data[pos]) | uint32(data[pos+1])<<8 | uint32(data[pos+2])<<16
			pos += 3
			last = h&1 != 0
			n := int(h >> 3)
			switch (h >> 1) & 3 {
			case 1: // RLE: one byte, repeated
				n = 1
			case 3: // reserved
				return total, false
			}
			if len(data) < pos+n {
				return total, false
			}
			pos += n
		}
		if checksum {
			pos += 4
		}
		if len(data) < pos {
			return total, false
		}
		data = data[pos:]
	}
	return total, true
}

// zstdDecoded streams zstd data through a decoder, stopping past want bytes, and returns how many it
// decoded: memory stays within a window (at most zstdMaxWindow), whatever the data decodes to.
func (c *pageData) zstdDecoded(data []byte, want int64) (int64, error) {
	if c.zstd == nil {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(maxPageBytes))
		if err != nil {
			return 0, err
		}
		c.zstd = d
	}
	if err := c.zstd.Reset(bytes.NewReader(data)); err != nil {
		return 0, err
	}
	return io.Copy(io.Discard, io.LimitReader(c.zstd, want+1))
}
