package feature

import (
	"container/heap"
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
	work        int     // scheduler steps and op moves spent planning, rollouts included (tests)
}

// Reduction is the fraction of invocations fusion removes, 1 - CallsAfter/CallsBefore (0 when there
// are no ops).
func (p Plan) Reduction() float64 {
	if p.CallsBefore == 0 {
		return 0
	}
	return 1 - float64(p.CallsAfter)/float64(p.CallsBefore)
}

// rolloutBudget bounds the work all rollouts of one plan may spend, beyond a share proportional to
// the spec's size: past it the planner decides by the base rule alone, so planning stays
// near-linear in the number of ops whatever the spec's shape.
const rolloutBudget = 1 << 20

// buildPlan orders the ops topologically (each feature's chain in order; a cross op after all the
// features it reads are complete) and fuses them: at each step the ready ops are bucketed by kind
// and one bucket becomes a group. Which bucket is a shortest-common-supersequence problem over the
// chains. A "safe" kind, one that no unfinished chain holds at a later position, is taken at once:
// an exchange argument shows it is never worse (every remaining op of that kind is ready, so one
// group now replaces the at-least-one group any schedule needs). Otherwise the planner decides by
// rollout (the pilot method): for each candidate kind it completes the schedule with the base rule
// and keeps the kind whose completion has the fewest groups. The base rule prefers a safe kind,
// then the bucket holding the op with the longest remaining path (its chain plus the chains of
// cross features waiting on it), then the larger bucket, then OpKind order. Rollout is never
// worse than the base rule alone; it runs within a work budget proportional to the spec (plus
// rolloutBudget), after which the base rule decides. Every op joins exactly one group, so
// |G| <= Σ d_i (RecIS Eq. 1). A dependency cycle between cross features is an error. With unfused,
// every op is its own group, feature by feature in dependency order.
//
// The scheduler keeps the ready features bucketed by kind and updates the buckets as ops are
// taken, so a step costs the size of the group it takes, not a scan of every chain.
func buildPlan(feats []compiled, unfused bool) (Plan, error) {
	n := len(feats)
	var plan Plan
	sc := &scheduler{feats: feats, next: make([]int, n), waiting: make([]int, n), dependents: make([][]int, n), work: &plan.work}
	for f, c := range feats {
		plan.CallsBefore += len(c.ops)
		for _, o := range c.ops {
			sc.rem[o.kind]++
		}
		if len(c.ops) > 0 && c.ops[0].kind == OpCross {
			for _, s := range c.ops[0].srcs {
				sc.waiting[f]++
				sc.dependents[s] = append(sc.dependents[s], f)
			}
		}
	}
	if err := checkCycles(feats, sc.dependents, sc.waiting); err != nil {
		return Plan{}, err
	}
	if unfused {
		plan.Groups = unfusedGroups(feats, sc.dependents, slices.Clone(sc.waiting))
		plan.CallsAfter = len(plan.Groups)
		return plan, nil
	}
	sc.height = make([]int, n)
	for f := range sc.height {
		sc.height[f] = -1
	}
	for f := range feats {
		sc.heightOf(f)
	}
	for f, c := range feats {
		switch {
		case len(c.ops) == 0:
			sc.finish(f) // an input passed through unchanged is complete from the start
		case c.ops[0].kind != OpCross: // cross features are pushed when their sources finish
			sc.push(f)
		}
	}
	budget := rolloutBudget + 16*(plan.CallsBefore+n)
	for {
		kind, cands := -1, 0
		for k := range sc.bucket {
			if len(sc.bucket[k]) == 0 {
				continue
			}
			cands++
			if kind < 0 || sc.better(k, kind) {
				kind = k
			}
		}
		plan.work++
		if kind < 0 {
			break
		}
		if cands > 1 && !sc.safe(kind) && plan.work < budget {
			best := -1
			bestLen := 0
			for k := range sc.bucket {
				if len(sc.bucket[k]) == 0 {
					continue
				}
				trial := sc.clone()
				trial.take(OpKind(k))
				l := trial.rollout()
				if best < 0 || l < bestLen || (l == bestLen && sc.better(k, best)) {
					best, bestLen = k, l
				}
			}
			kind = best
		}
		plan.Groups = append(plan.Groups, sc.take(OpKind(kind)))
	}
	plan.CallsAfter = len(plan.Groups)
	return plan, nil
}

// scheduler is the planner's state: how far each feature's chain has been scheduled, and the
// ready features bucketed by the kind of their next op.
type scheduler struct {
	feats      []compiled
	next       []int   // index of each feature's next unscheduled op
	waiting    []int   // unfinished sources of each cross feature
	dependents [][]int // cross features reading each feature (shared, read-only)
	height     []int   // longest op path from a feature's first op to the end (shared, read-only)
	bucket     [numOpKinds][]int
	crit       [numOpKinds]int // longest remaining path among each bucket's ops
	rem        [numOpKinds]int // unscheduled ops of each kind, the ready ones included
	work       *int            // shared step counter
}

func (s *scheduler) clone() *scheduler {
	c := *s
	c.next, c.waiting = slices.Clone(s.next), slices.Clone(s.waiting)
	for k := range c.bucket {
		c.bucket[k] = slices.Clip(s.bucket[k]) // appends reallocate: s's buckets stay intact
	}
	*s.work += len(s.next)
	return &c
}

func (s *scheduler) heightOf(f int) int {
	if s.height[f] < 0 {
		h := 0
		for _, d := range s.dependents[f] {
			h = max(h, s.heightOf(d))
		}
		s.height[f] = len(s.feats[f].ops) + h
	}
	return s.height[f]
}

// push files ready feature f under the kind of its next op.
func (s *scheduler) push(f int) {
	k := s.feats[f].ops[s.next[f]].kind
	s.bucket[k] = append(s.bucket[k], f)
	s.crit[k] = max(s.crit[k], s.height[f]-s.next[f])
}

// safe reports whether no op of kind k waits behind the ready ones.
func (s *scheduler) safe(k int) bool { return s.rem[k] == len(s.bucket[k]) }

// better is the base rule's preference of kind a over kind b (both with ready ops).
func (s *scheduler) better(a, b int) bool {
	if safeA, safeB := s.safe(a), s.safe(b); safeA != safeB {
		return safeA
	}
	if s.crit[a] != s.crit[b] {
		return s.crit[a] > s.crit[b]
	}
	return len(s.bucket[a]) > len(s.bucket[b])
}

// take schedules the next op of every feature in kind k's bucket as one group (members in
// feature order).
func (s *scheduler) take(k OpKind) Group {
	fs := slices.Clone(s.bucket[k])
	slices.Sort(fs)
	s.bucket[k], s.crit[k] = nil, 0
	s.rem[k] -= len(fs)
	*s.work += len(fs)
	g := Group{Op: k.String(), Features: make([]string, len(fs)), members: make([]member, len(fs))}
	for i, f := range fs {
		g.members[i] = member{feat: f, op: s.next[f]}
		g.Features[i] = s.feats[f].name
		s.next[f]++
		if s.next[f] == len(s.feats[f].ops) {
			s.finish(f)
		} else {
			s.push(f)
		}
	}
	return g
}

// finish releases the cross features waiting on f, whose chain is now fully scheduled.
func (s *scheduler) finish(f int) {
	for _, d := range s.dependents[f] {
		s.waiting[d]--
		if s.waiting[d] == 0 {
			s.push(d) // a cross feature has at least its cross op
		}
	}
}

// rollout completes the schedule with the base rule and returns the number of groups it took.
func (s *scheduler) rollout() int {
	groups := 0
	for {
		*s.work++
		best := -1
		for k := range s.bucket {
			if len(s.bucket[k]) > 0 && (best < 0 || s.better(k, best)) {
				best = k
			}
		}
		if best < 0 {
			return groups
		}
		s.take(OpKind(best))
		groups++
	}
}

// unfusedGroups is one group per op: the ready feature with the lowest index runs its whole chain,
// then the next (Kahn's algorithm with a min-heap).
func unfusedGroups(feats []compiled, dependents [][]int, waiting []int) []Group {
	var groups []Group
	h := &intHeap{}
	for f := range feats {
		if waiting[f] == 0 {
			heap.Push(h, f)
		}
	}
	for h.Len() > 0 {
		f := heap.Pop(h).(int)
		for i, o := range feats[f].ops {
			groups = append(groups, Group{Op: o.kind.String(), Features: []string{feats[f].name}, members: []member{{feat: f, op: i}}})
		}
		for _, d := range dependents[f] {
			waiting[d]--
			if waiting[d] == 0 {
				heap.Push(h, d)
			}
		}
	}
	return groups
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
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
