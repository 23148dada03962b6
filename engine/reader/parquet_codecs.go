package reader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	_ "unsafe" // go:linkname

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pierrec/lz4/v4"
)

// parquet-go's codecs decode a page into whatever memory the data asks for: a zstd frame's
// declared content size (a 106-byte file declaring 40 GiB ended the process with Go's fatal
// out-of-memory error), zstd frames without one and gzip or brotli streams, grown as they decode (a
// 33 KB page decoded to 1 GiB), a snappy length prefix, and LZ4_RAW, whose decoder doubles its
// buffer on any error (a corrupt page grew it until the process died). Its LZ4_RAW codec also
// misreads pages (v0.32, and its master as of 2026-08): it decodes into a new buffer when the page
// buffer it is given holds less than three times the compressed bytes, and the column reader then
// keeps the page buffer, never written, whenever the decoded length equals the page's declared size
// (the usual case), so a page that compresses less than 3x reads as the buffer's old bytes.
//
// The codecs here replace the library's for reading: each decodes into the page buffer the column
// reader gives it, sized for the bytes the page's header declares (at most maxPageBytes, see
// checkRowGroup), and refuses data that decodes to more, or is not valid data of its codec, without
// allocating past that buffer. Encoding is the library's. The library's table of codecs is not
// exported, hence the linkname.

//go:linkname parquetCodecs github.com/parquet-go/parquet-go.compressionCodecs
var parquetCodecs [format.Lz4Raw + 1]compress.Codec

func init() {
	for codec, decode := range map[format.CompressionCodec]func(dst, src []byte) (int, error){
		format.Snappy: snappyDecode, format.Gzip: gzipDecode, format.Brotli: brotliDecode,
		format.Zstd: zstdDecode, format.Lz4Raw: lz4Decode,
	} {
		// Only an entry the library itself fills is replaced: a version whose table is laid out
		// otherwise keeps its own codecs.
		if c := parquetCodecs[codec]; c != nil && c.CompressionCodec() == codec {
			parquetCodecs[codec] = boundedCodec{Codec: c, decode: decode}
		}
	}
}

const (
	// maxPageBytes is the most bytes a compressed page may declare it decodes to: parquet-go
	// allocates that much before it decodes the page (Arrow's pages are 1 MiB, parquet-go's 256 KiB).
	maxPageBytes = 1 << 30
	// zstdMaxWindow is the largest zstd window a page's frames may declare (the reference decoder's
	// default limit, 2^27): decoding holds a window's worth of history.
	zstdMaxWindow = 1 << 27
)

// errPageTooLong is what a decoder returns for data that decodes past the buffer it is given.
var errPageTooLong = errors.New("decodes past the buffer")

// PageError is a compressed page the reader refused: its data is not valid data of its codec, or
// decodes to more than the bytes its header declares.
type PageError struct {
	Codec    format.CompressionCodec
	Declared int   // the bytes the header declares
	Err      error // why the data is not valid; nil when it decodes to more than declared
}

// Error says why the page does not decode as its header declares (its codec, the declared size).
func (e *PageError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("the page decodes (%s) to more than the %d bytes its header declares", e.Codec, e.Declared)
	}
	if e.Codec == format.Lz4Raw { // LZ4 cannot tell a short buffer from bad data
		return fmt.Sprintf("the page is not valid %s data that decodes to at most the %d bytes its header declares", e.Codec, e.Declared)
	}
	return fmt.Sprintf("the page is not valid %s data: %v", e.Codec, e.Err)
}

// boundedCodec is one of the library's codecs (kept for encoding and its names) decoding with
// decode, which writes into dst's length and returns the bytes it wrote.
type boundedCodec struct {
	compress.Codec
	decode func(dst, src []byte) (int, error)
}

// Decode decodes src into dst's memory, refusing data that decodes past len(dst).
func (c boundedCodec) Decode(dst, src []byte) ([]byte, error) {
	n, err := c.decode(dst, src)
	switch {
	case err == errPageTooLong:
		return dst[:0], &PageError{Codec: c.CompressionCodec(), Declared: len(dst)}
	case err != nil:
		return dst[:0], &PageError{Codec: c.CompressionCodec(), Declared: len(dst), Err: err}
	}
	return dst[:n], nil
}

// readBounded reads r to its end into dst: the bytes read, or errPageTooLong when r holds more than
// len(dst). Only io.EOF ends the data (a decoder's io.ErrUnexpectedEOF is truncated data); reading
// past the last byte lets gzip check its checksum.
func readBounded(r io.Reader, dst []byte) (int, error) {
	var one [1]byte
	for n := 0; ; {
		buf := dst[n:]
		if len(buf) == 0 {
			buf = one[:]
		}
		m, err := r.Read(buf)
		switch {
		case m > 0 && len(dst) == n:
			return n, errPageTooLong
		case err == io.EOF:
			return n + m, nil
		case err != nil:
			return n + m, err
		}
		n += m
	}
}

func snappyDecode(dst, src []byte) (int, error) {
	n, err := snappy.DecodedLen(src)
	switch {
	case err != nil:
		return 0, err
	case n > len(dst):
		return 0, errPageTooLong
	}
	out, err := snappy.Decode(dst, src)
	return len(out), err
}

// gzipReaders and brotliReaders hold decoders between pages (the column readers of several
// sources may decode at once). A decoder goes back only after a page it decoded to its end: brotli's
// Reset leaves state behind from a stream stopped part-way (a page refused as too long), and the next
// page, not valid brotli data, was then decoded without an error (found by FuzzBoundedCodecs).
var gzipReaders, brotliReaders sync.Pool

func gzipDecode(dst, src []byte) (int, error) {
	return streamDecode(&gzipReaders, func() *gzip.Reader { return new(gzip.Reader) }, dst, src)
}

func brotliDecode(dst, src []byte) (int, error) {
	return streamDecode(&brotliReaders, func() *brotli.Reader { return brotli.NewReader(nil) }, dst, src)
}

// streamDecode decodes src into dst with a stream decoder from pool (fresh makes one), which goes back
// to the pool only after a page it decoded to its end.
func streamDecode[R interface {
	io.Reader
	Reset(io.Reader) error
}](pool *sync.Pool, fresh func() R, dst, src []byte) (int, error) {
	r, ok := pool.Get().(R)
	if !ok {
		r = fresh()
	}
	if err := r.Reset(bytes.NewReader(src)); err != nil {
		return 0, err
	}
	n, err := readBounded(r, dst)
	if err == nil {
		pool.Put(r)
	}
	return n, err
}

// zstdDecoders hold decoders between pages. One decoding at a time each, they start no goroutines.
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(maxPageBytes))
	if err != nil {
		panic(err) // the options are constants
	}
	return d
}}

// zstdDecode decodes whole frames that declare their sizes, within len(dst), in one call (the
// decoder refuses a frame whose blocks decode past its declared size), as Arrow and Spark write
// them; other data (frames without a size, as parquet-go writes them) streams into dst, memory
// within a window.
func zstdDecode(dst, src []byte) (int, error) {
	declared, whole := zstdDeclared(src)
	if declared > uint64(len(dst)) {
		return 0, errPageTooLong // (without decoding: the decoder would allocate it)
	}
	d := zstdDecoders.Get().(*zstd.Decoder)
	defer zstdDecoders.Put(d)
	if whole {
		out, err := d.DecodeAll(src, dst[:0])
		if err == nil && len(out) > len(dst) {
			err = errPageTooLong
		}
		return len(out), err
	}
	// A bytes.Reader, not a Buffer: the decoder decodes a Buffer whole, in memory it allocates.
	// A stream left unfinished holds the decoder's block decoder, which DecodeAll waits for (for
	// ever): Reset(nil) gives it back.
	defer d.Reset(nil)
	if err := d.Reset(bytes.NewReader(src)); err != nil {
		return 0, err
	}
	n, err := readBounded(d, dst)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrFrameSizeExceeded) {
		err = errPageTooLong
	}
	return n, err
}

// zstdMagic starts every zstd frame (RFC 8878 §3.1.1).
const zstdMagic = 0xFD2FB528

// zstdDeclared returns the content sizes data's zstd frames declare, added up (saturating) as far as
// they do, and whether data is whole frames that all declare theirs. The frames' blocks are stepped
// over by their headers, not decoded. Anything else (a frame that does not declare its size, a
// skippable frame, bytes that are not zstd) gives whole false.
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

// lz4Decode decodes the LZ4 block src into dst (LZ4 cannot tell a block that decodes past dst from
// a corrupt one: both are errors).
func lz4Decode(dst, src []byte) (int, error) {
	return lz4.UncompressBlock(src, dst)
}
