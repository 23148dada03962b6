package feature

import (
	"slices"
	"sort"
	"strings"

	"github.com/recgo/recgo/internal/errs"
)

// Group is one fused call: the same op kind applied to several features at once.
type Group struct {
	Op       string   `json:"op"`
	Features []string `json:"features"`
	members  []member
}

// member is one feature's op inside a group.
type member struct{ feat, op int }

// Plan is the fused execution order. CallsBefore is Σ d_i, the number of ops in all chains (one
// kernel invocation each when fields run one by one); CallsAfter is |G|, the number of groups.
type Plan struct {
	Groups      []Group `json:"groups"`
	CallsBefore int     `json:"calls_before"`
	CallsAfter  int     `json:"calls_after"`
}

// Reduction is the fraction of invocations fusion removes, 1 - CallsAfter/CallsBefore (0 when there
// are no ops).
func (p Plan) Reduction() float64 {
	if p.CallsBefore == 0 {
		return 0
	}
	return 1 - float64(p.CallsAfter)/float64(p.CallsBefore)
}

// buildPlan orders the ops topologically (each feature's chain in order; a cross op after both
// features it reads are complete) and fuses them greedily, list-scheduling style: at each step the
// ready ops are bucketed by kind, and the bucket holding the op with the longest remaining path
// (its own chain plus the chains of the cross features that wait on it) becomes one group; ties go
// to the larger bucket, then to OpKind order. Running critical ops first lets the ops behind them
// catch up with the same kinds in other fields. Every op joins exactly one group, so
// |G| <= Σ d_i (RecIS Eq. 1). A dependency cycle between cross features is an error.
func buildPlan(feats []compiled) (Plan, error) {
	n := len(feats)
	next := make([]int, n)    // index of each feature's next unscheduled op
	waiting := make([]int, n) // unfinished sources of a cross feature
	dependents := make([][]int, n)
	for f, c := range feats {
		if len(c.ops) > 0 && c.ops[0].kind == OpCross {
			for _, s := range c.ops[0].srcs {
				waiting[f]++
				dependents[s] = append(dependents[s], f)
			}
		}
	}
	if err := checkCycles(feats, dependents, waiting); err != nil {
		return Plan{}, err
	}
	height := make([]int, n) // longest op path from a feature's first op to the end of the plan
	var heightOf func(f int) int
	heightOf = func(f int) int {
		if height[f] == 0 {
			h := 0
			for _, d := range dependents[f] {
				h = max(h, heightOf(d))
			}
			height[f] = len(feats[f].ops) + h + 1 // +1 keeps 0 as "not computed"
		}
		return height[f]
	}
	var plan Plan
	ready := make([]bool, n)
	var finish func(f int)
	finish = func(f int) { // f's chain is complete: release the cross features waiting on it
		for _, d := range dependents[f] {
			waiting[d]--
			if waiting[d] == 0 {
				if len(feats[d].ops) == 0 {
					finish(d)
				} else {
					ready[d] = true
				}
			}
		}
	}
	for f, c := range feats {
		plan.CallsBefore += len(c.ops)
		if waiting[f] == 0 {
			if len(c.ops) == 0 {
				finish(f)
			} else {
				ready[f] = true
			}
		}
	}
	for {
		var buckets [numOpKinds][]int
		var crit [numOpKinds]int
		for f, r := range ready {
			if r {
				k := feats[f].ops[next[f]].kind
				buckets[k] = append(buckets[k], f)
				crit[k] = max(crit[k], heightOf(f)-next[f])
			}
		}
		best := -1
		for k := range buckets {
			if len(buckets[k]) == 0 {
				continue
			}
			if best < 0 || crit[k] > crit[best] || (crit[k] == crit[best] && len(buckets[k]) > len(buckets[best])) {
				best = k
			}
		}
		if best < 0 {
			break
		}
		g := Group{Op: OpKind(best).String()}
		for _, f := range buckets[best] {
			g.members = append(g.members, member{feat: f, op: next[f]})
			g.Features = append(g.Features, feats[f].name)
			next[f]++
			if next[f] == len(feats[f].ops) {
				ready[f] = false
				finish(f)
			}
		}
		plan.Groups = append(plan.Groups, g)
	}
	plan.CallsAfter = len(plan.Groups)
	return plan, nil
}

// checkCycles runs Kahn's algorithm over the cross dependencies and names the features on or
// behind a cycle.
func checkCycles(feats []compiled, dependents [][]int, waiting []int) error {
	left := slices.Clone(waiting)
	var queue []int
	for f := range feats {
		if left[f] == 0 {
			queue = append(queue, f)
		}
	}
	done := 0
	for len(queue) > 0 {
		f := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		done++
		for _, d := range dependents[f] {
			left[d]--
			if left[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
	if done == len(feats) {
		return nil
	}
	var stuck []string
	for f, c := range feats {
		if left[f] > 0 {
			stuck = append(stuck, c.name)
		}
	}
	sort.Strings(stuck)
	return errs.Invalidf("feature spec: cross features form a dependency cycle: %s", strings.Join(stuck, ", "))
}
