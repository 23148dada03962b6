package embedding

import (
	"errors"
	"fmt"
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

	mu       sync.RWMutex // Close excludes Forward/Backward
	closed   bool
	poolMu   sync.Mutex
	contexts []*Context // released contexts whose buffers the next passes reuse (at most maxPooled)
}

// NewCollection checks that features reference the tables and returns the collection, which owns the
// tables from then on (Close closes them).
func NewCollection(tables []*Table, features []Feature) (*Collection, error) {
	if len(tables) == 0 {
		return nil, errs.Invalidf("collection: no tables")
	}
	c := &Collection{Tables: tables, Features: features, colOff: make([]int, len(features)),
		features: make([][]int, len(tables))}
	names := map[string]bool{}
	for i, t := range tables {
		if t == nil {
			return nil, errs.Invalidf("collection: table %d is nil", i)
		}
		if names[t.Name] {
			return nil, errs.Invalidf("collection: duplicate table name %q", t.Name)
		}
		names[t.Name] = true
	}
	seen := map[string]bool{}
	for f, ft := range features {
		if seen[ft.Name] {
			return nil, errs.Invalidf("collection: duplicate feature name %q", ft.Name)
		}
		seen[ft.Name] = true
		if ft.Table < 0 || ft.Table >= len(tables) {
			return nil, errs.Invalidf("collection: feature %q references table %d of %d", ft.Name, ft.Table, len(tables))
		}
		if ft.Pooling != PoolSum && ft.Pooling != PoolMean {
			return nil, errs.Invalidf("collection: feature %q has unknown pooling %d", ft.Name, int(ft.Pooling))
		}
		c.colOff[f] = c.width
		c.width += tables[ft.Table].Dim
		c.features[ft.Table] = append(c.features[ft.Table], f)
	}
	for i, fs := range c.features {
		if len(fs) == 0 {
			return nil, errs.Invalidf("collection: table %q has no features", tables[i].Name)
		}
	}
	return c, nil
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
	var all []error
	for _, t := range c.Tables {
		all = append(all, t.Close())
	}
	return errors.Join(all...)
}

// Batch is a KeyedJaggedTensor as the engine sees it: feature-major values and F·B lengths, in the
// caller's key order, plus for each key the index of the collection feature it feeds.
type Batch struct {
	KeyFeature []int64   // len F: a permutation of the collection's features
	Values     []int64   // all IDs, key-major
	Lengths    []int64   // F·B; entry k·B+b is sample b of key k
	Weights    []float32 // per-ID weights, or nil
	// Dedup, when set, is the batch's per-table dedup prepared by the input pipeline (checked
	// against the batch, then used instead of deduplicating again).
	Dedup *PreparedDedup
}

// ValidateBatch checks a batch's structure against a collection with numFeatures features and
// returns its batch size B. ID ranges are checked later, by each table's RowSource.
func ValidateBatch(b Batch, numFeatures int) (int, error) {
	if len(b.KeyFeature) != numFeatures {
		return 0, errs.Invalidf("batch: %d keys for a collection of %d features (every feature must be present exactly once)",
			len(b.KeyFeature), numFeatures)
	}
	seen := make([]bool, numFeatures)
	for k, f := range b.KeyFeature {
		if f < 0 || f >= int64(numFeatures) {
			return 0, errs.Invalidf("batch: key %d maps to feature %d of %d", k, f, numFeatures)
		}
		if seen[f] {
			return 0, errs.Invalidf("batch: feature %d appears twice among the keys", f)
		}
		seen[f] = true
	}
	if numFeatures == 0 || len(b.Lengths)%numFeatures != 0 {
		return 0, errs.Invalidf("batch: %d lengths is not a multiple of the %d features (need F·B)", len(b.Lengths), numFeatures)
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
	return len(b.Lengths) / numFeatures, nil
}

func (c *Collection) rlock() error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return errs.Invalidf("collection: used after close")
	}
	return nil
}

func wrapTable(t *Table, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("table %q: %w", t.Name, err)
}
