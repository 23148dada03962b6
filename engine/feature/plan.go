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
// features it reads are complete) and fuses them: at each step the ready ops are bucketed by kind
// and one bucket becomes a group. Which bucket is a shortest-common-supersequence problem over the
// chains; the planner picks it by rollout (the pilot method): for each candidate kind it completes
// the schedule with the base rule and keeps the kind whose completion has the fewest groups. The
// base rule prefers a "safe" kind, one that no unfinished chain holds at a later position (taking
// it can never force a second group of that kind), then the bucket holding the op with the longest
// remaining path (its chain plus the chains of cross features waiting on it), then the larger
// bucket, then OpKind order. Rollout is
// never worse than the base rule alone. Every op joins exactly one group, so |G| <= Σ d_i (RecIS
// Eq. 1). A dependency cycle between cross features is an error. With unfused, every op is its own
// group, feature by feature in dependency order.
func buildPlan(feats []compiled, unfused bool) (Plan, error) {
	n := len(feats)
	sc := &scheduler{feats: feats, next: make([]int, n), waiting: make([]int, n), dependents: make([][]int, n)}
	for f, c := range feats {
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
	sc.height = make([]int, n)
	for f := range sc.height {
		sc.height[f] = -1
	}
	for f, c := range feats {
		sc.heightOf(f)
		if len(c.ops) == 0 {
			sc.finish(f) // an input passed through unchanged is complete from the start
		}
	}
	var plan Plan
	for _, c := range feats {
		plan.CallsBefore += len(c.ops)
	}
	for unfused {
		f := -1
		for g := range feats {
			if sc.ready(g) {
				f = g
				break
			}
		}
		if f < 0 {
			plan.CallsAfter = len(plan.Groups)
			return plan, nil
		}
		for sc.ready(f) {
			plan.Groups = append(plan.Groups, sc.take(feats[f].ops[sc.next[f]].kind, []int{f}))
		}
	}
	for {
		buckets, later := sc.buckets()
		kind := -1
		bestLen := 0
		for k := range buckets {
			if len(buckets[k]) == 0 {
				continue
			}
			trial := sc.clone()
			trial.take(OpKind(k), buckets[k])
			l := trial.rollout()
			if kind < 0 || l < bestLen || (l == bestLen && sc.better(k, kind, buckets, later)) {
				kind, bestLen = k, l
			}
		}
		if kind < 0 {
			break
		}
		plan.Groups = append(plan.Groups, sc.take(OpKind(kind), buckets[kind]))
	}
	plan.CallsAfter = len(plan.Groups)
	return plan, nil
}

// scheduler is the planner's state: how far each feature's chain has been scheduled.
type scheduler struct {
	feats      []compiled
	next       []int   // index of each feature's next unscheduled op
	waiting    []int   // unfinished sources of each cross feature
	dependents [][]int // cross features reading each feature (shared, read-only)
	height     []int   // longest op path from a feature's first op to the end (shared, read-only)
}

func (s *scheduler) clone() *scheduler {
	c := *s
	c.next, c.waiting = slices.Clone(s.next), slices.Clone(s.waiting)
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

// ready reports whether feature f has an op whose dependencies are all scheduled.
func (s *scheduler) ready(f int) bool { return s.waiting[f] == 0 && s.next[f] < len(s.feats[f].ops) }

// buckets groups the ready features by the kind of their next op, and counts the unscheduled ops
// of each kind behind the ready ones (later in a chain, or in a chain not ready yet).
func (s *scheduler) buckets() (b [numOpKinds][]int, later [numOpKinds]int) {
	for f, c := range s.feats {
		start := s.next[f]
		if s.ready(f) {
			k := c.ops[start].kind
			b[k] = append(b[k], f)
			start++
		}
		for _, o := range c.ops[start:] {
			later[o.kind]++
		}
	}
	return b, later
}

// crit is the longest remaining path among a bucket's ops.
func (s *scheduler) crit(fs []int) int {
	c := 0
	for _, f := range fs {
		c = max(c, s.heightOf(f)-s.next[f])
	}
	return c
}

// better is the base rule's preference of kind a over kind b.
func (s *scheduler) better(a, b int, buckets [numOpKinds][]int, later [numOpKinds]int) bool {
	if safeA, safeB := later[a] == 0, later[b] == 0; safeA != safeB {
		return safeA
	}
	ca, cb := s.crit(buckets[a]), s.crit(buckets[b])
	if ca != cb {
		return ca > cb
	}
	return len(buckets[a]) > len(buckets[b])
}

// take schedules the next op of each feature in fs (all of kind k) as one group.
func (s *scheduler) take(k OpKind, fs []int) Group {
	g := Group{Op: k.String()}
	for _, f := range fs {
		g.members = append(g.members, member{feat: f, op: s.next[f]})
		g.Features = append(g.Features, s.feats[f].name)
		s.next[f]++
		if s.next[f] == len(s.feats[f].ops) {
			s.finish(f)
		}
	}
	return g
}

// finish releases the cross features waiting on f, whose chain is now fully scheduled.
func (s *scheduler) finish(f int) {
	for _, d := range s.dependents[f] {
		s.waiting[d]--
		if s.waiting[d] == 0 && len(s.feats[d].ops) == 0 {
			s.finish(d)
		}
	}
}

// rollout completes the schedule with the base rule and returns the number of groups it took.
func (s *scheduler) rollout() int {
	groups := 0
	for {
		buckets, later := s.buckets()
		best := -1
		for k := range buckets {
			if len(buckets[k]) > 0 && (best < 0 || s.better(k, best, buckets, later)) {
				best = k
			}
		}
		if best < 0 {
			return groups
		}
		s.take(OpKind(best), buckets[best])
		groups++
	}
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
