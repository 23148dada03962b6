package shard

// Counters are one rank's traffic in a step, per table: the IDs it sent to other ranks, the rows
// (vectors) it returned to other ranks and the gradients it sent to other ranks, split by whether
// the peer is on the same node. A rank's own items are not counted. Requested is the distinct IDs
// the rank asked for (after its local dedup); Lookups the distinct rows it read as an owner.
// ReplicaRows counts the gradient rows of data-parallel tables sent to other ranks.
//
// With owner pooling (ownerpool.go) a vector returned is a row or a bag segment's partial sum, and a
// gradient sent is one per row or per segment: PooledVecs counts the partials among the vectors this
// rank returned to others, PooledGrads the segment gradients among those it sent. IDs count the
// distinct IDs sent whatever the return.
type Counters struct {
	IDsIntra, IDsInter      []int64
	VecsIntra, VecsInter    []int64
	GradsIntra, GradsInter  []int64
	Requested, Lookups      []int64
	ReplicaRows             []int64
	PooledVecs, PooledGrads []int64
}

// NumCounterFields is the number of per-table counters (the order of Fields).
const NumCounterFields = 11

func newCounters(tables int) Counters {
	m := func() []int64 { return make([]int64, tables) }
	return Counters{m(), m(), m(), m(), m(), m(), m(), m(), m(), m(), m()}
}

// Fields returns the counters in a fixed order: IDsIntra, IDsInter, VecsIntra, VecsInter,
// GradsIntra, GradsInter, Requested, Lookups, ReplicaRows, PooledVecs, PooledGrads.
func (c *Counters) Fields() [][]int64 {
	return [][]int64{c.IDsIntra, c.IDsInter, c.VecsIntra, c.VecsInter, c.GradsIntra, c.GradsInter,
		c.Requested, c.Lookups, c.ReplicaRows, c.PooledVecs, c.PooledGrads}
}

func (c *Counters) addIDs(t int, intra bool, n int64) {
	if intra {
		c.IDsIntra[t] += n
	} else {
		c.IDsInter[t] += n
	}
}

func (c *Counters) addVecs(t int, intra bool, n int64) {
	if intra {
		c.VecsIntra[t] += n
	} else {
		c.VecsInter[t] += n
	}
}

func (c *Counters) addGrads(t int, intra bool, n int64) {
	if intra {
		c.GradsIntra[t] += n
	} else {
		c.GradsInter[t] += n
	}
}
