package reader

import (
	"errors"
	_ "unsafe" // go:linkname

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pierrec/lz4/v4"
)

// parquet-go (v0.32, and its master as of 2026-08) misreads LZ4_RAW pages, the codec pyarrow
// writes for compression="lz4": its codec decodes into a new buffer when the page buffer it is
// given holds less than three times the compressed bytes, and the column reader then keeps the
// page buffer, never written, whenever the decoded length equals the page's declared size (the
// usual case). A page that compresses less than 3x thus reads as whatever bytes the buffer held
// before: garbage IDs without an error for a required column, a confusing decode error otherwise.
// lz4RawCodec decodes into the buffer it is given, and replaces the library's entry for LZ4_RAW
// (its table of codecs is not exported, hence the linkname).

//go:linkname parquetCodecs github.com/parquet-go/parquet-go.compressionCodecs
var parquetCodecs [format.Lz4Raw + 1]compress.Codec

func init() {
	// Only the entry the library itself fills for LZ4_RAW is replaced: a version whose table is
	// laid out otherwise keeps its own codec.
	if parquet.LookupCompressionCodec(format.Lz4Raw) == compress.Codec(&parquet.Lz4Raw) {
		parquetCodecs[format.Lz4Raw] = lz4RawCodec{}
	}
}

// lz4MaxRatio bounds what one LZ4 byte can expand to (a match token extends a match by at most
// 255 bytes per byte): a block that does not fit 255x its size plus a little is corrupt, so
// decoding gives up there rather than doubling its buffer for ever.
const lz4MaxRatio = 255

// lz4RawCodec is the LZ4_RAW codec decoding in place (see above); encoding is the library's.
type lz4RawCodec struct{}

func (lz4RawCodec) String() string                            { return parquet.Lz4Raw.String() }
func (lz4RawCodec) CompressionCodec() format.CompressionCodec { return format.Lz4Raw }
func (lz4RawCodec) Encode(dst, src []byte) ([]byte, error)    { return parquet.Lz4Raw.Encode(dst, src) }
func (lz4RawCodec) Decode(dst, src []byte) ([]byte, error)    { return lz4Decode(dst, src) }

// lz4Decode decodes the LZ4 block src into dst's memory (the page buffer, sized for the page's
// declared bytes), growing past it only for a block that decodes to more than that.
func lz4Decode(dst, src []byte) ([]byte, error) {
	dst = dst[:cap(dst)]
	limit := lz4MaxRatio*len(src) + 64
	for {
		n, err := lz4.UncompressBlock(src, dst)
		if err == nil {
			return dst[:n], nil
		}
		if len(dst) >= limit {
			return dst[:0], errors.New("corrupt LZ4_RAW block: " + err.Error())
		}
		dst = make([]byte, min(max(2*len(dst), 4096), limit))
	}
}
