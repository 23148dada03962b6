package embedding

import (
	"errors"
	"fmt"
	"sync"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/offheap"
)

// TableSpec describes a table over storage its caller provides (see the package doc for the layout).
type TableSpec struct {
	Name   string
	Source RowSource
	// Data holds the weight rows: row r at Data[r*Stride : r*Stride+Dim]. len(Data) must be a
	// multiple of Stride; the table has len(Data)/Stride rows of capacity. It must stay valid (and
	// at the same address) until the table is closed.
	Data        []float32
	Stride, Dim int
	// State holds the optimizer state: row r at State[r*w : (r+1)*w] with w = Opt.StateWidth(Dim).
	// It must have exactly rows·w values (nil when w == 0), zero for rows that were never updated.
	State []float32
	Opt   OptimizerConfig
	// Trainable is the number of leading rows backward may update (0: all). Rows at or above it
	// are read-only (a dynamic table's eval-mode default row): they pool but take no gradient.
	Trainable int64
	// Close, when set, runs when the table closes (after the table's own buffers are freed), e.g.
	// to release storage the row source owns.
	Close func() error
}

// Table is one embedding table: a row source, weight rows, optimizer state and a step counter.
type Table struct {
	Name        string
	Source      RowSource
	Data        []float32
	Stride, Dim int
	State       []float32
	Opt         OptimizerConfig
	// Step is the optimizer step counter (Step[0]), kept off the Go heap so it can be exposed and
	// checkpointed with the weights. It counts fused updates (Adam's bias correction uses it).
	Step []int64

	rows      int64
	trainable int64 // rows [trainable, rows) never take a gradient
	buffers   []*offheap.Buffer
	onClose   func() error

	// pending, while a merged-update scope is open (Collection.BeginMergedUpdate), collects the
	// fused backwards' merged gradients instead of updating rows; set and cleared under the owner's
	// exclusive lock, read by backwards under it.
	pending *pendingUpdate

	dedupMu sync.Mutex
	mark    []int32  // fixed tables: id → unique slot during dedup (valid where seen has the id's bit)
	seen    []uint64 // fixed tables: bitmap of the ids seen by the running dedup (all clear between passes)
}

// TableBuilder builds a table for a collection from its name, dimension and optimizer; row sources
// that manage their own storage (dynamic-ID tables) implement it so the C ABI can plug them in.
type TableBuilder interface {
	BuildTable(name string, dim int, opt OptimizerConfig) (*Table, error)
}

// MaxDim is the largest embedding dimension a table accepts.
const MaxDim = 1 << 20

// CheckDim returns an error naming table name unless dim is in [1, MaxDim]: the one place the
// dimension rule lives (fixed and dynamic tables, and the C ABI, rely on it).
func CheckDim(name string, dim int) error {
	if dim <= 0 || dim > MaxDim {
		return errs.Invalidf("table %q: embedding_dim %d must be in [1, %d]", name, dim, MaxDim)
	}
	return nil
}

// NewTable checks spec and returns a table over its storage. The caller keeps ownership of Data and
// State (spec.Close may release them when the table closes).
func NewTable(spec TableSpec) (*Table, error) {
	name := spec.Name
	switch {
	case spec.Source == nil:
		return nil, errs.Invalidf("table %q: no row source", name)
	case CheckDim(name, spec.Dim) != nil:
		return nil, CheckDim(name, spec.Dim)
	case spec.Stride < spec.Dim:
		return nil, errs.Invalidf("table %q: row stride %d is smaller than dim %d", name, spec.Stride, spec.Dim)
	case len(spec.Data)%spec.Stride != 0:
		return nil, errs.Invalidf("table %q: %d storage values is not a multiple of the stride %d", name, len(spec.Data), spec.Stride)
	case spec.Trainable < 0 || spec.Trainable > int64(len(spec.Data)/spec.Stride):
		return nil, errs.Invalidf("table %q: %d trainable rows of %d", name, spec.Trainable, len(spec.Data)/spec.Stride)
	}
	if err := spec.Opt.Validate(); err != nil {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	rows := int64(len(spec.Data) / spec.Stride)
	if w := int64(spec.Opt.StateWidth(spec.Dim)); int64(len(spec.State)) != rows*w {
		return nil, errs.Invalidf("table %q: optimizer %s needs %d state values (%d rows × %d), got %d",
			name, spec.Opt.Kind, rows*w, rows, w, len(spec.State))
	}
	trainable := spec.Trainable
	if trainable == 0 {
		trainable = rows
	}
	stepBuf, err := offheap.Alloc(8)
	if err != nil {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	return &Table{
		Name: name, Source: spec.Source, Data: spec.Data, Stride: spec.Stride, Dim: spec.Dim,
		State: spec.State, Opt: spec.Opt, Step: offheap.AsInt64s(stepBuf),
		rows: rows, trainable: trainable, buffers: []*offheap.Buffer{stepBuf}, onClose: spec.Close,
	}, nil
}

// NewFixedTable allocates a fixed-size table of rows×dim zero weights (stride = dim) and zero
// optimizer state off the Go heap, with a [RangeSource].
func NewFixedTable(name string, rows int64, dim int, opt OptimizerConfig) (*Table, error) {
	const maxValues = 1 << 40
	if rows <= 0 {
		return nil, errs.Invalidf("table %q: num_embeddings %d must be > 0", name, rows)
	}
	if err := CheckDim(name, dim); err != nil {
		return nil, err
	}
	if err := opt.Validate(); err != nil {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	w := opt.StateWidth(dim)
	if rows > maxValues/int64(dim+w) {
		return nil, errs.Capacityf("table %q: %d rows × %d values is too large", name, rows, dim+w)
	}
	dataBuf, data, err := offheap.Float32s(int(rows) * dim)
	if err != nil {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	stateBuf, state, err := offheap.Float32s(int(rows) * w)
	if err != nil {
		_ = dataBuf.Free()
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	t, err := NewTable(TableSpec{Name: name, Source: RangeSource{Table: name, Rows: rows}, Data: data,
		Stride: dim, Dim: dim, State: state, Opt: opt})
	if err != nil {
		_ = dataBuf.Free()
		_ = stateBuf.Free()
		return nil, err
	}
	t.buffers = append(t.buffers, dataBuf, stateBuf)
	return t, nil
}

// Rows is the table's row capacity, len(Data)/Stride.
func (t *Table) Rows() int64 { return t.rows }

// TrainableRows is the number of leading rows backward may update (see TableSpec.Trainable): the
// rows a caller's optimizer sees as the table's parameter.
func (t *Table) TrainableRows() int64 { return t.trainable }

// StateWidth is the number of optimizer state values per row.
func (t *Table) StateWidth() int { return t.Opt.StateWidth(t.Dim) }

// Row returns the weights of row r (Dim values).
func (t *Table) Row(r int64) []float32 {
	o := r * int64(t.Stride)
	return t.Data[o : o+int64(t.Dim)]
}

// StateRow returns the optimizer state of row r (StateWidth values; nil for none).
func (t *Table) StateRow(r int64) []float32 {
	w := int64(t.StateWidth())
	return t.State[r*w : (r+1)*w]
}

// ResetRows sets the weights of each row in rows to init(row, weights) (zeros when init is nil)
// and its optimizer state to zero: what a row must look like before it is reused for a new ID.
func (t *Table) ResetRows(rows []int64, init func(row int64, w []float32)) error {
	for _, r := range rows {
		if r < 0 || r >= t.rows {
			return errs.Invalidf("table %q: row %d out of range [0, %d)", t.Name, r, t.rows)
		}
		w := t.Row(r)
		clear(w)
		if init != nil {
			init(r, w)
		}
		clear(t.StateRow(r))
	}
	return nil
}

// SetOptimizer changes the hyper-parameters (not the kind: the state layout depends on it). It must
// not run during a pass over the table; [Collection.SetOptimizer] waits for them.
func (t *Table) SetOptimizer(opt OptimizerConfig) error {
	if err := t.checkOptimizer(opt); err != nil {
		return err
	}
	t.Opt = opt
	return nil
}

func (t *Table) checkOptimizer(opt OptimizerConfig) error {
	if opt.Kind != t.Opt.Kind {
		return errs.Invalidf("table %q: cannot change optimizer %s to %s (state layout differs)", t.Name, t.Opt.Kind, opt.Kind)
	}
	if err := opt.Validate(); err != nil {
		return fmt.Errorf("table %q: %w", t.Name, err)
	}
	return nil
}

// Close frees the table's off-heap buffers and runs the spec's Close. The table is unusable after.
func (t *Table) Close() error {
	var all []error
	for _, b := range t.buffers {
		all = append(all, b.Free())
	}
	t.buffers = nil
	t.Data, t.State, t.Step = nil, nil, nil
	if t.onClose != nil {
		all = append(all, t.onClose())
		t.onClose = nil
	}
	return errors.Join(all...)
}

// fixedRange reports whether the table maps ID i to row i of all its rows (a fixed table): its
// lookups then need no resolved offsets, and its RangeSource checks the IDs.
func (t *Table) fixedRange() (RangeSource, bool) {
	src, ok := t.Source.(RangeSource)
	return src, ok && src.Rows == t.rows
}
