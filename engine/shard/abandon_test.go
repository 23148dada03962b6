package shard

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/embedding"
)

// runGroups drives every rank's exchange of topo as gloo would: each op runs as soon as every
// member of its group instance has it pending, whatever the other groups do (a rank may be an op
// ahead on one group while its node's peers finish another). Every op must find its peers at an op
// of the same element type and matching splits (gloo aborts otherwise), and no rank may be left
// waiting at an op its peers never run. It returns each rank's error (nil: its drive finished).
func runGroups(t *testing.T, topo Topology, xs []*Exchange) []error {
	t.Helper()
	W := topo.World()
	failed, done, pending := make([]error, W), make([]bool, W), make([]*Op, W)
	members := func(r int, g Group) []int {
		var out []int
		for q := range W {
			if g == GroupWorld || (g == GroupNode && topo.Node(q) == topo.Node(r)) || (g == GroupRail && topo.Local(q) == topo.Local(r)) {
				out = append(out, q)
			}
		}
		return out
	}
	for {
		for r, x := range xs {
			if done[r] || pending[r] != nil {
				continue
			}
			op, err := x.Next()
			if err != nil || op == nil {
				failed[r], done[r] = err, true
				continue
			}
			pending[r] = op
		}
		progress, finished := false, true
		for r, op := range pending {
			if op == nil {
				continue
			}
			finished = false
			m := members(r, op.Group)
			ready := true
			for _, q := range m {
				ready = ready && pending[q] != nil && pending[q].Group == op.Group
			}
			if !ready {
				continue
			}
			sendFs := make(map[int][]float32)
			for _, q := range m {
				require.Equal(t, op.Elem, pending[q].Elem, "ranks %d and %d disagree on the op's element type", r, q)
				if op.Elem == ElemFloat32 {
					sendFs[q] = make([]float32, pending[q].SendLen())
					require.NoError(t, pending[q].WriteFloats(sendFs[q]))
				}
			}
			recvs := make([][3]any, len(m))
			for i, q := range m { // what each member p sends to q: p's block at q's index i
				var ri []int64
				rf, rb := []float32{}, []byte{}
				for j, p := range m {
					po := pending[p]
					require.Equal(t, po.SendSplits[i], pending[q].RecvSplits[j], "rank %d sends rank %d another size than it expects", p, q)
					lo := sum(po.SendSplits[:i])
					hi := lo + po.SendSplits[i]
					switch op.Elem {
					case ElemFloat32:
						rf = append(rf, sendFs[p][lo:hi]...)
					case ElemByte:
						rb = append(rb, po.SendB[lo:hi]...)
					default:
						ri = append(ri, po.SendI[lo:hi]...)
					}
				}
				recvs[i] = [3]any{ri, rf, rb}
			}
			for i, q := range m {
				if err := xs[q].Feed(recvs[i][0].([]int64), recvs[i][1].([]float32), recvs[i][2].([]byte)); err != nil {
					failed[q], done[q] = err, true
				}
				pending[q] = nil
			}
			progress = true
			break
		}
		if finished {
			return failed
		}
		require.True(t, progress, "ranks wait at ops their peers never run: %v (errors %v)", pending, failed)
	}
}

// A rank whose batch is refused locally (an ID out of range, here) abandons the step instead of
// raising alone: every rank's drive fails at the same op with an error naming that rank and its
// reason, no op is left half-run, no shard changes, the ranks' step numbers stay equal, and the next
// steps train every rank as the single collection trained on the good batches only. Before, the
// refusing rank consumed no step number, so its next batch was paired with its peers' current one.
func TestOneRankRefusingItsBatchStopsTheStepOnEveryRank(t *testing.T) {
	kinds, rows, dims := mixedKinds, mixedRows, mixedDims
	opt := embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}
	for _, tc := range []struct {
		shape
		mode Mode
	}{{shape{1, 2}, Flat}, {shape{2, 2}, Flat}, {shape{2, 2}, Hierarchical}, {shape{2, 1}, Hierarchical}} {
		t.Run(fmt.Sprintf("%dx%d/%s", tc.nodes, tc.per, tc.mode), func(t *testing.T) {
			w := newTestWorld(t, tc.nodes, tc.per, tc.mode, kinds, rows, dims, opt)
			W, Bl, bad := w.topo.World(), 3, 1
			rng := rand.New(rand.NewPCG(5, 6))
			for step := range 4 {
				_, lens, vals := randBatch(rng, len(kinds), W*Bl, rows)
				steps, xs := make([]*Step, W), make([]*Exchange, W)
				if step == 1 { // rank 1's batch has an ID out of range: it abandons; the others begin
					for r, c := range w.ranks {
						b := sliceBatch(lens, vals, r*Bl, (r+1)*Bl)
						if r == bad {
							b.Lengths[0]++
							b.Values = append([]int64{rows[0] + 7}, b.Values...)
							_, err := c.Begin(b)
							require.ErrorContains(t, err, "out of range")
							steps[r], err = c.Abandon(err.Error(), false)
							require.NoError(t, err)
						} else {
							var err error
							steps[r], err = c.Begin(b)
							require.NoError(t, err)
						}
						xs[r] = steps[r].X
					}
					before := make([][]float32, len(kinds))
					for _, c := range w.ranks {
						for i := range kinds {
							before[i] = append(before[i], c.Shards[i].Data...)
						}
					}
					for r, err := range runGroups(t, w.topo, xs) {
						require.Error(t, err, "rank %d", r)
						require.ErrorContains(t, err, "refused its batch of step 2")
						require.ErrorContains(t, err, "out of range")
						require.ErrorContains(t, err, fmt.Sprintf("rank %d", bad))
						require.Error(t, steps[r].Pool(make([]float32, Bl*w.ref.Width())), "rank %d: a refused step has no output", r)
						require.Error(t, steps[r].Backward(make([]float32, Bl*w.ref.Width()), true), "rank %d: nor a backward", r)
					}
					after := make([][]float32, len(kinds))
					for _, c := range w.ranks {
						for i := range kinds {
							after[i] = append(after[i], c.Shards[i].Data...)
						}
					}
					require.Equal(t, before, after, "a refused step changes no shard")
					for _, c := range w.ranks {
						require.Equal(t, w.ranks[0].steps.Load(), c.steps.Load(), "step numbers stay equal")
					}
					continue
				}
				width := w.ref.Width()
				refOut := make([]float32, W*Bl*width)
				ctx, err := w.ref.Forward(sliceBatch(lens, vals, 0, W*Bl), refOut, true, true)
				require.NoError(t, err)
				for r, c := range w.ranks {
					steps[r], err = c.Begin(sliceBatch(lens, vals, r*Bl, (r+1)*Bl))
					require.NoError(t, err)
					xs[r] = steps[r].X
				}
				for r, err := range runGroups(t, w.topo, xs) {
					require.NoError(t, err, "rank %d step %d", r, step)
				}
				gradOut := randGrad(rng, len(refOut))
				for r, s := range steps {
					out := make([]float32, Bl*width)
					require.NoError(t, s.Pool(out))
					require.InDeltaSlice(t, refOut[r*Bl*width:(r+1)*Bl*width], out, 1e-6, "pooled, rank %d step %d", r, step)
					require.NoError(t, s.Backward(gradOut[r*Bl*width:(r+1)*Bl*width], true))
				}
				for r, err := range runGroups(t, w.topo, xs) {
					require.NoError(t, err, "backward, rank %d step %d", r, step)
				}
				require.NoError(t, w.ref.Backward(ctx, gradOut, nil, nil))
				for i := range kinds {
					for id := range rows[i] {
						require.InDeltaSlice(t, w.ref.Tables[i].Row(id), w.globalRow(i, id), 1e-5, "step %d table %d row %d", step, i, id)
					}
				}
			}
		})
	}
}

// A refused sequence step marks its headers as a sequence step's: its peers, in the same sequence
// step, stop with it.
func TestOneRankRefusingItsSequenceBatch(t *testing.T) {
	w := newTestWorld(t, 1, 2, Flat, mixedKinds, mixedRows, mixedDims, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
	rng := rand.New(rand.NewPCG(7, 8))
	_, lens, vals := randBatch(rng, len(mixedKinds), 4, mixedRows)
	q, err := w.ranks[0].BeginSequence(sliceBatch(lens, vals, 0, 2))
	require.NoError(t, err)
	s1, err := w.ranks[1].Abandon("feature \"f2\" is missing", true)
	require.NoError(t, err)
	errs := runGroups(t, w.topo, []*Exchange{q.Step.X, s1.X})
	require.ErrorContains(t, errs[0], "rank 1 refused its batch of step 1: feature \"f2\" is missing")
	require.ErrorContains(t, errs[1], "rank 1 refused its batch of step 1: feature \"f2\" is missing")
}

// A refused step's reason travels in the first op's block: one that fits arrives whole; a longer
// one arrives cut, never inside a character, says so and keeps its whole length when a node's rank
// relays it to the other nodes.
func TestAbandonedReasonTravelsWholeOrSaysItWasCut(t *testing.T) {
	long := strings.Repeat("feature 'é' is missing; ", 8)
	for _, tc := range []struct {
		name, reason string
		per          int
		cut          bool
	}{
		{"fits", "ID 99 of feature 'f' is out of range", 10, false},
		{"exactly fills", strings.Repeat("x", 64), 10, false},
		{"cut", long, 10, true},
		{"cut inside a character", strings.Repeat("x", 63) + "é" + long, 10, true},
		{"no room", long, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := &abandoned{rank: 3, reason: tc.reason, own: true}
			got := abandonedFrom(sent.block(tc.per))
			require.Equal(t, 3, got.rank)
			require.Equal(t, len(tc.reason), got.whole)
			require.True(t, utf8.ValidString(got.reason))
			require.True(t, strings.HasPrefix(tc.reason, got.reason))
			relayed := abandonedFrom(got.block(tc.per)) // a node's rank tells the other nodes
			require.Equal(t, got, relayed)
			msg := got.err(0, 7).Error()
			require.Contains(t, msg, "rank 3 refused its batch of step 7: "+got.reason)
			if tc.cut {
				require.Less(t, len(got.reason), len(tc.reason))
				require.Contains(t, msg, "… (cut to fit the step's first op; rank 3's own error has the whole reason)")
			} else {
				require.Equal(t, tc.reason, got.reason)
				require.NotContains(t, msg, "cut to fit")
			}
		})
	}
}
