package embedding

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/recgo/recgo/internal/errs"
)

// Pooling is how a feature's bag of rows becomes one vector.
type Pooling int

// The poolings: sum of (weighted) rows, or that sum divided by the bag length (0 for empty bags).
const (
	PoolSum Pooling = iota
	PoolMean
)

// Feature is one input feature of a collection: its name, the table it looks up and its pooling.
type Feature struct {
	Name    string
	Table   int
	Pooling Pooling
}

// Collection is a set of tables and the features that look them up (several features may share a
// table). Its pooled output is one [B, Width] row-major matrix with feature f in the columns
// [ColumnOffset(f), ColumnOffset(f)+dim) in feature order, like TorchRec's KeyedTensor.
type Collection struct {
	Tables   []*Table
	Features []Feature

	colOff   []int   // per feature
	width    int     // Σ dims
	features [][]int // per table: its features, in order

	opts           Options
	exclusiveTrain bool // a training forward changes some table's row source (dynamic tables)

	// mu orders the passes (see the package doc's concurrency contract): forwards and gradient-only
	// backwards hold it shared; fused updates, training forwards of collections whose row sources
	// change in training, optimizer changes and Close hold it exclusively.
	mu       sync.RWMutex
	closed   bool
	poolMu   sync.Mutex
	contexts []*Context // released contexts whose buffers the next passes reuse (at most maxPooled)
}

// Options tune how a collection computes; the zero value chooses everything automatically. Results
// do not depend on them (up to float rounding of the summation order): they let tests and
// benchmarks force each path.
type Options struct {
	// PoolOrder forces the forward's pooling order (default: by mean bag length).
	PoolOrder PoolOrder
	// BackwardPath forces how backward merges gradients (default: chosen per batch by planScatter).
	BackwardPath BackwardPath
	// DenseDedupMaxRows is the largest fixed table deduplicated with a slot array indexed by ID (4
	// bytes per row, allocated on first use); larger tables use a hash map. 0 means the default
	// (1<<26 rows); a negative value sends every table to the hash map.
	DenseDedupMaxRows int64
	// NoDedup turns off the deduplication of each table's IDs: every lookup is resolved on its own
	// (a dynamic table's row source sees each occurrence, and counts each as a sighting), and a
	// forward that keeps its context merges the lookups by storage row instead (a radix sort of
	// the rows), so backward still sums each row's gradients and updates it once: the results equal
	// the deduplicating path's. A batch's prepared dedup is ignored. For ablations (RecIS Fig. 7's
	// "without ID dedup").
	NoDedup bool
}

// PoolOrder is the order a forward pools in.
type PoolOrder int

// The pooling orders.
const (
	PoolAuto         PoolOrder = iota // feature-major for long bags, sample-major otherwise
	PoolSampleMajor                   // all features of a chunk of samples at a time
	PoolFeatureMajor                  // one feature's chunk of samples at a time
)

// BackwardPath is how backward merges the output gradient into distinct rows.
type BackwardPath int

// The backward paths.
const (
	BackwardAuto    BackwardPath = iota // chosen per batch by the load balance (planScatter)
	BackwardScatter                     // sample-order scatter, one goroutine per table
	BackwardGrouped                     // lookups grouped by distinct row, split across goroutines
)

// defaultDenseDedupMaxRows is Options.DenseDedupMaxRows's default.
const defaultDenseDedupMaxRows int64 = 1 << 26

func (o Options) denseDedupMaxRows() int64 {
	switch {
	case o.DenseDedupMaxRows == 0:
		return defaultDenseDedupMaxRows
	case o.DenseDedupMaxRows < 0:
		return -1
	default:
		return o.DenseDedupMaxRows
	}
}

// NewCollection checks that features reference the tables and returns the collection, which owns the
// tables from then on (Close closes them). It uses the default Options.
func NewCollection(tables []*Table, features []Feature) (*Collection, error) {
	return NewCollectionWithOptions(tables, features, Options{})
}

// NewCollectionWithOptions is NewCollection with explicit Options.
func NewCollectionWithOptions(tables []*Table, features []Feature, opts Options) (*Collection, error) {
	if len(tables) == 0 {
		return nil, errs.Invalidf("collection: no tables")
	}
	if opts.PoolOrder < PoolAuto || opts.PoolOrder > PoolFeatureMajor || opts.BackwardPath < BackwardAuto || opts.BackwardPath > BackwardGrouped {
		return nil, errs.Invalidf("collection: unknown pool order %d or backward path %d", opts.PoolOrder, opts.BackwardPath)
	}
	c := &Collection{Tables: tables, Features: features, opts: opts}
	names := map[string]bool{}
	for i, t := range tables {
		if t == nil {
			return nil, errs.Invalidf("collection: table %d is nil", i)
		}
		if names[t.Name] {
			return nil, errs.Invalidf("collection: duplicate table name %q", t.Name)
		}
		names[t.Name] = true
		if _, fixed := t.fixedRange(); !fixed {
			c.exclusiveTrain = true
		}
	}
	dims, tnames := make([]int, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		dims[i], tnames[i] = t.Dim, t.Name
	}
	lay, err := LayOutFeatures("collection", features, dims, tnames)
	if err != nil {
		return nil, err
	}
	c.colOff, c.width, c.features = lay.ColOff, lay.Width, lay.PerTable
	return c, nil
}

// FeatureLayout is where a collection's features land: feature f's output columns start at
// ColOff[f], Width is the sum of the features' dims and PerTable[t] lists table t's features.
type FeatureLayout struct {
	ColOff   []int
	Width    int
	PerTable [][]int
}

// LayOutFeatures checks features against tables of the given dims and names (feature names distinct
// within a table, valid table indices and poolings, every table read by a feature) and lays out
// their output columns; what names the collection in the errors. A name may recur across tables:
// the same batch key looked up in each (the caller feeds the key once per feature).
func LayOutFeatures(what string, features []Feature, dims []int, tableNames []string) (FeatureLayout, error) {
	lay := FeatureLayout{ColOff: make([]int, len(features)), PerTable: make([][]int, len(dims))}
	type tableFeature struct {
		table int
		name  string
	}
	seen := map[tableFeature]bool{}
	for f, ft := range features {
		if ft.Table < 0 || ft.Table >= len(dims) {
			return lay, errs.Invalidf("%s: feature %q references table %d of %d", what, ft.Name, ft.Table, len(dims))
		}
		if seen[tableFeature{ft.Table, ft.Name}] {
			return lay, errs.Invalidf("%s: duplicate feature name %q in table %q", what, ft.Name, tableNames[ft.Table])
		}
		seen[tableFeature{ft.Table, ft.Name}] = true
		if ft.Pooling != PoolSum && ft.Pooling != PoolMean {
			return lay, errs.Invalidf("%s: feature %q has unknown pooling %d", what, ft.Name, int(ft.Pooling))
		}
		lay.ColOff[f] = lay.Width
		lay.Width += dims[ft.Table]
		lay.PerTable[ft.Table] = append(lay.PerTable[ft.Table], f)
	}
	for i, fs := range lay.PerTable {
		if len(fs) == 0 {
			return lay, errs.Invalidf("%s: table %q has no features", what, tableNames[i])
		}
	}
	return lay, nil
}

// CloseTables closes every table and joins their errors.
func CloseTables(tables []*Table) error {
	var all []error
	for _, t := range tables {
		all = append(all, t.Close())
	}
	return errors.Join(all...)
}

// Options returns the collection's options.
func (c *Collection) Options() Options { return c.opts }

// SetOptimizer changes every table's optimizer hyper-parameters (the kind must stay), waiting for
// running passes; on error no table changes.
func (c *Collection) SetOptimizer(opt OptimizerConfig) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errs.Invalidf("collection: used after close")
	}
	return SetOptimizer(c.Tables, opt)
}

// SetOptimizer changes the optimizer hyper-parameters of every table (learning-rate schedules):
// all or none, after checking that the kind stays and the values are valid. The caller keeps
// updates from running meanwhile.
func SetOptimizer(tables []*Table, opt OptimizerConfig) error {
	for _, t := range tables {
		if err := t.checkOptimizer(opt); err != nil {
			return err
		}
	}
	for _, t := range tables {
		t.Opt = opt
	}
	return nil
}

// SetDedup turns the deduplication of each table's IDs on (the default) or off (see
// Options.NoDedup), waiting for running passes.
func (c *Collection) SetDedup(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errs.Invalidf("collection: used after close")
	}
	c.opts.NoDedup = !on
	return nil
}

// Exclusive runs fn while no pass runs on the collection (for work that rewrites tables outside the
// passes, such as loading a checkpoint into them).
func (c *Collection) Exclusive(fn func() error) error { return c.Locked(true, fn) }

// Locked runs fn under the collection's lock: exclusive (as Exclusive) or shared with other passes
// (work that reads the tables, or changes them only as an evaluation forward may).
func (c *Collection) Locked(exclusive bool, fn func() error) error {
	unlock, err := c.lock(exclusive)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

// Width is the number of output columns, the sum of the features' dims.
func (c *Collection) Width() int { return c.width }

// ColumnOffset is the first output column of feature f.
func (c *Collection) ColumnOffset(f int) int { return c.colOff[f] }

// Close closes every table. Calls after Close fail; a second Close is a no-op.
func (c *Collection) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return CloseTables(c.Tables)
}

// Batch is a KeyedJaggedTensor as the engine sees it: feature-major values and K·B lengths, in the
// caller's key order, plus for each key the index of the collection feature it feeds, or -1 for a
// key no feature reads (its bags are skipped, as TorchRec's EmbeddingBagCollection ignores extra keys).
type Batch struct {
	KeyFeature []int64   // len K ≥ features: every feature exactly once, the other keys -1
	Values     []int64   // all IDs, key-major
	Lengths    []int64   // K·B; entry k·B+b is sample b of key k
	Weights    []float32 // per-ID weights, or nil
	// Dedup, when set, is the batch's per-table dedup prepared by the input pipeline (checked
	// against the batch, then used instead of deduplicating again).
	Dedup *PreparedDedup
	// Recompute marks an evaluation forward (train false) as the recomputation of a training forward
	// in backward (activation checkpointing): its rows are resolved with [ResolveRecompute].
	Recompute bool
}

// IgnoredKey is the KeyFeature entry of a key that no feature of the collection reads.
const IgnoredKey = -1

// ValidateBatch checks a batch's structure against a collection with numFeatures features and
// returns its batch size B. ID ranges are checked later, by each table's RowSource (the IDs of
// ignored keys are never looked at).
func ValidateBatch(b Batch, numFeatures int) (int, error) {
	nkeys := len(b.KeyFeature)
	if nkeys < numFeatures {
		return 0, errs.Invalidf("batch: %d keys for a collection of %d features (every feature must be present)",
			nkeys, numFeatures)
	}
	seen := make([]bool, numFeatures)
	found := 0
	for k, f := range b.KeyFeature {
		if f == IgnoredKey {
			continue
		}
		if f < 0 || f >= int64(numFeatures) {
			return 0, errs.Invalidf("batch: key %d maps to feature %d of %d", k, f, numFeatures)
		}
		if seen[f] {
			return 0, errs.Invalidf("batch: feature %d appears twice among the keys", f)
		}
		seen[f] = true
		found++
	}
	if found != numFeatures {
		return 0, errs.Invalidf("batch: %d of the collection's %d features are among the keys (every feature must be present)",
			found, numFeatures)
	}
	if nkeys == 0 || len(b.Lengths)%nkeys != 0 {
		return 0, errs.Invalidf("batch: %d lengths is not a multiple of the %d keys (need K·B)", len(b.Lengths), nkeys)
	}
	var total int64
	nv := int64(len(b.Values))
	for i, n := range b.Lengths {
		if n < 0 {
			return 0, errs.Invalidf("batch: lengths[%d] = %d is negative", i, n)
		}
		if n > nv-total {
			return 0, errs.Invalidf("batch: lengths sum past the %d values (at lengths[%d])", nv, i)
		}
		total += n
	}
	if total != nv {
		return 0, errs.Invalidf("batch: lengths sum to %d but there are %d values", total, nv)
	}
	if b.Weights != nil && len(b.Weights) != len(b.Values) {
		return 0, errs.Invalidf("batch: %d weights for %d values", len(b.Weights), len(b.Values))
	}
	return len(b.Lengths) / nkeys, nil
}

func (c *Collection) rlock() error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return errs.Invalidf("collection: used after close")
	}
	return nil
}

// lock takes mu shared or, with exclusive, exclusively, and returns its unlock.
func (c *Collection) lock(exclusive bool) (func(), error) {
	if !exclusive {
		if err := c.rlock(); err != nil {
			return nil, err
		}
		return c.mu.RUnlock, nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errs.Invalidf("collection: used after close")
	}
	return c.mu.Unlock, nil
}

// wrapTable names table t in err, unless err already names it (a dynamic table's errors do).
func wrapTable(t *Table, err error) error {
	if err == nil || strings.Contains(err.Error(), fmt.Sprintf("table %q", t.Name)) {
		return err
	}
	return fmt.Errorf("table %q: %w", t.Name, err)
}
