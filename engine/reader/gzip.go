package reader

import (
	"bufio"
	"compress/gzip"
	"io"
)

// gzipMembers reads the members of a gzip file one after another, as gzip -d does, and ends at
// zero bytes after a member: archives written to tapes and block devices are padded with zeros,
// which Go's multistream reader takes for a bad header (Python's gzip and GNU gzip skip them).
type gzipMembers struct {
	src *bufio.Reader // a ByteReader, so gzip reads no further than each member's end
	gz  *gzip.Reader
}

func newGzipMembers(r io.Reader) (*gzipMembers, error) {
	src := bufio.NewReaderSize(r, 64<<10)
	gz, err := gzip.NewReader(src)
	if err != nil {
		return nil, err
	}
	gz.Multistream(false)
	return &gzipMembers{src: src, gz: gz}, nil
}

func (m *gzipMembers) Read(p []byte) (int, error) {
	for {
		n, err := m.gz.Read(p)
		if err != io.EOF {
			return n, err
		}
		more, err := m.next()
		if err != nil || !more {
			if err == nil {
				err = io.EOF
			}
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// next skips zero padding and starts the next member: false at the end of the file, gzip's
// header error for bytes that start no member.
func (m *gzipMembers) next() (bool, error) {
	for {
		b, err := m.src.ReadByte()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if b != 0 {
			_ = m.src.UnreadByte()
			break
		}
	}
	if err := m.gz.Reset(m.src); err != nil {
		return false, err
	}
	m.gz.Multistream(false)
	return true, nil
}

// Close closes the member being read.
func (m *gzipMembers) Close() error { return m.gz.Close() }
