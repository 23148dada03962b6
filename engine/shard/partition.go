package shard

import (
	"fmt"
	"slices"
	"strings"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

// Partitioning a step's distinct IDs by owner. The first leg of a step's route sends each of a
// table's distinct IDs to a group index (the owner on the flat route, the node's rank for the
// owner's local index on the hierarchical one) in destination-major order, stable in ID order.
// countStage computes that partition for every step; the input pipeline's FORMAT stage may compute
// it ahead, with the collection's [Partitioner], and [Collection.BeginPrepared] then skips both the
// local deduplication and the partition. One function (partition) serves both.

// TablePartition is one table's leg-0 partition of its distinct IDs (in the dedup's first-seen
// order): Dest[i] is ID i's group index on the first leg, Perm lists the IDs in send order
// (destination-major, stable in ID order: the counting sort), and Count[d] is the number of IDs
// sent to group index d.
type TablePartition struct {
	Dest  []int32
	Perm  []int32
	Count []int64
}

// partition fills p (Dest and Perm of len(ids), Count of the hop's group size) for a table laid
// out by l, as seen from world rank self on hop h. ids must be valid (see Layout.Check).
func partition(l *Layout, self int, h *hop, ids []int64, p TablePartition) {
	clear(p.Count)
	if l.Kind == TableWise || l.Kind == DataParallel { // one owner for every ID: the IDs in order
		d := h.dest(l.OwnerRank(0, self))
		for i := range ids {
			p.Dest[i], p.Perm[i] = int32(d), int32(i)
		}
		p.Count[d] = int64(len(ids))
		return
	}
	for i, id := range ids {
		d := h.dest(l.OwnerRank(id, self))
		p.Dest[i] = int32(d)
		p.Count[d]++
	}
	// counting sort of the IDs by destination, stable in ID order
	var start int32
	next := make([]int32, len(p.Count))
	for d, n := range p.Count {
		next[d] = start
		start += int32(n)
	}
	for i, d := range p.Dest {
		p.Perm[next[d]] = int32(i)
		next[d]++
	}
}

// Partitioner computes a collection's leg-0 partition of a batch's distinct IDs ahead of the step
// (the input pipeline's FORMAT stage): exactly what the step's countStage would compute. It only
// reads the collection's layouts, which never change, so any number of goroutines may use it at
// once and while the collection runs steps; it stays valid after the collection is closed.
type Partitioner struct {
	layouts  []*Layout
	features [][]string // per table: its features' names, in dedup order
	first    hop        // the route's first leg at this rank
	self     int
	sig      string // what a partition depends on: topology, rank, mode and the layouts
}

func newPartitioner(c *Collection) *Partitioner {
	p := &Partitioner{layouts: c.Layouts, self: c.Rank, first: route(c.Mode, c.Topo, c.Rank)[0],
		features: make([][]string, len(c.Layouts))}
	var sig strings.Builder
	fmt.Fprintf(&sig, "rank %d of %d (%d×%d), %s exchange; tables", c.Rank, c.Topo.World(), c.Topo.Nodes, c.Topo.PerNode, c.Mode)
	for t, l := range c.Layouts {
		for _, f := range c.features[t] {
			p.features[t] = append(p.features[t], c.Features[f].Name)
		}
		fmt.Fprintf(&sig, " %s[%d rows, %s", l.Name, l.Rows, l.Kind)
		if l.Kind == TableWise {
			fmt.Fprintf(&sig, " on rank %d", l.Rank)
		}
		if l.uneven() { // the same table split otherwise routes its IDs otherwise
			fmt.Fprintf(&sig, " split %v", l.count)
		}
		fmt.Fprintf(&sig, ", features %s]", strings.Join(p.features[t], ","))
	}
	p.sig = sig.String()
	return p
}

// Partitioner returns the collection's partitioner (one per collection).
func (c *Collection) Partitioner() *Partitioner { return c.part }

// NumTables is the number of tables the partitioner partitions.
func (p *Partitioner) NumTables() int { return len(p.layouts) }

// Table returns table t's name and its features' names in the order the collection deduplicates
// them (the input pipeline must deduplicate the table's features in that order).
func (p *Partitioner) Table(t int) (string, []string) {
	return p.layouts[t].Name, slices.Clone(p.features[t])
}

// Size is the first leg's group size: the length of a TablePartition's Count.
func (p *Partitioner) Size() int { return p.first.size }

// String describes what the partition depends on (rank, world, topology, mode, layouts).
func (p *Partitioner) String() string { return p.sig }

// Partition range-checks table t's distinct IDs and fills out (Dest and Perm of len(ids), Count of
// Size()) with their leg-0 partition.
func (p *Partitioner) Partition(t int, ids []int64, out TablePartition) error {
	if t < 0 || t >= len(p.layouts) {
		return errs.NotFoundf("partition: table index %d of %d", t, len(p.layouts))
	}
	if len(out.Dest) != len(ids) || len(out.Perm) != len(ids) || len(out.Count) != p.first.size {
		return errs.Invalidf("partition: table %q: buffers of %d, %d and %d for %d IDs and %d destinations",
			p.layouts[t].Name, len(out.Dest), len(out.Perm), len(out.Count), len(ids), p.first.size)
	}
	l := p.layouts[t]
	for _, id := range ids {
		if err := l.Check(id); err != nil {
			return err
		}
	}
	partition(l, p.self, &p.first, ids, out)
	return nil
}

// Partition is a batch's leg-0 partition computed ahead by a Partitioner (By): Tables[i] belongs
// to the batch's dedup entry i (a [embedding.TableDedup]); an entry of a table By does not
// partition is empty.
type Partition struct {
	By     *Partitioner
	Tables []TablePartition
}

// prepared matches a batch's dedup and partition to the collection's tables (per table: its dedup
// and partition). A batch partitioned for a collection laid out otherwise gives none (the step
// computes them, as Begin does), and so does, per table, a table the pipeline did not deduplicate or
// deduplicated over other features: a prepared batch is a valid batch for every collection.
func (c *Collection) prepared(dedup []embedding.TableDedup, part *Partition) ([]*embedding.TableDedup, []*TablePartition, error) {
	if part.By == nil || part.By.sig != c.part.sig {
		return nil, nil, nil
	}
	if len(part.Tables) != len(dedup) {
		return nil, nil, errs.Invalidf("prepared batch: %d partitions for %d deduplicated tables", len(part.Tables), len(dedup))
	}
	T := len(c.Layouts)
	ds, ps := make([]*embedding.TableDedup, T), make([]*TablePartition, T)
	for t, l := range c.Layouts {
		for i := range dedup {
			if dedup[i].Table == l.Name && slices.Equal(dedup[i].Features, c.part.features[t]) {
				ds[t], ps[t] = &dedup[i], &part.Tables[i]
			}
		}
		if ds[t] == nil {
			continue
		}
		if p := ps[t]; len(p.Dest) != len(ds[t].Uniq) || len(p.Perm) != len(ds[t].Uniq) || len(p.Count) != c.part.first.size {
			return nil, nil, errs.Invalidf("prepared batch: table %q: partition of %d IDs for %d distinct IDs", l.Name, len(p.Dest), len(ds[t].Uniq))
		}
	}
	return ds, ps, nil
}
