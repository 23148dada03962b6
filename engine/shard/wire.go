package shard

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/recgo/recgo/internal/errs"
)

// The wire format of a leg's ID stage. Per (group index, table) block, in source order, then
// table order: the block's distinct IDs in the narrowest width the table's size allows; for a
// block its receiver pools (ownerpool.go), then each of the requester's bags' segment length
// (metaLenW bytes), each value's index into the block's IDs (the narrowest width for the block's
// ID count) and, when weighted, each value's float32 weight. The block metadata countStage
// exchanges first sizes every block on both sides, so the bytes need no framing.

// Block metadata: metaFields int64 per (group index, table), in countStage's message.
const (
	metaIDs   = iota // distinct IDs in the block
	metaFlags        // flagPooled | flagWeighted
	metaBags         // pooled: the requester's bags of the table (segment lengths sent)
	metaVals         // pooled: values (indices sent)
	metaLenW         // pooled: bytes per segment length
	metaTotal        // the distinct IDs of the table the sender's part of the world holds (room.go)
	metaFields
)

const (
	flagPooled   = 1
	flagWeighted = 2
	maxCount     = 1 << 40 // any count a peer announces above this is refused
)

// checkMeta validates one block's metadata from a peer.
func checkMeta(m []int64, poolable bool) error {
	for _, v := range m {
		if v < 0 || v > maxCount {
			return errs.Invalidf("exchange: a peer announced a block count of %d", v)
		}
	}
	switch m[metaFlags] {
	case 0:
		if m[metaBags] != 0 || m[metaVals] != 0 || m[metaLenW] != 0 {
			return errs.Invalidf("exchange: a peer announced bag structure for a block returned as rows")
		}
		return nil
	case flagPooled, flagPooled | flagWeighted:
	default:
		return errs.Invalidf("exchange: a peer announced block flags %d", m[metaFlags])
	}
	switch {
	case !poolable:
		return errs.Invalidf("exchange: a peer asked for pooling past its route's first leg")
	case m[metaIDs] == 0 || m[metaVals] == 0:
		return errs.Invalidf("exchange: a peer asked to pool a block of %d IDs and %d values", m[metaIDs], m[metaVals])
	case m[metaLenW] != 1 && m[metaLenW] != 2 && m[metaLenW] != 4 && m[metaLenW] != 8:
		return errs.Invalidf("exchange: a peer announced %d-byte segment lengths", m[metaLenW])
	}
	return nil
}

// widthFor is the narrowest of 1, 2, 4, 8 bytes that holds v.
func widthFor(v uint64) int {
	switch {
	case v <= math.MaxUint8:
		return 1
	case v <= math.MaxUint16:
		return 2
	case v <= math.MaxUint32:
		return 4
	}
	return 8
}

func putUint(b []byte, w int, v uint64) {
	switch w {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func getUint(b []byte, w int) uint64 {
	switch w {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

// appendUints appends the len(b)/w little-endian w-byte unsigned values of b to dst (one loop
// per width: the per-value width switch of getUint costs more than the load).
func appendUints(dst []int64, b []byte, w int) []int64 {
	switch w {
	case 1:
		for _, v := range b {
			dst = append(dst, int64(v))
		}
	case 2:
		for k := 0; k+2 <= len(b); k += 2 {
			dst = append(dst, int64(binary.LittleEndian.Uint16(b[k:])))
		}
	case 4:
		for k := 0; k+4 <= len(b); k += 4 {
			dst = append(dst, int64(binary.LittleEndian.Uint32(b[k:])))
		}
	default:
		for k := 0; k+8 <= len(b); k += 8 {
			dst = append(dst, int64(binary.LittleEndian.Uint64(b[k:])))
		}
	}
	return dst
}

// putUints writes vals[i] for each i in idx to b as little-endian w-byte unsigned values (one loop
// per width) and returns the bytes written.
func putUints(b []byte, w int, vals []int64, idx []int32) int {
	switch w {
	case 1:
		for k, i := range idx {
			b[k] = byte(vals[i])
		}
	case 2:
		for k, i := range idx {
			binary.LittleEndian.PutUint16(b[2*k:], uint16(vals[i]))
		}
	case 4:
		for k, i := range idx {
			binary.LittleEndian.PutUint32(b[4*k:], uint32(vals[i]))
		}
	default:
		for k, i := range idx {
			binary.LittleEndian.PutUint64(b[8*k:], uint64(vals[i]))
		}
	}
	return len(idx) * w
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// idWidth is the bytes per ID of table t on the wire (both sides know the table's size).
func (x *Exchange) idWidth(t int) int {
	if x.layouts[t].Dynamic() { // any int64, negative ones included
		return 8
	}
	return widthFor(uint64(x.layouts[t].Rows - 1))
}

// indexWidth is the bytes per value index of a pooled block of n distinct IDs.
func indexWidth(n int64) int { return widthFor(uint64(max(0, n-1))) }

// blockBytes is the size on the wire of one (group index, table) block with metadata m.
func (x *Exchange) blockBytes(m []int64, t int) int64 {
	n := m[metaIDs] * int64(x.idWidth(t))
	if m[metaFlags]&flagPooled != 0 {
		n += m[metaBags]*m[metaLenW] + m[metaVals]*int64(indexWidth(m[metaIDs]))
		if m[metaFlags]&flagWeighted != 0 {
			n += m[metaVals] * 4
		}
	}
	return n
}

// encode writes destination d's pooled payload (segment lengths, value indices, weights) of this
// table after its IDs, and returns the bytes written (0 for a block returned as rows).
func (p *PoolPlan) encode(dst []byte, d int, m []int64) int {
	if m[metaFlags]&flagPooled == 0 {
		return 0
	}
	at := 0
	lw, iw := int(m[metaLenW]), indexWidth(m[metaIDs])
	for _, n := range p.lens[d] {
		putUint(dst[at:], lw, uint64(n))
		at += lw
	}
	for _, i := range p.idx[d] {
		putUint(dst[at:], iw, uint64(i))
		at += iw
	}
	for _, w := range p.wts[d] {
		binary.LittleEndian.PutUint32(dst[at:], math.Float32bits(w))
		at += 4
	}
	return at
}

// decodeBlocks reads the IDs (and pooled blocks' bag structure) a leg received, checking every
// count and index against the announced metadata.
func (x *Exchange) decodeBlocks(lg *leg, recv []byte, poolable bool) error {
	T, S := len(x.layouts), lg.size
	lg.recvVec = append([]int64(nil), lg.recvCnt...)
	lg.selfBase, lg.selfPerm = make([]int, T), make([]int, T)
	for t := 0; t < T; t++ {
		for s := 0; s < lg.self; s++ {
			lg.selfBase[t] += int(lg.recvCnt[s*T+t])
			lg.selfPerm[t] += int(lg.sendCnt[s*T+t])
		}
	}
	lg.recv = make([][]int64, T)
	for t := range lg.recv {
		var n int64
		for s := 0; s < S; s++ {
			n += lg.recvCnt[s*T+t]
		}
		lg.recv[t] = make([]int64, 0, n)
	}
	p := 0
	short := func(n int64) error {
		if int64(len(recv)-p) < n {
			return errs.Invalidf("exchange: a peer's block is shorter than its metadata")
		}
		return nil
	}
	for s := 0; s < S; s++ {
		for t := 0; t < T; t++ {
			m := lg.recvMeta[(s*T+t)*metaFields:]
			n, w := m[metaIDs], x.idWidth(t)
			if err := short(x.blockBytes(m, t)); err != nil {
				return err
			}
			base := int64(len(lg.recv[t]))
			lg.recv[t] = appendUints(lg.recv[t], recv[p:p+int(n)*w], w)
			p += int(n) * w
			if m[metaFlags]&flagPooled == 0 {
				continue
			}
			if !poolable {
				return errs.Invalidf("exchange: a peer asked for pooling past its route's first leg")
			}
			if x.segs == nil {
				x.segs = make([]ownerSegs, T)
			}
			sg := &x.segs[t]
			if sg.bounds == nil {
				sg.bounds = []int64{0}
			}
			nv, lw, iw := m[metaVals], int(m[metaLenW]), indexWidth(n)
			var total, segs int64
			for b := int64(0); b < m[metaBags]; b++ {
				l := int64(getUint(recv[p:], lw))
				p += lw
				if l < 0 || l > nv-total {
					return errs.Invalidf("exchange: a peer's segment lengths exceed its %d values", nv)
				}
				if l > 0 {
					total += l
					sg.bounds = append(sg.bounds, sg.bounds[len(sg.bounds)-1]+l)
					segs++
				}
			}
			if total != nv {
				return errs.Invalidf("exchange: a peer's segment lengths sum to %d, not its %d values", total, nv)
			}
			sg.rows = slices.Grow(sg.rows, int(nv)) // nv is bounded by the block's bytes (checked above)
			for k := int64(0); k < nv; k++ {
				i := int64(getUint(recv[p:], iw))
				p += iw
				if i < 0 || i >= n {
					return errs.Invalidf("exchange: a peer's value index %d is outside its %d IDs", i, n)
				}
				sg.rows = append(sg.rows, base+i)
			}
			weighted := m[metaFlags]&flagWeighted != 0
			if weighted && sg.w == nil {
				sg.w = make([]float32, len(sg.rows)-int(nv), len(sg.rows))
				for j := range sg.w {
					sg.w[j] = 1
				}
			}
			for k := int64(0); k < nv && sg.w != nil; k++ {
				v := float32(1)
				if weighted {
					v = math.Float32frombits(binary.LittleEndian.Uint32(recv[p:]))
					p += 4
				}
				sg.w = append(sg.w, v)
			}
			lg.recvVec[s*T+t] = segs
		}
	}
	if p != len(recv) {
		return errs.Invalidf("exchange: received %d bytes, the blocks' metadata accounts for %d", len(recv), p)
	}
	return nil
}
