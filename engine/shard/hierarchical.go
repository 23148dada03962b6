package shard

// The hierarchical exchange of RecIS (§3.2, Fig. 3b) is a route of two all-to-all legs instead of
// the flat exchange's one:
//
//  1. intra-node: each rank sends every distinct ID it needs to the rank of its own node whose
//     local index is the owner's local index (the node group's all-to-all). That rank merges what
//     the node's ranks asked for, so an ID that G_n(x) ranks of node n need leaves the node once;
//  2. inter-node: the merged IDs go over the rail group (the ranks with that same local index on
//     every node) to the owner, which merges again and looks each distinct ID up once.
//
// Rows go back along both inverse maps (owner → rail peer → requester) and gradients follow the
// IDs' path, merged per distinct row at each stop. Compared with the flat route, inter-node IDs
// and returned vectors fall by Σ_n Σ_x (G_n(x) − 1) over the IDs x owned off node n (Eq. 3), which
// [Simulate] computes for a whole cluster and the exchange's counters show per step.
//
// The legs run through the same machinery as the flat route (exchange.go): a route is a list of
// hops, each naming its group, the caller's index in it and where an item bound for a given owner
// goes next.

// hierarchicalRoute is the two-leg route as seen from rank self.
func hierarchicalRoute(t Topology, self int) []hop {
	node, local := t.Node(self), t.Local(self)
	return []hop{
		{group: GroupNode, size: t.PerNode, self: local,
			dest: t.Local, rank: func(l int) int { return t.Rank(node, l) }},
		{group: GroupRail, size: t.Nodes, self: node,
			dest: t.Node, rank: func(n int) int { return t.Rank(n, local) }},
	}
}

// Mode selects the route of an exchange.
type Mode int

// The modes: one all-to-all over the world, or the two-level exchange above.
const (
	Flat Mode = iota
	Hierarchical
)

// String is the mode's name: flat or hierarchical.
func (m Mode) String() string {
	if m == Hierarchical {
		return "hierarchical"
	}
	return "flat"
}

// route returns the hops of mode for rank self.
func route(m Mode, t Topology, self int) []hop {
	if m == Hierarchical {
		return hierarchicalRoute(t, self)
	}
	return flatRoute(t, self)
}
