package shard

import (
	"fmt"
	"slices"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// Kind is how a table's rows are spread over the ranks.
type Kind int

// The shardings. Hash is RecIS's: an ID's owner is the rank its virtual bucket maps to, so a
// checkpoint moves whole buckets when the world size changes. TableWise puts the whole table on one
// rank (a RecShard plan's table → rank placement is a TableWise layout with the plan's rank).
// RowWise gives each rank a contiguous range of rows, in rank order: evenly (NewLayout) or as a plan
// splits them (NewRowWiseLayout). DataParallel keeps a replica on every rank:
// lookups stay local and the merged gradients are exchanged so every replica takes the same step.
const (
	Hash Kind = iota
	TableWise
	RowWise
	DataParallel
)

var kindNames = [...]string{"hash", "table_wise", "row_wise", "data_parallel"}

// String is the sharding kind's name as Python spells it ("table_wise").
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// VirtualBuckets is the number of hash buckets IDs fall into before buckets are mapped to ranks.
const VirtualBuckets = 1 << 16

// bucketSeed seeds the ID hash of hash sharding (any fixed value; it is part of the checkpoint format).
const bucketSeed = 0x5eed_5a4d

// Bucket is the virtual bucket of id under hash sharding.
func Bucket(id int64) int { return int(kernels.HashID(id, bucketSeed) & (VirtualBuckets - 1)) }

// BucketRank is the rank that owns bucket b in a world of the given size: buckets are split into
// contiguous ranges, one per rank.
func BucketRank(b, world int) int { return b * world / VirtualBuckets }

// HashOwner is the rank owning id under hash sharding in a world of the given size.
func HashOwner(id int64, world int) int { return BucketRank(Bucket(id), world) }

// Layout is one table's placement over a world of ranks: which rank owns each ID and at which row
// of that rank's shard. IDs are the table's rows 0..Rows-1, except in a dynamic layout.
type Layout struct {
	Name  string
	Rows  int64
	Dim   int
	Kind  Kind
	Rank  int // TableWise: the owning rank
	World int
	// Builder builds each rank's shard of a dynamic-ID table (dynamic.Builder; see Dynamic); nil
	// for a fixed table.
	Builder embedding.TableBuilder

	block int64   // RowWise, even split: rows per rank (the last ranks may hold fewer, or none)
	start []int64 // RowWise, uneven split: rank r holds rows [start[r], start[r+1]); nil when even
	local []int32 // Hash: id → row on its owner
	count []int64 // rows each rank holds
}

// maxHashRows bounds hash-sharded tables (their id → local row map is int32).
const maxHashRows = 1 << 31

// NewLayout checks the arguments and returns the table's layout (a hash layout computes every ID's
// owner row once, O(rows)).
func NewLayout(name string, rows int64, dim int, kind Kind, rank, world int) (*Layout, error) {
	switch {
	case world <= 0:
		return nil, errs.Invalidf("table %q: world size %d must be > 0", name, world)
	case rows <= 0:
		return nil, errs.Invalidf("table %q: num_embeddings %d must be > 0", name, rows)
	case dim <= 0 || dim > 1<<20:
		return nil, errs.Invalidf("table %q: embedding_dim %d must be in [1, 2^20]", name, dim)
	case kind < Hash || kind > DataParallel:
		return nil, errs.Invalidf("table %q: unknown sharding kind %d", name, int(kind))
	case kind == TableWise && (rank < 0 || rank >= world):
		return nil, errs.Invalidf("table %q: table-wise rank %d is outside the world of %d ranks", name, rank, world)
	case kind == Hash && rows >= maxHashRows:
		return nil, errs.Capacityf("table %q: %d rows is too many for hash sharding (limit 2^31)", name, rows)
	}
	l := &Layout{Name: name, Rows: rows, Dim: dim, Kind: kind, Rank: rank, World: world, count: make([]int64, world)}
	switch kind {
	case Hash:
		l.local = make([]int32, rows)
		for id := int64(0); id < rows; id++ {
			r := HashOwner(id, world)
			l.local[id] = int32(l.count[r])
			l.count[r]++
		}
	case TableWise:
		l.count[rank] = rows
	case RowWise:
		l.block = (rows + int64(world) - 1) / int64(world)
		for r := range l.count {
			l.count[r] = max(0, min(rows, int64(r+1)*l.block)-int64(r)*l.block)
		}
	case DataParallel:
		for r := range l.count {
			l.count[r] = rows
		}
	}
	return l, nil
}

// NewRowWiseLayout returns a row-wise layout whose rank r holds split[r] rows, the ranks' ranges
// tiling [0, rows) in rank order (a rank may hold none), as an uneven TorchRec plan splits them; a
// nil split is NewLayout's even one. A split equal to the even one gets the even layout, so that
// lookups keep its division (an uneven split costs a binary search over the ranks per ID).
func NewRowWiseLayout(name string, rows int64, dim int, world int, split []int64) (*Layout, error) {
	l, err := NewLayout(name, rows, dim, RowWise, 0, world)
	if err != nil || split == nil {
		return l, err
	}
	if len(split) != world {
		return nil, errs.Invalidf("table %q: a row split of %d ranks for a world of %d", name, len(split), world)
	}
	start := make([]int64, world+1)
	for r, n := range split {
		switch {
		case n < 0:
			return nil, errs.Invalidf("table %q: the row split gives rank %d %d rows", name, r, n)
		case n > rows-start[r]: // (compared so, the running sum cannot overflow)
			return nil, errs.Invalidf("table %q: the row split's ranks 0..%d hold more than the table's %d rows", name, r, rows)
		}
		start[r+1] = start[r] + n
	}
	if start[world] != rows {
		return nil, errs.Invalidf("table %q: the row split covers %d rows, the table has %d", name, start[world], rows)
	}
	if !slices.Equal(split, l.count) {
		l.start, l.block = start, 0
		copy(l.count, split)
	}
	return l, nil
}

// uneven reports whether the layout is row-wise with a split other than the even one: its per-rank
// row counts are then part of what ranks and prepared batches must agree on.
func (l *Layout) uneven() bool { return l.start != nil }

// NewDynamicLayout returns the layout of a dynamic-ID table whose shards b builds: hash (RecIS: its
// IDs spread over every rank by bucket) or table-wise on rank.
func NewDynamicLayout(name string, dim int, kind Kind, rank, world int, b embedding.TableBuilder) (*Layout, error) {
	switch {
	case b == nil:
		return nil, errs.Invalidf("table %q: a dynamic layout needs the builder of its shards", name)
	case kind != Hash && kind != TableWise:
		return nil, errs.Invalidf("table %q: a dynamic-ID table is sharded hash or table-wise, not %s "+
			"(its IDs have no range to cut into rows or to replicate)", name, kind)
	case world <= 0:
		return nil, errs.Invalidf("table %q: world size %d must be > 0", name, world)
	case dim <= 0 || dim > 1<<20:
		return nil, errs.Invalidf("table %q: embedding_dim %d must be in [1, 2^20]", name, dim)
	case kind == TableWise && (rank < 0 || rank >= world):
		return nil, errs.Invalidf("table %q: table-wise rank %d is outside the world of %d ranks", name, rank, world)
	}
	return &Layout{Name: name, Dim: dim, Kind: kind, Rank: rank, World: world, Builder: b,
		count: make([]int64, world)}, nil
}

// Dynamic reports whether the layout is a dynamic-ID table's (engine/dynamic): every int64 is an ID,
// and the owner's shard maps the IDs it receives to rows on demand (ResolveStore), so there is no ID
// range (Rows is 0), no fixed id → row map and no LocalIDs or Locate.
func (l *Layout) Dynamic() bool { return l.Builder != nil }

// Check returns an error naming the table when id is not one of its rows (any id is one of a
// dynamic table's).
func (l *Layout) Check(id int64) error {
	if l.Dynamic() {
		return nil
	}
	if id < 0 || id >= l.Rows {
		return errs.Invalidf("table %q: id %d out of range [0, %d)", l.Name, id, l.Rows)
	}
	return nil
}

// Owner returns the rank that owns id and its row there, as seen from rank self (a data-parallel
// table is owned by every rank, so by self). id must be valid (see Check).
func (l *Layout) Owner(id int64, self int) (rank int, row int64) {
	return l.OwnerRank(id, self), l.row(id)
}

// row is id's row on its owner (−1 in a dynamic layout, where the owner's shard decides).
func (l *Layout) row(id int64) int64 {
	switch {
	case l.Dynamic():
		return -1
	case l.Kind == Hash:
		return int64(l.local[id])
	case l.Kind == RowWise && l.start != nil:
		return id - l.start[l.rowOwner(id)]
	case l.Kind == RowWise:
		return id % l.block
	default:
		return id
	}
}

// rowOwner is the rank of an uneven row-wise split holding id (valid): the last rank whose range
// starts at or before it, by binary search over the world+1 bounds. A rank holding no rows starts
// where the next one does, so it is never that last rank. The search halves a fixed-length window
// with a conditional add (no branch on the data to mispredict on random IDs).
func (l *Layout) rowOwner(id int64) int {
	base, n := 0, l.World // the owner is in [base, base+n); start[World] = Rows > id
	for n > 1 {
		half := n >> 1
		if l.start[base+half] <= id {
			base += half
		}
		n -= half
	}
	return base
}

// OwnerRank is Owner's rank alone. A requester routing IDs needs no more, and for hash sharding
// skipping the row costs one random read of the per-ID row map less per ID.
func (l *Layout) OwnerRank(id int64, self int) int {
	switch l.Kind {
	case Hash:
		return HashOwner(id, l.World)
	case TableWise:
		return l.Rank
	case RowWise:
		if l.start != nil {
			return l.rowOwner(id)
		}
		return int(id / l.block)
	default:
		return self
	}
}

// LocalRows is the number of rows rank holds (0 in a dynamic layout: its shards grow on demand).
func (l *Layout) LocalRows(rank int) int64 { return l.count[rank] }

// LocalIDs returns the IDs rank holds, in the order of its shard's rows (none in a dynamic layout:
// its shard knows them).
func (l *Layout) LocalIDs(rank int) []int64 {
	out := make([]int64, 0, l.count[rank])
	switch {
	case l.Dynamic():
	case l.Kind == Hash:
		for id := int64(0); id < l.Rows; id++ {
			if HashOwner(id, l.World) == rank {
				out = append(out, id)
			}
		}
	case l.Kind == RowWise:
		first := int64(rank) * l.block
		if l.start != nil {
			first = l.start[rank]
		}
		for id := first; id < first+l.count[rank]; id++ {
			out = append(out, id)
		}
	default:
		for id := int64(0); id < l.count[rank]; id++ {
			out = append(out, id)
		}
	}
	return out
}

// OwnRows writes into rows the row on rank self of each id, which self must own (an error names the
// first that it does not); in a dynamic layout it only checks ownership (the shard resolves rows).
// The ownership check runs first over all IDs and the reads of hash sharding's id → row map follow
// back to back: independent loads the CPU overlaps, where one loop with the hash between them kept
// fewer of those cache misses in flight.
func (l *Layout) OwnRows(self int, ids, rows []int64) error {
	for _, id := range ids {
		if o := l.OwnerRank(id, self); o != self {
			return errs.Invalidf("exchange: table %q: id %d reached rank %d but belongs to rank %d", l.Name, id, self, o)
		}
	}
	switch {
	case l.Dynamic():
	case l.uneven(): // self owns them all: its rows start at its first ID (no second search)
		for i, id := range ids {
			rows[i] = id - l.start[self]
		}
	default:
		for i, id := range ids {
			rows[i] = l.row(id)
		}
	}
	return nil
}

// Locate writes into rows, for each id, its row on rank when rank holds it and −1 otherwise
// (checkpoint loading: which rows of a saved shard land here). Out-of-range IDs are an error.
func (l *Layout) Locate(rank int, ids, rows []int64) error {
	if len(rows) != len(ids) {
		return errs.Invalidf("table %q: %d rows for %d ids", l.Name, len(rows), len(ids))
	}
	if l.Dynamic() {
		return errs.Invalidf("table %q: a dynamic-ID table's rows are found by its shard, not its layout", l.Name)
	}
	for i, id := range ids {
		if err := l.Check(id); err != nil {
			return err
		}
		r, row := l.Owner(id, rank)
		if r != rank {
			row = -1
		}
		rows[i] = row
	}
	return nil
}
