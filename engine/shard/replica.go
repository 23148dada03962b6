package shard

import (
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

// Data-parallel tables look their rows up locally (their items route to the caller itself), so
// only their gradients travel: after the route's legs every rank sends its merged gradients of the
// replicated tables to every rank (an all-gather spelled as all-to-alls), and each rank merges all
// of them in rank order. Every replica then applies the same sums and stays bit-identical.

func (x *Exchange) hasDataParallel() bool {
	for _, l := range x.layouts {
		if l.Kind == DataParallel {
			return true
		}
	}
	return false
}

// replicaStages are the three world all-to-alls of the replicated tables' gradients: counts, IDs,
// gradients; the last merges them.
func (x *Exchange) replicaStages() []stage {
	T, W := len(x.layouts), x.topo.World()
	top := len(x.legs)
	var sendCnt, recvCnt []int64
	mine := func(t int) int64 {
		if x.layouts[t].Kind != DataParallel {
			return 0
		}
		return int64(len(x.owner[t]))
	}
	counts := stage{
		op: func() (*Op, error) {
			sendCnt = make([]int64, W*T)
			for d := 0; d < W; d++ {
				for t := 0; t < T; t++ {
					sendCnt[d*T+t] = mine(t)
				}
			}
			P := x.padTables()
			split := fill(W, int64(hdrFields+P)) // the header: this may be the backward's first op on the world group
			return &Op{Group: GroupWorld, SendI: x.withHeaders(phaseBackward, sendCnt, W, T, P), SendSplits: split,
				RecvSplits: split}, nil
		},
		feed: func(_ *Op, recv []int64, _ []float32, _ []byte) error {
			recv, err := x.stripHeaders(phaseBackward, recv, W, T, x.padTables(), func(r int) int { return r })
			if err != nil {
				return err
			}
			for _, c := range recv {
				if c < 0 || c > 1<<40 {
					return errs.Invalidf("exchange: a peer announced %d replica rows", c)
				}
			}
			recvCnt = append([]int64(nil), recv...)
			return nil
		},
	}
	var recvIDs [][]int64
	ids := stage{
		op: func() (*Op, error) {
			var send []int64
			for d := 0; d < W; d++ {
				for t := 0; t < T; t++ {
					if mine(t) > 0 {
						send = append(send, x.owner[t]...)
					}
				}
			}
			return &Op{Group: GroupWorld, SendI: send, SendSplits: rowSums(sendCnt, W, T, nil), RecvSplits: rowSums(recvCnt, W, T, nil)}, nil
		},
		feed: func(_ *Op, recv []int64, _ []float32, _ []byte) error {
			recvIDs = splitByTable(recv, recvCnt, W, T, nil, nil)
			return nil
		},
	}
	grads := stage{
		op: func() (*Op, error) {
			var send []float32
			for d := 0; d < W; d++ {
				for t := 0; t < T; t++ {
					if mine(t) > 0 {
						send = append(send, x.grads[top][t]...)
						if d != x.self {
							x.Counters.ReplicaRows[t] += mine(t)
						}
					}
				}
			}
			return &Op{Group: GroupWorld, Elem: ElemFloat32, SendF: send, SendSplits: rowSums(sendCnt, W, T, x.dims),
				RecvSplits: rowSums(recvCnt, W, T, x.dims)}, nil
		},
		feed: func(_ *Op, _ []int64, recv []float32, _ []byte) error {
			in := splitByTable(recv, recvCnt, W, T, x.dims, nil)
			for t, l := range x.layouts {
				if l.Kind != DataParallel {
					continue
				}
				var d embedding.Deduper
				inv := make([]int32, len(recvIDs[t]))
				uniq := d.Dedup(recvIDs[t], nil, inv)
				for _, id := range uniq {
					if err := l.Check(id); err != nil {
						return err
					}
				}
				g := make([]float32, len(uniq)*x.dims[t])
				MergeRows(g, in[t], inv, x.dims[t])
				x.owner[t], x.ownerRows[t], x.grads[top][t] = uniq, uniq, g
			}
			return nil
		},
	}
	return []stage{counts, ids, grads}
}
