package dynamic

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/offheap"
)

// Policy chooses which rows an eviction pass frees when the table is full.
type Policy int

const (
	// LRU evicts the rows seen least recently (stalest first).
	LRU Policy = iota
	// LFU evicts the rows seen in the fewest batches (ties: stalest first).
	LFU
)

// String returns "lru" or "lfu".
func (p Policy) String() string {
	switch p {
	case LRU:
		return "lru"
	case LFU:
		return "lfu"
	default:
		return fmt.Sprintf("Policy(%d)", int(p))
	}
}

// ParsePolicy parses "lru" or "lfu".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "lru":
		return LRU, nil
	case "lfu":
		return LFU, nil
	default:
		return 0, errs.Invalidf("eviction policy %q: expected \"lru\" or \"lfu\"", s)
	}
}

// MaxCount is the largest MinCount (the sketch's counters are 8 bits).
const MaxCount = 255

// MaxRowBound is the largest row bound a table accepts (rows are int32 inside the map).
const MaxRowBound = math.MaxInt32 - 1

// MaxSketchBytes bounds the admission sketch of a table whose SketchWidth is set: its counters may
// take at most MaxSketchBytes, or the default sketch of its row bound when that is larger (the
// default grows with the bound, as the table's own memory does). The sketch is allocated when the
// table is built: a SketchWidth past the bound fails with an errs.ErrCapacity error first.
const MaxSketchBytes = 1 << 30

// maxSketchWidth is the largest SketchWidth any table accepts: the default width of the largest
// row bound (widths are rounded up to powers of two, which must not overflow).
const maxSketchWidth = 1 << 31

// Config describes a dynamic table. The zero values of the optional fields pick the defaults noted.
type Config struct {
	Name       string // table name, used in error messages
	Dim        int    // embedding dimension, > 0
	Stride     int    // floats per weight row, >= Dim (0: Dim)
	StateWidth int    // optimizer-state floats per row, >= 0 (see embedding.OptimizerConfig)
	MaxRows    int    // row bound: the most IDs the table holds at once, > 0 (or 0 with MaxBytes)
	// MaxBytes caps the memory the table takes when full (weights, optimizer state, per-row metadata,
	// the ID map, the admission sketch and the eviction scratch; see footprint): the row bound
	// becomes the most rows that fit, and at most MaxRows when both are set (0: no cap).
	MaxBytes   int
	MinCount   int     // batches an ID must be seen in before it gets a row (0 or 1: at once)
	Policy     Policy  // which rows a full table evicts
	MaxAge     int     // evict rows unseen for more than MaxAge steps (0: only when full)
	EvictFrac  float64 // fraction of MaxRows one eviction pass frees, in (0, 1] (0: 1/32)
	InitLow    float32 // new rows' weights are uniform in [InitLow, InitHigh)
	InitHigh   float32
	InitAuto   bool      // ignore InitLow/InitHigh and use ±√(1/row bound), TorchRec's default
	Seed       uint64    // seeds the per-ID init generator and the hashes
	Default    []float32 // eval-mode vector for unseen IDs (nil: they resolve to -1, zeros)
	ManualStep bool      // the clock moves only with Advance, not with each training Resolve
	// SketchWidth is the total number of counters per sketch row across shards (0: MaxRows rounded up
	// to a power of two, at least 4096). Only used when MinCount > 1.
	SketchWidth int
}

// invalid is an input error about c, naming its table when it has one (a builder's config has none
// until it builds a table).
func (c Config) invalid(format string, args ...any) error {
	if c.Name == "" {
		return errs.Invalidf("dynamic table: "+format, args...)
	}
	return errs.Invalidf("dynamic table %q: "+format, append([]any{c.Name}, args...)...)
}

// checkFields validates each field of c on its own (what needs the row layout is withDefaults').
func (c Config) checkFields() error {
	switch {
	case c.Dim <= 0:
		return c.invalid("embedding dim must be positive, got %d", c.Dim)
	case c.Stride < 0 || (c.Stride != 0 && c.Stride < c.Dim):
		return c.invalid("stride %d must be at least the dim %d", c.Stride, c.Dim)
	case c.StateWidth < 0:
		return c.invalid("optimizer state width must be non-negative, got %d", c.StateWidth)
	case c.MaxRows < 0 || (c.MaxRows == 0 && c.MaxBytes == 0):
		return c.invalid("row bound (num_embeddings) must be positive, got %d", c.MaxRows)
	case c.MaxBytes < 0:
		return c.invalid("memory bound must be non-negative, got %d bytes", c.MaxBytes)
	case c.MaxRows > MaxRowBound:
		return c.invalid("row bound %d exceeds the maximum %d", c.MaxRows, MaxRowBound)
	case c.MinCount < 0 || c.MinCount > MaxCount:
		return c.invalid("min_count must be in [0, %d], got %d", MaxCount, c.MinCount)
	case c.Policy != LRU && c.Policy != LFU:
		return c.invalid("unknown eviction policy %d", int(c.Policy))
	case c.MaxAge < 0:
		return c.invalid("max_age must be non-negative, got %d", c.MaxAge)
	case math.IsNaN(c.EvictFrac) || c.EvictFrac < 0 || c.EvictFrac > 1:
		return c.invalid("evict_fraction must be in (0, 1] (0: the default 1/32), got %v", c.EvictFrac)
	case c.SketchWidth < 0 || c.SketchWidth > maxSketchWidth:
		return c.invalid("sketch width must be in [0, %d], got %d", maxSketchWidth, c.SketchWidth)
	case isBad(c.InitLow) || isBad(c.InitHigh) || c.InitLow > c.InitHigh:
		return c.invalid("init range [%v, %v) is not a finite, ordered interval", c.InitLow, c.InitHigh)
	case c.Default != nil && len(c.Default) != c.Dim:
		return c.invalid("default vector has %d values, expected dim %d", len(c.Default), c.Dim)
	}
	for i, v := range c.Default {
		if isBad(v) {
			return c.invalid("default vector value %d is %v", i, v)
		}
	}
	return nil
}

// withDefaults validates c and fills its defaults.
func (c Config) withDefaults() (Config, error) {
	if err := c.checkFields(); err != nil {
		return c, err
	}
	if c.Stride == 0 {
		c.Stride = c.Dim
	}
	if c.MaxBytes > 0 {
		rows := c.rowsFitting(c.MaxBytes)
		if rows < 1 {
			return c, c.invalid("memory bound of %d bytes holds no row: the smallest table of dim %d (one row, its "+
				"optimizer state and the ID map, in whole pages) takes %d bytes", c.MaxBytes, c.Dim, c.footprint(1))
		}
		if c.MaxRows == 0 || rows < c.MaxRows {
			c.MaxRows = rows
		}
	}
	if c.InitAuto {
		scale := float32(math.Sqrt(1 / float64(c.MaxRows)))
		c.InitLow, c.InitHigh = -scale, scale
	}
	if c.MinCount == 0 {
		c.MinCount = 1
	}
	if c.EvictFrac == 0 {
		c.EvictFrac = 1.0 / 32
	}
	asked := c.SketchWidth
	if c.SketchWidth == 0 {
		c.SketchWidth = defaultSketchWidth(c.MaxRows)
	}
	c.SketchWidth = max(numShards*minSketchShardWidth, nextPow2(c.SketchWidth))
	if err := c.checkSketch(asked); err != nil {
		return c, err
	}
	if c.Default != nil {
		c.Default = append([]float32(nil), c.Default...)
	}
	return c, nil
}

// defaultSketchWidth is the sketch width of a table of row bound rows that sets none.
func defaultSketchWidth(rows int) int { return max(4096, nextPow2(rows)) }

// checkSketch refuses, before it is allocated, an admission sketch (a MinCount past one) whose counters
// would take more than MaxSketchBytes and more than the default sketch of the row bound; asked is
// the SketchWidth given, c's the width it was rounded to.
func (c Config) checkSketch(asked int) error {
	if c.MinCount <= 1 {
		return nil
	}
	bytes := sketchDepth * c.SketchWidth
	limit := max(MaxSketchBytes, sketchDepth*defaultSketchWidth(c.MaxRows))
	if bytes <= limit {
		return nil
	}
	format := "sketch_width %d (%d counters a row once rounded up to a power of two) makes an admission sketch " +
		"of %d bytes (%d rows of one-byte counters), past the limit of %d bytes (the larger of %d bytes and the " +
		"default sketch of the row bound %d); lower sketch_width"
	args := []any{asked, c.SketchWidth, bytes, sketchDepth, limit, MaxSketchBytes, c.MaxRows}
	if c.Name == "" {
		return errs.Capacityf("dynamic table: "+format, args...)
	}
	return errs.Capacityf("dynamic table %q: "+format, append([]any{c.Name}, args...)...)
}

func isBad(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }

// nextPow2 returns the smallest power of two >= n (1 for n <= 1).
func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// evictBatch is the number of rows one eviction pass tries to free.
func (c *Config) evictBatch() int {
	return max(1, int(math.Ceil(c.EvictFrac*float64(c.MaxRows))))
}

// storageRows is the number of weight rows the storage holds: the bound plus the default row.
func (c *Config) storageRows() int {
	if c.Default != nil {
		return c.MaxRows + 1
	}
	return c.MaxRows
}

// layout places the table's sections in its reserved region; each starts on a page boundary, so each
// grows from its own first page.
type layout struct {
	weights, state, ids, last, counts, free, freed int // byte offsets
	total                                          int // bytes reserved
}

func (c *Config) layout() layout {
	var l layout
	section := func(bytes int) int {
		at := l.total
		l.total += (bytes + offheap.PageSize - 1) / offheap.PageSize * offheap.PageSize
		return at
	}
	rows := c.storageRows()
	l.weights = section(rows * c.Stride * 4)
	l.state = section(rows * c.StateWidth * 4)
	l.ids = section(c.MaxRows * 8)
	l.last = section(c.MaxRows * 4)
	l.counts = section(c.MaxRows * 4)
	l.free = section(c.MaxRows * 4)
	l.freed = section(c.MaxRows * 8)
	return l
}

// withRows returns a copy of c with row bound rows.
func (c Config) withRows(rows int) *Config {
	c.MaxRows = rows
	return &c
}

// footprint is the memory a table of c with row bound rows takes once full: its reserved sections
// (weights, optimizer state, per-row metadata), the ID map presized for the bound (16-byte slots,
// grown no further while it holds at most the bound), the admission sketch (MinCount > 1) and the
// eviction pass's scratch (16 bytes per row).
func (c *Config) footprint(rows int) int {
	n := c.withRows(rows).layout().total + numShards*shardSlots(rows)*int(unsafe.Sizeof(slot{})) +
		rows*int(unsafe.Sizeof(candidate{}))
	if c.MinCount > 1 {
		w := c.SketchWidth
		if w == 0 {
			w = defaultSketchWidth(rows)
		}
		n += sketchDepth * max(numShards*minSketchShardWidth, nextPow2(w))
	}
	return n
}

// rowsFitting returns the largest row bound whose footprint fits in limit bytes (0 if none does).
func (c *Config) rowsFitting(limit int) int {
	lo, hi := 0, MaxRowBound // invariant: lo fits; the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if mid <= limit && c.footprint(mid) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
