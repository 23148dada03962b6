package reader

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pierrec/lz4/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// payload is n bytes that compress somewhat (as page data does).
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/13)
	}
	return b
}

// encoded is p compressed by every codec a page may use, as writers produce it: zstd with and
// without a declared content size (Arrow's and parquet-go's), and parquet-go's own codecs.
func encoded(t testing.TB, p []byte) map[string]struct {
	codec format.CompressionCodec
	data  []byte
} {
	single, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true)) // declares its content size
	require.NoError(t, err)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, err = w.Write(p)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	var br bytes.Buffer
	bw := brotli.NewWriter(&br)
	_, err = bw.Write(p)
	require.NoError(t, err)
	require.NoError(t, bw.Close())
	lz := make([]byte, lz4.CompressBlockBound(len(p)))
	n, err := lz4.CompressBlock(p, lz, nil)
	require.NoError(t, err)
	pz, err := parquet.LookupCompressionCodec(format.Zstd).Encode(nil, p)
	require.NoError(t, err)
	return map[string]struct {
		codec format.CompressionCodec
		data  []byte
	}{
		"snappy":              {format.Snappy, snappy.Encode(nil, p)},
		"zstd, size declared": {format.Zstd, single.EncodeAll(p, nil)},
		"zstd, parquet-go's":  {format.Zstd, pz},
		"gzip":                {format.Gzip, gz.Bytes()},
		"brotli":              {format.Brotli, br.Bytes()},
		"lz4 raw":             {format.Lz4Raw, lz[:n]},
	}
}

// Every codec's page decoding to its declared size passes; declared one byte short it is refused,
// and so are bytes that are not the codec's data.
func TestPageDataCheck(t *testing.T) {
	p := payload(300_000)
	for name, e := range encoded(t, p) {
		t.Run(name, func(t *testing.T) {
			var c pageData
			defer c.close()
			require.NoError(t, c.check(e.codec, e.data, int64(len(p))))
			require.NoError(t, c.check(e.codec, e.data, int64(len(p))+10), "declared larger: parquet-go takes it")
			assert.ErrorContains(t, c.check(e.codec, e.data, int64(len(p))-1), "bytes its header declares")
			if e.codec == format.Brotli {
				return // no checksum: altered brotli bytes may decode to other bytes
			}
			bad := bytes.Clone(e.data)
			for i := range bad {
				bad[i] ^= 0x5a
			}
			assert.Error(t, c.check(e.codec, bad, int64(len(p))), "corrupt %s data", name)
		})
	}
}

// zstdBomb is a zstd frame of n RLE blocks of 128 KiB each (n·128 KiB decoded from a few bytes a
// block), declaring no content size.
func zstdBomb(n int) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58} // magic; no size, no checksum; window 1 MiB
	for i := range n {
		h := uint32(128<<10)<<3 | 1<<1 // RLE
		if i == n-1 {
			h |= 1
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16), 'x')
	}
	return b
}

// The pages that killed the process or took gigabytes are refused, in little time and memory: a
// frame declaring 40 GiB of content, 8 GiB of RLE blocks in 256 KB, a frame declaring a window past
// the limit, a snappy prefix of 4 GiB, LZ4 garbage (parquet-go doubled its buffer without end).
func TestPageDataRefusesBombs(t *testing.T) {
	fcs := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0} // single segment, an 8-byte content size
	fcs = binary.LittleEndian.AppendUint64(fcs, 40<<30)
	fcs = append(fcs, 0x0b, 0x00, 0x00, 'x') // last block: RLE of one byte
	window := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 31 << 3, 0x01, 0x00, 0x00}
	cases := []struct {
		name  string
		codec format.CompressionCodec
		data  []byte
		want  string
	}{
		{"zstd declaring 40 GiB", format.Zstd, fcs, "decodes (ZSTD) to more than the 5 bytes"},
		{"zstd RLE blocks", format.Zstd, zstdBomb(64 << 10), "decodes (ZSTD) to more than the 5 bytes"},
		{"zstd window", format.Zstd, window, "is not valid ZSTD data"},
		{"snappy length", format.Snappy, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0}, "SNAPPY"},
		{"lz4 garbage", format.Lz4Raw, []byte{0xff, 0xff, 0xff, 0xff, 0xff}, "is not valid LZ4_RAW data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c pageData
			defer c.close()
			assert.ErrorContains(t, c.check(tc.codec, tc.data, 5), tc.want)
		})
	}
	var c pageData
	assert.ErrorContains(t, c.check(format.Zstd, nil, maxPageBytes+1), "past the 1073741824 a page may hold")
}

// A 106-byte file whose one zstd page declares 5 bytes decoded and a 40 GiB frame ended the process
// with Go's fatal out-of-memory error; now its row group is refused (and skipped under SkipBad).
func TestParquetZstdBombIsRefused(t *testing.T) {
	data, err := hex.DecodeString("504152311500150a15242c1502150015061506000028b52ffdc038000000000a0000002b0000001502192c4806" +
		"736368656d61150200150c2500180173001602191c191c26081c150c19150019180173150c1602162c164626080000162c160200003b00000050415231")
	require.NoError(t, err)
	path := saveFile(t, "bomb.parquet", data)
	cols := []Column{{Name: "s", Role: RoleSparse}}
	for _, skip := range []bool{false, true} {
		src, err := NewParquet([]string{path}, ParquetOptions{Columns: cols, Options: Options{SkipBad: skip}})
		require.NoError(t, err)
		n, err := drain(src)
		assert.Zero(t, n)
		if skip {
			assert.NoError(t, err)
			assert.Equal(t, int64(1), src.Position().Skipped)
		} else {
			assert.ErrorIs(t, err, errs.ErrIO)
			assert.ErrorContains(t, err, "page 0 at byte 4 decodes (ZSTD) to more than the 5 bytes its header declares")
		}
		require.NoError(t, src.Close())
	}
}

// FuzzPageData: any bytes under any codec are refused or accepted without a panic, and accepted
// data decodes with parquet-go's own codec to at most the declared size.
func FuzzPageData(f *testing.F) {
	for _, e := range encoded(f, payload(2000)) {
		f.Add(uint8(e.codec), e.data, uint16(2000))
	}
	f.Add(uint8(format.Zstd), zstdBomb(3), uint16(100))
	f.Fuzz(func(t *testing.T, codec uint8, data []byte, want uint16) {
		cc := format.CompressionCodec(codec % 8)
		var c pageData
		defer c.close()
		if c.check(cc, data, int64(want)) != nil || cc == format.Uncompressed {
			return
		}
		out, err := parquet.LookupCompressionCodec(cc).Decode(nil, data)
		if err == nil {
			assert.LessOrEqual(t, len(out), int(want), "%s data accepted for %d bytes decodes to %d", cc, want, len(out))
		}
	})
}
