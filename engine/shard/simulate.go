package shard

import (
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

// Traffic is a cluster's exchange volume for one step, summed over ranks and tables, in IDs (each
// ID sent forward is one row returned and one gradient sent back, so the same counts hold for
// vectors). Lookups counts the batch's IDs, Requested the distinct IDs after each rank's local
// dedup; Flat* and Hier* are the IDs sent to another rank of the same node (Intra) or of another
// node (Inter) by the flat and the hierarchical exchange.
type Traffic struct {
	Lookups, Requested   int64
	FlatIntra, FlatInter int64
	HierIntra, HierInter int64
}

// Add accumulates o into t.
func (t *Traffic) Add(o Traffic) {
	t.Lookups += o.Lookups
	t.Requested += o.Requested
	t.FlatIntra += o.FlatIntra
	t.FlatInter += o.FlatInter
	t.HierIntra += o.HierIntra
	t.HierInter += o.HierInter
}

// Simulate computes, without running any rank, the exact traffic both exchange modes would move
// for one step of topo in which rank r looks up batch[r][t] (the raw IDs of table t in its
// samples) and owner(t, id) owns each ID — the counts Exchange's counters report when the step
// really runs. It costs O(IDs) time and memory, so a 16 × 8 cluster is simulated on one core.
func Simulate(topo Topology, batch [][][]int64, owner func(t int, id int64) int) (Traffic, error) {
	W := topo.World()
	if len(batch) != W {
		return Traffic{}, errs.Invalidf("simulate: %d ranks' batches for a world of %d", len(batch), W)
	}
	T := 0
	if W > 0 {
		T = len(batch[0])
	}
	var tr Traffic
	var d embedding.Deduper
	// merged[n·PerNode+l][t]: what node n's rank with local index l gathers in the first leg.
	merged := make([][][]int64, W)
	for i := range merged {
		merged[i] = make([][]int64, T)
	}
	for r, tables := range batch {
		if len(tables) != T {
			return Traffic{}, errs.Invalidf("simulate: rank %d has %d tables, rank 0 has %d", r, len(tables), T)
		}
		n := topo.Node(r)
		for t, ids := range tables {
			tr.Lookups += int64(len(ids))
			uniq := d.Dedup(ids, nil, make([]int32, len(ids)))
			tr.Requested += int64(len(uniq))
			for _, x := range uniq {
				o := owner(t, x)
				if o < 0 || o >= W {
					return Traffic{}, errs.Invalidf("simulate: table %d id %d has owner %d outside the world", t, x, o)
				}
				switch {
				case o == r:
				case topo.Node(o) == n:
					tr.FlatIntra++
				default:
					tr.FlatInter++
				}
				if topo.Local(o) != topo.Local(r) {
					tr.HierIntra++
				}
				m := topo.Rank(n, topo.Local(o))
				merged[m][t] = append(merged[m][t], x)
			}
		}
	}
	for m, tables := range merged {
		n := topo.Node(m)
		for t, ids := range tables {
			uniq := d.Dedup(ids, nil, make([]int32, len(ids)))
			for _, x := range uniq {
				o := owner(t, x)
				if topo.Node(o) != n {
					tr.HierInter++
				} else if o != m {
					tr.HierIntra++ // cannot happen (m has the owner's local index), kept for safety
				}
			}
		}
	}
	return tr, nil
}

// SplitCounts cuts values (rank-major, then table) into [rank][table] lists by counts
// ([ranks × tables]), checking that the counts are non-negative and cover values exactly.
func SplitCounts(values, counts []int64, ranks, tables int) ([][][]int64, error) {
	if len(counts) != ranks*tables {
		return nil, errs.Invalidf("simulate: %d counts for %d ranks × %d tables", len(counts), ranks, tables)
	}
	out := make([][][]int64, ranks)
	var p int64
	for r := range out {
		out[r] = make([][]int64, tables)
		for t := range out[r] {
			n := counts[r*tables+t]
			if n < 0 || n > int64(len(values))-p {
				return nil, errs.Invalidf("simulate: count %d of rank %d table %d runs past the %d values", n, r, t, len(values))
			}
			out[r][t] = values[p : p+n]
			p += n
		}
	}
	if p != int64(len(values)) {
		return nil, errs.Invalidf("simulate: counts cover %d of the %d values", p, len(values))
	}
	return out, nil
}
