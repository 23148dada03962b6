package shard

import "github.com/recgo/recgo/internal/errs"

// Topology is the ranks' arrangement: Nodes × PerNode ranks, rank r on node r / PerNode with local
// index r % PerNode. The ranks of one node form its node group; the ranks with the same local index
// on every node form a rail group (in a GPU cluster, the GPUs wired to the same network rail).
type Topology struct {
	Nodes, PerNode int
}

// NewTopology checks the shape against the world size (by division: a product of two huge counts
// could wrap around to the world's).
func NewTopology(nodes, perNode, world int) (Topology, error) {
	if nodes <= 0 || perNode <= 0 || world%perNode != 0 || world/perNode != nodes {
		return Topology{}, errs.Invalidf("topology: %d nodes × %d ranks per node does not match the world of %d ranks", nodes, perNode, world)
	}
	return Topology{Nodes: nodes, PerNode: perNode}, nil
}

// World is the number of ranks.
func (t Topology) World() int { return t.Nodes * t.PerNode }

// Node is rank r's node.
func (t Topology) Node(r int) int { return r / t.PerNode }

// Local is rank r's index within its node.
func (t Topology) Local(r int) int { return r % t.PerNode }

// Rank is the rank of local index l on node n.
func (t Topology) Rank(n, l int) int { return n*t.PerNode + l }

// Group names a process group an exchange runs on.
type Group int

// The groups: every rank; the ranks of the caller's node; the ranks of the caller's rail.
const (
	GroupWorld Group = iota
	GroupNode
	GroupRail
)

// hop is one all-to-all leg of a route: the group it runs on, as seen from one rank.
type hop struct {
	group Group
	size  int
	self  int                 // the caller's index in the group
	dest  func(owner int) int // the group index an item bound for owner goes to
	rank  func(idx int) int   // the world rank of group index idx
}

// flatRoute is one all-to-all over the world, straight to the owner.
func flatRoute(t Topology, self int) []hop {
	id := func(x int) int { return x }
	return []hop{{group: GroupWorld, size: t.World(), self: self, dest: id, rank: id}}
}
