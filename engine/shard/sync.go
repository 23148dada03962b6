package shard

import (
	"fmt"
	"math"
	"strings"

	"github.com/recgo/recgo/engine/embedding"

	"github.com/recgo/recgo/internal/errs"
)

// Every rank must run the same steps: each forward, and each backward on every rank or on none. A
// rank that does not (a training loop that skips one batch's backward on one rank, a forward one
// rank runs alone) would meet its peers in ops of other sizes, and gloo aborts the process on a size
// mismatch before anything can check it. So on every group a drive (a step's forward, or its
// backward) uses, its first op has a size that does not depend on the phase and opens each peer's
// block with a header: the phase and the step's number. Forward's first op on a leg's group is
// that leg's count stage, which carries the header; backward opens each leg with syncStage, an op
// of the count stage's size holding only the header; the replicas' count stage on the world group
// carries one too. A peer at another phase or step makes every rank that meets it raise, naming both.
// The header also carries a fingerprint of the fused optimizer's hyper-parameters: a rank whose
// learning-rate schedule changed them differently (or at another step) would update its rows and
// replicas at its own rate, and the replicas would silently part. And it carries the collection's
// identity (its tables, features and kind): collections share their groups, so a rank that calls
// two collections in another order than its peers (or skips one) would otherwise exchange one
// collection's IDs with another's at the same step number and get wrong rows back, silently when
// the first ops' sizes happen to agree. Last, it carries the step's mode (training or evaluation):
// an evaluation step's dynamic shards admit no ID and keep their clocks, so a rank in eval() mode
// beside training peers left its shards unadmitted while the peers' owners admitted its IDs, and the
// clocks parted, silently.

// Header fields, before each peer's block.
const (
	hdrPhase = iota
	hdrStep
	hdrOptim
	hdrIdent
	hdrMode
	hdrFields
)

// The step modes a header carries (tagged as the phases are).
const (
	modeTrain int64 = 0x5ec0_0010
	modeEval  int64 = 0x5ec0_0011
)

// modeWord is the header's word for a step that trains (or evaluates).
func modeWord(train bool) int64 {
	if train {
		return modeTrain
	}
	return modeEval
}

func modeName(m int64) string {
	switch m {
	case modeTrain:
		return "a training"
	case modeEval:
		return "an evaluation (eval())"
	}
	return fmt.Sprintf("unknown mode %#x", m)
}

// fnv is FNV-1a over the bytes of words, little-endian.
func fnv(words ...uint64) int64 {
	h := uint64(14695981039346656037)
	for _, v := range words {
		for range 8 {
			h = (h ^ (v & 0xff)) * 1099511628211
			v >>= 8
		}
	}
	return int64(h)
}

// optimFingerprint hashes an optimizer config (the kind and the hyper-parameters' bits).
func optimFingerprint(o embedding.OptimizerConfig) int64 {
	return fnv(uint64(o.Kind), math.Float64bits(o.LR), math.Float64bits(o.Eps),
		math.Float64bits(o.Beta1), math.Float64bits(o.Beta2), math.Float64bits(o.WeightDecay))
}

// collectionIdent hashes what tells a collection from another on every rank alike: each table's
// name, rows, width and sharding kind (and an uneven row split), and each feature's name, table and
// pooling.
func collectionIdent(layouts []*Layout, features []embedding.Feature) int64 {
	words := []uint64{uint64(len(layouts)), uint64(len(features))}
	text := func(s string) {
		words = append(words, uint64(len(s)))
		for _, b := range []byte(s) {
			words = append(words, uint64(b))
		}
	}
	for _, l := range layouts {
		text(l.Name)
		words = append(words, uint64(l.Rows), uint64(l.Dim), uint64(l.Kind))
		if l.uneven() { // ranks splitting a table's rows otherwise would route its IDs otherwise
			for _, n := range l.count {
				words = append(words, uint64(n))
			}
		}
	}
	for _, f := range features {
		text(f.Name)
		words = append(words, uint64(f.Table), uint64(f.Pooling))
	}
	return fnv(words...)
}

// sequenceIdent marks a sequence step's exchanges (its ops differ from a pooled step's of the same
// tables).
const sequenceIdent int64 = 0x5ec0_5e90

// Phases of a drive, as sent (tagged so that other data is not mistaken for a header). A forward
// whose rank refused its batch (Collection.Abandon), or learned that a peer did, sends
// phaseAbandoned in its count stages instead of phaseForward (see abandoned).
const (
	phaseForward   int64 = 0x5ec0_0001
	phaseBackward  int64 = 0x5ec0_0002
	phaseAbandoned int64 = 0x5ec0_0003
)

// A rank whose batch is refused locally (an ID out of range, a missing feature: checks made before
// the step's first op) must not simply raise: its peers would run the step without it and pair
// their next batch with its next one, silently. So it still drives the forward's count stages, each
// sized as always, with phaseAbandoned in the header and, instead of block metadata, the refusing
// rank and the start of its reason. Every rank that meets such a block (or refused its own batch)
// stops the step there: it runs only the count stages of its route's remaining legs, marked the same
// way (in the hierarchical mode a node's ranks learn it on the node group and tell the other nodes
// on the rail groups), and then raises InvalidInputError, the refusing rank its own. No shard
// changes, no later op opens, and every rank's step number advanced by one, so the next step pairs
// the ranks' next batches.
type abandoned struct {
	rank   int    // the world rank that refused its batch
	reason string // its reason (a peer's: as much of it as the block holds)
	whole  int    // the byte length of the refusing rank's whole reason
	own    bool   // this rank refused it
}

// block is the block a marked count stage sends (per values): the refusing rank; the byte lengths
// of its whole reason (high 32 bits) and of the part the block carries (low 32 bits); and as much of
// the reason as fits, 8 bytes a value.
func (a *abandoned) block(per int) []int64 {
	out := make([]int64, per)
	msg := []byte(a.reason)
	if room := (per - 2) * 8; len(msg) > room {
		msg = msg[:max(0, room)]
	}
	whole := min(max(a.whole, len(a.reason)), math.MaxInt32)
	out[0], out[1] = int64(a.rank), int64(whole)<<32|int64(len(msg))
	for i, b := range msg {
		out[2+i/8] |= int64(b) << (8 * (i % 8))
	}
	return out
}

// abandonedFrom decodes a peer's marked block (see block). A reason cut to the block's room may end
// inside a character: the partial one is dropped.
func abandonedFrom(b []int64) *abandoned {
	carried := int(min(b[1]&math.MaxUint32, int64(len(b)-2)*8))
	msg := make([]byte, carried)
	for i := range msg {
		msg[i] = byte(b[2+i/8] >> (8 * (i % 8)))
	}
	return &abandoned{rank: int(b[0]), reason: strings.ToValidUTF8(string(msg), ""),
		whole: max(int(b[1]>>32), carried)}
}

// err is the error the step ends with at rank self. A peer's reason cut to fit the block says so,
// and where the whole one is.
func (a *abandoned) err(self int, seq int64) error {
	if a.own {
		return errs.Invalidf("rank %d refused its batch of step %d: %s", self, seq, a.reason)
	}
	reason := a.reason
	if len(reason) < a.whole {
		reason = fmt.Sprintf("%s… (cut to fit the step's first op; rank %d's own error has the whole reason)",
			reason, a.rank)
	}
	return errs.Invalidf("exchange: rank %d refused its batch of step %d: %s; the step is refused on every rank "+
		"(no rank's batch of it is used) and no shard changed", a.rank, seq, reason)
}

func phaseName(p int64) string {
	switch p {
	case phaseForward:
		return "forward"
	case phaseBackward:
		return "backward"
	case phaseAbandoned:
		return "refused forward"
	}
	return fmt.Sprintf("unknown phase %#x", p)
}

// withHeaders returns blocks (size blocks of per int64) with the header of phase before each, each
// peer's block widened to width ≥ per with zeros (see padTables).
func (x *Exchange) withHeaders(phase int64, blocks []int64, size, per, width int) []int64 {
	out := make([]int64, size*(hdrFields+width))
	for d := range size {
		b := out[d*(hdrFields+width):]
		b[hdrPhase], b[hdrStep], b[hdrOptim], b[hdrIdent], b[hdrMode] = phase, x.seq, x.optim, x.ident, modeWord(x.train)
		copy(b[hdrFields:hdrFields+per], blocks[d*per:(d+1)*per])
	}
	return out
}

// padTables is the number of tables a drive's first op on a group is sized for: at least the
// collection's, and as many as the largest collection sharing its groups (SetPadTables), so that
// two collections' first ops have one size and a rank in another collection's step than its peers
// meets them in an op gloo accepts, where the header names the mismatch (gloo aborts the process on
// unequal sizes before anything could check them).
func (x *Exchange) padTables() int {
	return max(len(x.layouts), x.pad)
}

// stripHeaders checks every peer block's header of recv (size blocks of hdrFields+width int64)
// against this rank's collection, phase and step, and returns the blocks' first per values without
// the headers; rank gives a group index's world rank for the message.
func (x *Exchange) stripHeaders(phase int64, recv []int64, size, per, width int, rank func(int) int) ([]int64, error) {
	out := make([]int64, size*per)
	for d := range size {
		b := recv[d*(hdrFields+width):]
		if b[hdrIdent] == x.ident^sequenceIdent { // this collection, the other kind of step
			// Two causes look alike here: a sequence collection over the same tables, or per-ID
			// weights that require grad on some ranks only; the message names both.
			return nil, errs.Invalidf("exchange: rank %d runs a step of rows per lookup where rank %d runs a "+
				"pooled one, or the other way round, at step %d of the collection of tables %v: either one rank "+
				"is running another sharded collection's step (a sequence collection over the same tables: every "+
				"rank must call the sharded collections in the same order, each on every rank), or this "+
				"collection's per-ID weights require grad on some ranks only (every rank's per-ID weights must "+
				"require grad alike)", rank(d), x.self, x.seq, x.tableNames())
		}
		if b[hdrIdent] != x.ident {
			return nil, errs.Invalidf("exchange: rank %d is running another sharded collection's step (its %s "+
				"of step %d) while rank %d runs the %s of step %d of the collection of tables %v: every rank must "+
				"call the sharded collections in the same order, each on every rank", rank(d), phaseName(b[hdrPhase]),
				b[hdrStep], x.self, phaseName(phase), x.seq, x.tableNames())
		}
		marked := phase == phaseForward && b[hdrPhase] == phaseAbandoned // a refused step's count stage
		if (b[hdrPhase] != phase && !marked) || b[hdrStep] != x.seq {
			return nil, errs.Invalidf("exchange: rank %d is at the %s of step %d while rank %d is at the %s of "+
				"step %d: every rank must run the same steps (each forward on every rank, and each backward on "+
				"every rank or on none); a rank that skips a backward, or runs a forward the others do not, "+
				"falls out of step", rank(d), phaseName(b[hdrPhase]), b[hdrStep], x.self, phaseName(phase), x.seq)
		}
		if b[hdrOptim] != x.optim {
			return nil, errs.Invalidf("exchange: rank %d's fused optimizer hyper-parameters differ from rank %d's at "+
				"step %d: every rank must make the same set_fused_optimizer change (a learning-rate schedule) between "+
				"the same steps, or their rows and replicas train at different rates", rank(d), x.self, x.seq)
		}
		if b[hdrMode] != modeWord(x.train) {
			return nil, errs.Invalidf("exchange: rank %d runs step %d as %s step while rank %d runs it as %s "+
				"step: put the collection in train() or eval() mode on every rank alike (an evaluation step's "+
				"dynamic-ID tables admit no ID and keep their clocks, so ranks in different modes would part)",
				rank(d), x.seq, modeName(b[hdrMode]), x.self, modeName(modeWord(x.train)))
		}
		copy(out[d*per:(d+1)*per], b[hdrFields:hdrFields+per])
	}
	return out, nil
}

// syncStage opens leg h's part of the backward with the header, in an op the size of the leg's
// count stage. Its block tells the peers which tables the rank knows to be used (block[t·metaFields]
// is 1 when its own loss or a peer it heard from in an earlier leg used table t): after the route's
// legs (one over the world, or a node's ranks and then a rail's) every rank knows the world's.
func (x *Exchange) syncStage(h int) stage {
	T := len(x.layouts)
	per, width := T*metaFields, x.padTables()*metaFields
	return stage{
		op: func() (*Op, error) {
			lg := &x.legs[h]
			blocks := make([]int64, lg.size*per)
			for d := range lg.size {
				for t, u := range x.used {
					blocks[d*per+t*metaFields] = boolInt(u) | boolInt(x.frozen[t])<<1
				}
			}
			send := x.withHeaders(phaseBackward, blocks, lg.size, per, width)
			split := fill(lg.size, int64(hdrFields+width))
			return &Op{Group: lg.group, SendI: send, SendSplits: split, RecvSplits: split}, nil
		},
		feed: func(_ *Op, recv []int64, _ []float32, _ []byte) error {
			lg := &x.legs[h]
			blocks, err := x.stripHeaders(phaseBackward, recv, lg.size, per, width, lg.rank)
			if err != nil {
				return err
			}
			for d := range lg.size {
				for t := range T {
					v := blocks[d*per+t*metaFields]
					if v < 0 || v > 2 {
						return errs.Invalidf("exchange: rank %d sent a used-table flag of %d", lg.rank(d), v)
					}
					if frozen := v == 2; frozen != x.frozen[t] {
						on, off := lg.rank(d), x.self // the rank that froze it, the one that did not
						if !frozen {
							on, off = off, on
						}
						return errs.Invalidf("exchange: table %q is frozen (requires_grad=False) on rank %d but not "+
							"on rank %d: freeze a sharded table on every rank or on none (a table some ranks "+
							"train and others do not would take only some ranks' gradients)", x.layouts[t].Name, on, off)
					}
					if v == 1 {
						x.used[t] = true
					}
				}
			}
			return nil
		},
	}
}

// tableNames lists the exchange's tables (for messages).
func (x *Exchange) tableNames() []string {
	names := make([]string, len(x.layouts))
	for i, l := range x.layouts {
		names[i] = l.Name
	}
	return names
}
