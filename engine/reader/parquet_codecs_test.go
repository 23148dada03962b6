package reader

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	brotlic "github.com/parquet-go/parquet-go/compress/brotli"
	gzipc "github.com/parquet-go/parquet-go/compress/gzip"
	snappyc "github.com/parquet-go/parquet-go/compress/snappy"
	zstdc "github.com/parquet-go/parquet-go/compress/zstd"
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

// decode decodes data as a page of codec declaring want bytes, with the codec the reader uses.
func decode(codec format.CompressionCodec, data []byte, want int) ([]byte, []byte, error) {
	dst := make([]byte, want)
	out, err := parquet.LookupCompressionCodec(codec).Decode(dst, data)
	return dst, out, err
}

// Every codec decodes a page into the page buffer it is given, declared at its size or larger;
// declared one byte short, or given bytes that are not the codec's data, it refuses the page.
func TestBoundedCodecs(t *testing.T) {
	p := payload(300_000)
	for name, e := range encoded(t, p) {
		t.Run(name, func(t *testing.T) {
			require.IsType(t, boundedCodec{}, parquet.LookupCompressionCodec(e.codec))
			for _, want := range []int{len(p), len(p) + 10} {
				dst, out, err := decode(e.codec, e.data, want)
				require.NoError(t, err, "declared %d", want)
				require.Equal(t, p, out, "declared %d", want)
				assert.Same(t, &dst[0], &out[0], "decoded in the page buffer")
			}
			_, _, err := decode(e.codec, e.data, len(p)-1)
			var pe *PageError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, len(p)-1, pe.Declared)
			assert.ErrorContains(t, err, "299999 bytes its header declares")
			if e.codec == format.Brotli {
				return // no checksum: altered brotli bytes may decode to other bytes
			}
			bad := bytes.Clone(e.data)
			for i := range bad {
				bad[i] ^= 0x5a
			}
			_, _, err = decode(e.codec, bad, len(p))
			assert.ErrorAs(t, err, &pe, "corrupt %s data", name)
		})
	}
}

// The codecs may decode on several goroutines at once (sources read in parallel): each decode
// gives its own page's bytes.
func TestBoundedCodecsConcurrently(t *testing.T) {
	pages := [][]byte{payload(70_000), payload(90_000)[1000:]}
	enc := []map[string]struct {
		codec format.CompressionCodec
		data  []byte
	}{encoded(t, pages[0]), encoded(t, pages[1])}
	var wg sync.WaitGroup
	fails := make([]error, 8)
	for w := range fails {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fails[w] = func() error {
				for i := range 30 {
					k := (w + i) % 2
					for name, e := range enc[k] {
						_, out, err := decode(e.codec, e.data, len(pages[k]))
						if err != nil {
							return err
						}
						if !bytes.Equal(out, pages[k]) {
							return fmt.Errorf("%s: page %d decoded wrong", name, k)
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for _, err := range fails {
		require.NoError(t, err)
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

// gzipBomb is 256 MiB of zeros, gzipped (about 1 MB).
func gzipBomb(t testing.TB) []byte {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	for range 256 {
		_, err = w.Write(zeros)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return b.Bytes()
}

// The pages that killed the process or took gigabytes are refused, in little time and memory: a
// frame declaring 40 GiB of content, 8 GiB of RLE blocks in 256 KB, a frame declaring a window past
// the limit, a snappy prefix of 4 GiB, 256 MiB of gzip, LZ4 garbage (parquet-go doubled its buffer
// without end).
func TestBoundedCodecsRefuseBombs(t *testing.T) {
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
		{"snappy length", format.Snappy, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0}, "decodes (SNAPPY) to more than the 5 bytes"},
		{"gzip", format.Gzip, gzipBomb(t), "decodes (GZIP) to more than the 5 bytes"},
		{"lz4 garbage", format.Lz4Raw, []byte{0xff, 0xff, 0xff, 0xff, 0xff}, "is not valid LZ4_RAW data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := heapInUse()
			_, _, err := decode(tc.codec, tc.data, 5)
			assert.ErrorContains(t, err, tc.want)
			assert.Less(t, heapInUse()-before, int64(64<<20), "heap grew")
		})
	}
}

// A zstd decoder whose stream was refused half-way went back to the pool holding its block decoder,
// and the next page with declared sizes waited for that for ever.
func TestZstdDecoderReusedAfterRefusedStream(t *testing.T) {
	p := payload(5000)
	single, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
	require.NoError(t, err)
	whole := single.EncodeAll(p, nil)
	done := make(chan error)
	go func() {
		for range 20 {
			if _, _, err := decode(format.Zstd, zstdBomb(3), 100); err == nil {
				done <- errors.New("the bomb was taken")
				return
			}
			if _, out, err := decode(format.Zstd, whole, len(p)); err != nil || !bytes.Equal(out, p) {
				done <- fmt.Errorf("the page after it: %v", err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("decoding hung")
	}
}

// A brotli decoder that refused a page went back to the pool with state its Reset does not clear, and
// the next page, not valid brotli data, then decoded without an error. The file holds four pages a
// FuzzBoundedCodecs run met in a row (the declared size, then the data in hex): the last was taken.
func TestBrotliDecoderNotReusedAfterARefusedPage(t *testing.T) {
	text, err := os.ReadFile("testdata/brotli_pages_after_refused.txt")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	require.Len(t, lines, 4)
	for i, line := range lines {
		f := strings.Fields(line)
		want, err := strconv.Atoi(f[0])
		require.NoError(t, err)
		data, err := hex.DecodeString(f[1])
		require.NoError(t, err)
		_, _, err = decode(format.Brotli, data, want)
		_, fresh := io.ReadAll(brotli.NewReader(bytes.NewReader(data)))
		require.Error(t, fresh, "page %d is not brotli data", i)
		require.Error(t, err, "page %d", i)
	}
}

// heapInUse is the bytes of heap in use now.
func heapInUse() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
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
			assert.ErrorContains(t, err, path+" row 0: cannot read rows: ")
			assert.ErrorContains(t, err, "the page decodes (ZSTD) to more than the 5 bytes its header declares")
		}
		require.NoError(t, src.Close())
	}
}

// A page of each codec whose header declares a byte less than its data decodes to is refused, and
// under SkipBad its row group alone is skipped; a page declaring more than maxPageBytes is refused
// before its group is read.
func TestParquetPageDecodingPastItsSizeIsRefused(t *testing.T) {
	parts := [][]pqInt{{{1}, {2}, {3}}, {{4}, {5}, {6}}}
	shorter := func(h *format.PageHeader) { h.UncompressedPageSize-- }
	huge := func(h *format.PageHeader) { h.UncompressedPageSize = maxPageBytes + 1 }
	for _, c := range []compress.Codec{&parquet.Snappy, &parquet.Gzip, &parquet.Brotli, &parquet.Zstd, &parquet.Lz4Raw} {
		for _, v := range []int{1, 2} {
			name := fmt.Sprintf("%s v%d", c, v)
			data := writeGroups(t, parts, parquet.Compression(c), parquet.DataPageVersion(v))
			for edit, want := range map[*func(*format.PageHeader)]string{
				&shorter: "bytes its header declares", &huge: "past the 1073741824 a page may hold",
			} {
				if v == 2 && edit == &shorter {
					continue // a v2 page's buffer also holds its levels: a byte short still fits
				}
				path := saveFile(t, "p.parquet", forgePage(t, data, 0, 0, *edit, nil))
				ids, _, err := readInts(t, path, intCols, false)
				assert.Empty(t, ids, name)
				assert.ErrorContains(t, err, want, name)
				assert.ErrorIs(t, err, errs.ErrIO, name)
				ids, skipped, err := readInts(t, path, intCols, true)
				assert.NoError(t, err, name)
				assert.Equal(t, []int64{4, 5, 6}, ids, name)
				assert.Equal(t, int64(3), skipped, name)
			}
		}
	}
}

// FuzzBoundedCodecs: any bytes under any codec are refused or decoded without a panic, within the
// declared size, to what parquet-go's own codec (LZ4_RAW: the lz4 package) decodes them to.
func FuzzBoundedCodecs(f *testing.F) {
	for _, e := range encoded(f, payload(2000)) {
		f.Add(uint8(e.codec), e.data, uint16(2000))
	}
	f.Add(uint8(format.Zstd), zstdBomb(3), uint16(100))
	library := map[format.CompressionCodec]compress.Codec{format.Snappy: &snappyc.Codec{}, format.Gzip: &gzipc.Codec{},
		format.Brotli: &brotlic.Codec{}, format.Zstd: &zstdc.Codec{}}
	f.Fuzz(func(t *testing.T, codec uint8, data []byte, want uint16) {
		cc := format.CompressionCodec(codec % 8)
		_, out, err := decode(cc, data, int(want))
		if err != nil || cc == format.Uncompressed {
			return
		}
		require.LessOrEqual(t, len(out), int(want))
		var ref []byte
		if lib, ok := library[cc]; ok {
			ref, err = lib.Decode(nil, data)
		} else if cc == format.Lz4Raw {
			ref = make([]byte, want)
			var n int
			n, err = lz4.UncompressBlock(data, ref)
			ref = ref[:max(n, 0)]
		} else {
			return // a codec parquet-go refuses by itself
		}
		require.NoError(t, err, "%s data decoded here, not by the library", cc)
		assert.Equal(t, string(ref), string(out), "%s", cc) // (nil and empty alike)
	})
}
