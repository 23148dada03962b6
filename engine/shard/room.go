package shard

import (
	"errors"
	"fmt"
	"strings"

	"github.com/recgo/recgo/internal/errs"
)

// A dynamic table's owner learns which IDs it serves only once the route's ID stages ran, and its
// shard may then find that they need more rows than it has (dynamic.Table.CheckRoom). It used to
// raise CapacityError there alone: its peers went on to the row stage the owner never joined, and
// the next step met them in ops of other sizes (gloo aborted the process), or they timed out with
// their shards' clocks one step ahead of the owner's. So when a shard may not hold the step, the
// forward runs one more small all-to-all on the world group between the ID stages and the owners'
// lookup (roomStage): each rank checks its shards, changing nothing, and tells every rank, per
// table, whether they hold the step. If one does not, every rank raises CapacityError (the owner
// its shard's own, the others naming the owner and the table) before any shard resolves, admits or
// moves its clock, and every rank's exchange ends at the same op: the next step runs everywhere.
//
// Whether a shard may not hold the step every rank decides alike, without that op: the count stages
// carry, per table, how many distinct IDs the sender's part of the world holds (metaTotal: its own
// on the first leg, its group's sum on the next), so after the route's last count stage every rank
// knows the world's sum, which bounds what any owner receives. Only when that sum exceeds a dynamic
// shard's row bound (or the table's clock is manual: the step's earlier calls hold rows too) does the
// room op run; a table whose bound is above a step's distinct IDs never pays for it.

// roomNoRoom marks a table whose shard cannot hold the step's IDs; roomFailed one whose check
// failed otherwise (a closed shard); 0 is room.
const (
	roomNoRoom int64 = 1
	roomFailed int64 = 2
)

// RoomStore is a ResolveStore whose dynamic shards tell, changing nothing, whether a training
// Resolve of ids would fail for want of rows.
type RoomStore interface {
	// CheckRoom returns the error a training Resolve of table t's ids would fail with for want of
	// rows (CapacityError), changing nothing.
	CheckRoom(t int, ids []int64) error
	// MayOverflow reports whether a training Resolve of n distinct IDs of table t could fail for want
	// of rows; it depends only on n and the table's config (the same on every rank).
	MayOverflow(t int, n int64) bool
}

// partTotal is the metaTotal leg h's count stage sends for table t: the rank's distinct IDs on the
// first leg, then the sum its previous leg's group announced.
func (x *Exchange) partTotal(h, t int) int64 {
	if h == 0 {
		return int64(len(x.legs[0].items[t]))
	}
	return x.legs[h-1].total[t]
}

// roomNeeded reports whether the step needs the room op: whether some dynamic shard may receive more
// IDs than it holds, by the world's sum of distinct IDs per table (the same on every rank).
func (x *Exchange) roomNeeded() bool {
	rs, ok := x.store.(RoomStore)
	if !ok {
		return false
	}
	total := x.legs[len(x.legs)-1].total
	for t, l := range x.layouts {
		if l.Dynamic() && rs.MayOverflow(t, total[t]) {
			return true
		}
	}
	return false
}

func (x *Exchange) hasDynamic() bool {
	for _, l := range x.layouts {
		if l.Dynamic() {
			return true
		}
	}
	return false
}

// roomWidth is the room op's block width after the header: the size of the world group's first op
// of a drive (the flat route's count stage, or the replicas' count stage when the legs use the node
// and rail groups), so that a rank out of step meets it in an op of one size and the header names
// the mismatch.
func (x *Exchange) roomWidth() int {
	if x.legs[0].hop.group == GroupWorld {
		return x.padTables() * metaFields
	}
	return x.padTables()
}

// roomStage is the forward's check that every owner's dynamic shards hold the step's IDs (see
// above): in a training step each rank checks its own, and sends every rank its flag per table.
func (x *Exchange) roomStage() stage {
	T, W := len(x.layouts), x.topo.World()
	var own error // this rank's first failing check (lowest table)
	return stage{
		op: func() (*Op, error) {
			if !x.roomNeeded() { // no shard can overflow: no op (every rank decides alike)
				return nil, nil
			}
			flags := make([]int64, T)
			if rs, ok := x.store.(RoomStore); ok && x.train {
				for t, l := range x.layouts {
					if !l.Dynamic() {
						continue
					}
					if err := rs.CheckRoom(t, x.owner[t]); err != nil {
						flags[t] = roomFailed
						if errors.Is(err, errs.ErrCapacity) {
							flags[t] = roomNoRoom
						}
						if own == nil {
							own = err
						}
					}
				}
			}
			blocks := make([]int64, W*T)
			for d := range W {
				copy(blocks[d*T:], flags)
			}
			width := x.roomWidth()
			split := fill(W, int64(hdrFields+width))
			return &Op{Group: GroupWorld, SendI: x.withHeaders(phaseForward, blocks, W, T, width), SendSplits: split,
				RecvSplits: split}, nil
		},
		feed: func(_ *Op, recv []int64, _ []float32, _ []byte) error {
			blocks, err := x.stripHeaders(phaseForward, recv, W, T, x.roomWidth(), func(r int) int { return r })
			if err != nil {
				return err
			}
			var full, failed []string // the peers' shards that cannot hold the step, or failed their check
			for d := range W {
				for t := range T {
					switch v := blocks[d*T+t]; v {
					case 0:
					case roomNoRoom, roomFailed:
						if d != x.self {
							what := fmt.Sprintf("rank %d's shard of table %q", d, x.layouts[t].Name)
							if v == roomNoRoom {
								full = append(full, what)
							} else {
								failed = append(failed, what)
							}
						}
					default:
						return errs.Invalidf("exchange: rank %d sent a room flag of %d", d, v)
					}
				}
			}
			switch {
			case own != nil:
				return own
			case len(full) > 0:
				return errs.Capacityf("exchange: %s cannot hold this step's IDs (they need more rows than its bound; "+
					"that rank raised CapacityError): the step is refused on every rank and no shard changed; raise "+
					"the table's num_embeddings, which bounds each rank's shard, or send fewer distinct IDs per step",
					strings.Join(full, " and "))
			case len(failed) > 0:
				return errs.Invalidf("exchange: %s failed to check its room for this step's IDs (that rank raised "+
					"the error): the step is refused on every rank and no shard changed", strings.Join(failed, " and "))
			}
			return nil
		},
	}
}
