package reader

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// MaxShuffleWindow bounds a shuffled source's window (rows held in memory at once).
const MaxShuffleWindow = 1 << 24

// NewShuffled reads src in windows of window rows and hands each window's rows out in a random
// order drawn from seed, the window's number and rank (src's rank: ranks draw independent orders,
// so a data-parallel step does not pair neighbouring rows of the file): a shuffle buffer (as tf.data's and torchdata's),
// windowed so that a position stays small and exact. [Source.Position] names where the window
// began and how many of its rows were handed out; after Seek to it, the next Read reads that
// window again, as any window is read (bounded for that Read's batches, see fill), draws the same
// order and skips those rows. Rows never cross windows, so every row is delivered exactly once;
// shuffled ranks (src sharded by Options) keep their disjoint shares. The shuffle is within a
// window: give the window at least a few batches (a window of the whole data set is a full
// shuffle, at the memory of the whole data set).
func NewShuffled(src Source, window int, seed uint64, rank int) (Source, error) {
	if window <= 0 || window > MaxShuffleWindow {
		return nil, errs.Invalidf("reader: shuffle window %d outside [1, %d]", window, MaxShuffleWindow)
	}
	return &shuffled{src: src, window: window, seed: seed, rank: uint64(rank)}, nil
}

type shuffled struct {
	src    Source
	window int
	seed   uint64
	rank   uint64
	buf    Batch     // the current window's rows
	offs   [][]int64 // per input: the first value of each row of buf (Size+1 entries)
	boffs  [][]int64 // per byte-string input: the first byte of each row
	order  []int     // the window's order
	taken  int       // rows of the window handed out
	start  Position  // the source's position where the window began
	index  int64     // windows started
	eof    bool
	// skipAdj is what Position adds to src's count of skipped rows: a resumed source re-reads the
	// window it stood in, which counts that window's skipped rows again.
	skipAdj int64
	// limit and batch are the bound on a batch's fields (Batch.MaxValues) and its rows that the last
	// Read asked for: the window's fields are bounded at limit for each batch of its rows (see fill).
	limit int64
	batch int
	// resume, when not nil, is the position a Seek was given inside a window (Taken > 0): the next
	// fill reads that window again and skips the rows it had handed out (see resumeWindow).
	resume *Position
}

func (s *shuffled) Schema() Schema { return s.src.Schema() }

func (s *shuffled) Read(b *Batch, n int) (int, error) {
	b.Reset(s.Schema(), n)
	s.limit, s.batch = b.MaxValues, n
	for b.Size < n {
		if s.taken == s.buf.Size {
			if s.eof {
				break
			}
			if err := s.fill(); err == io.EOF {
				s.eof = true
				break
			} else if err != nil {
				return 0, err
			}
		}
		k := min(n-b.Size, s.buf.Size-s.taken)
		for _, r := range s.order[s.taken : s.taken+k] {
			s.taken++ // after an error too: the source stands after the failing row
			if err := s.appendRow(b, r); err != nil {
				return 0, err
			}
		}
	}
	if b.Size == 0 {
		return 0, io.EOF
	}
	return b.Size, nil
}

// fill reads the next window and draws its order. The window's fields may hold the bound of a
// batch's (Batch.MaxValues) for each batch of the last Read's rows the window holds, so that a window
// whose batches the bound takes is never refused. Only Read calls it: a window that Seek resumes
// inside is read again by the next Read, with that Read's bound (until session 43 Seek read it
// before any Read had given one, bounding it as if for batches of one row of the default bound).
func (s *shuffled) fill() error {
	s.start = s.src.Position()
	s.taken = 0
	lv, _ := (&Batch{MaxValues: s.limit}).limits()
	per := max(s.batch, 1)
	batches := int64((s.window + per - 1) / per)
	s.buf.MaxValues = lv * batches
	if lv > math.MaxInt64/batches {
		s.buf.MaxValues = math.MaxInt64
	}
	n, err := s.src.Read(&s.buf, s.window)
	if err != nil {
		s.buf.Size = 0
		if err == io.EOF && s.resume != nil {
			err = errs.Invalidf("reader: shuffled position %+v: the window it names is past the end of the data", *s.resume)
		} else if errors.Is(err, errs.ErrCapacity) {
			err = fmt.Errorf("reader: shuffle window of %d rows (its fields bounded at %d values for each batch of "+
				"%d rows it holds): %w", s.window, lv, per, err)
		}
		return err
	}
	s.index++
	r := rand.New(rand.NewPCG(s.seed, uint64(s.index)*0x9e3779b97f4a7c15^(s.rank+1)*0xbf58476d1ce4e5b9))
	s.order = s.order[:0]
	for i := range n {
		s.order = append(s.order, i)
	}
	for i := n - 1; i > 0; i-- { // Fisher–Yates, written out so the order does not depend on Go's Perm
		j := int(r.Uint64N(uint64(i + 1)))
		s.order[i], s.order[j] = s.order[j], s.order[i]
	}
	if len(s.offs) != len(s.buf.Inputs) {
		s.offs, s.boffs = make([][]int64, len(s.buf.Inputs)), make([][]int64, len(s.buf.Inputs))
	}
	for i := range s.buf.Inputs {
		in := &s.buf.Inputs[i]
		o := append(s.offs[i][:0], 0)
		for _, l := range in.Lengths {
			o = append(o, o[len(o)-1]+l)
		}
		s.offs[i] = o
		if in.Kind == feature.KindBytes {
			bo := append(s.boffs[i][:0], 0)
			for r := range n {
				var bytes int64
				for _, l := range in.ByteLens[o[r]:o[r+1]] {
					bytes += l
				}
				bo = append(bo, bo[r]+bytes)
			}
			s.boffs[i] = bo
		}
	}
	return s.resumeWindow()
}

// resumeWindow skips the rows of the window just read that a position Seek was given had handed
// out (none without one), after checking that the window still holds them and that the position's
// skipped count fits it. A window that fails the checks is dropped; a window past the end of the
// data fails every Read (fill).
func (s *shuffled) resumeWindow() error {
	p := s.resume
	if p == nil {
		return nil
	}
	s.resume = nil
	// p.Skipped counts the window's skipped rows, which reading it again counted too: the rest were
	// skipped before the window, at most the rows read before it (Check could not bound them).
	before := p.Skipped - s.src.Position().Skipped
	var err error
	switch {
	case p.Taken > int64(s.buf.Size):
		err = errs.Invalidf("reader: shuffled position %+v: its window has only %d rows", *p, s.buf.Size)
	case before < 0 || before > p.Global:
		err = errs.Invalidf("reader: shuffled position %+v: %d rows skipped, but its window skipped %d of its "+
			"rows and %d were read before it", *p, p.Skipped, s.src.Position().Skipped, p.Global)
	}
	if err != nil {
		s.buf.Size = 0 // none of its rows is handed out: the source stands after the window
		return err
	}
	s.taken = int(p.Taken)
	s.skipAdj = before // the window's own were counted in p.Skipped
	return nil
}

// appendRow appends row r of the window to b, unless a field of b cannot take its values.
func (s *shuffled) appendRow(b *Batch, r int) error {
	for i := range s.buf.Inputs {
		in, out := &s.buf.Inputs[i], &b.Inputs[i]
		k, nb := s.offs[i][r+1]-s.offs[i][r], int64(0)
		if in.Kind == feature.KindBytes {
			nb = s.boffs[i][r+1] - s.boffs[i][r]
		}
		if !b.fits(out, k, nb) {
			return b.overLimit("shuffled source", s.Schema().Fields[i].Name, out, k, nb)
		}
	}
	w := len(s.Schema().Dense)
	b.Labels = append(b.Labels, s.buf.Labels[r])
	b.Dense = append(b.Dense, s.buf.Dense[r*w:(r+1)*w]...)
	for i := range s.buf.Inputs {
		in, out := &s.buf.Inputs[i], &b.Inputs[i]
		lo, hi := s.offs[i][r], s.offs[i][r+1]
		out.Lengths = append(out.Lengths, in.Lengths[r])
		switch in.Kind {
		case feature.KindInt64:
			out.Ints = append(out.Ints, in.Ints[lo:hi]...)
		case feature.KindFloat32:
			out.F32 = append(out.F32, in.F32[lo:hi]...)
		case feature.KindFloat64:
			out.F64 = append(out.F64, in.F64[lo:hi]...)
		case feature.KindBytes:
			out.ByteLens = append(out.ByteLens, in.ByteLens[lo:hi]...)
			out.Bytes = append(out.Bytes, in.Bytes[s.boffs[i][r]:s.boffs[i][r+1]]...)
		}
	}
	b.Size++
	return nil
}

func (s *shuffled) Position() Position {
	p := s.src.Position()
	skipped := p.Skipped + s.skipAdj // the rows dropped reading so far (the window's included)
	switch {
	case s.resume != nil: // sought inside a window that no Read has read again: as sought
		p.Window, p.Taken = s.index, s.resume.Taken
	case s.taken < s.buf.Size: // inside a window: where it began, and how much of it is out
		p = s.start
		p.Window, p.Taken = s.index-1, int64(s.taken)
	default:
		p.Window = s.index
	}
	p.Shuffle, p.Seed, p.Skipped = s.window, s.seed, skipped
	return p
}

// FirstSkipped is the first row the shuffled source dropped under SkipBad, or nil.
func (s *shuffled) FirstSkipped() error {
	if r, ok := s.src.(SkipReporter); ok {
		return r.FirstSkipped()
	}
	return nil
}

// Seek continues from p: src is sought to where p's window began, and a window p stood inside
// is read again by the next Read (by fill, with that Read's bound, as every window is), which
// skips the rows p had handed out, and refuses p if the window no longer holds them.
func (s *shuffled) Seek(p Position) error {
	if p.Shuffle != s.window || p.Seed != s.seed {
		return errs.Invalidf("reader: the position was taken with shuffle window %d and seed %d, this source "+
			"shuffles with window %d and seed %d (another order: rows would repeat or be lost)", p.Shuffle, p.Seed,
			s.window, s.seed)
	}
	if p.Window < 0 || p.Taken < 0 || p.Taken > int64(s.window) {
		return errs.Invalidf("reader: shuffled position %+v is out of range", p)
	}
	at := p
	at.Shuffle, at.Seed, at.Window, at.Taken, at.Skipped = 0, 0, 0, 0, 0
	if err := s.src.Seek(at); err != nil {
		return err
	}
	s.index, s.taken, s.buf.Size, s.eof, s.skipAdj, s.resume = p.Window, 0, 0, false, p.Skipped, nil
	if p.Taken > 0 {
		s.resume = &p
	}
	return nil
}

func (s *shuffled) Close() error { return s.src.Close() }
