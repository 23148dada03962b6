package dynamic

import (
	"fmt"

	"github.com/recgo/recgo/engine/embedding"
)

// Builder plugs dynamic tables into an embedding collection: it is an embedding.TableBuilder whose
// tables take their row source and storage from a dynamic [Table] built from Config (Name, Dim and
// StateWidth come from the collection).
type Builder struct {
	Config Config
}

// NewBuilder checks cfg (with a placeholder dim when it has none) and returns a builder for it.
func NewBuilder(cfg Config) (*Builder, error) {
	probe := cfg
	if probe.Dim == 0 {
		probe.Dim = max(1, len(cfg.Default))
	}
	// Only the fields: whether a memory bound holds a row depends on the dim and optimizer state of
	// the table it builds, which BuildTable checks with the table's name.
	if err := probe.checkFields(); err != nil {
		return nil, err
	}
	return &Builder{Config: cfg}, nil
}

// BuildTable implements embedding.TableBuilder.
func (b *Builder) BuildTable(name string, dim int, opt embedding.OptimizerConfig) (*embedding.Table, error) {
	if err := embedding.CheckDim(name, dim); err != nil { // before New reserves rows of that width
		return nil, err
	}
	if err := opt.Validate(); err != nil {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	c := b.Config
	c.Name, c.Dim, c.StateWidth = name, dim, opt.StateWidth(dim)
	if c.Stride < dim {
		c.Stride = dim
	}
	t, err := New(c)
	if err != nil {
		return nil, err
	}
	et, err := embedding.NewTable(embedding.TableSpec{Name: name, Source: t, Data: t.Weights(),
		Stride: t.cfg.Stride, Dim: dim, State: t.State(), Opt: opt, Close: t.Close,
		Trainable: int64(t.cfg.MaxRows)}) // the default row (if any) pools but is never trained
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	return et, nil
}

// Of returns the dynamic table behind an embedding table, or nil when it is not dynamic.
func Of(t *embedding.Table) *Table {
	d, _ := t.Source.(*Table)
	return d
}
