package embedding

import "math/bits"

// collectEach is dedupTable's collection without deduplication (Options.NoDedup): every lookup of
// table ti is resolved on its own, duplicates included (uniq holds each lookup's ID, inv is the
// identity), so a dynamic table's row source sees every occurrence. With keep the lookups are then
// merged by storage row (resolveTable's mergeRows), so that backward still sums each row's gradients
// and updates it once: the results equal those of the deduplicating path.
func (c *Collection) collectEach(ti int, b Batch, B int, featKey []int, offsets []int64, tc *tableCtx) {
	for _, f := range c.features[ti] {
		k := featKey[f]
		tc.uniq = append(tc.uniq, b.Values[offsets[k*B]:offsets[(k+1)*B]]...)
	}
	for i := range tc.inv {
		tc.inv[i] = int32(i)
	}
}

// rowMerge is mergeRows's scratch (reused across passes).
type rowMerge struct {
	order, tmp, grp, head, renum []int32
}

// radixBits is the digit width of mergeRows's radix sort.
const radixBits = 11

// mergeRows turns a table context whose lookups were resolved one by one (uniq: each lookup's ID,
// inv: the identity, rows: each lookup's row in [-1, nrows)) into the form deduplication gives:
// the distinct rows in first-seen order, inv mapping each lookup to its row's index. It groups the
// lookups with a stable radix sort by row (as a sparse gradient's coalesce does), not with the
// forward's hash or slot-array dedup. Unresolved lookups (row −1) are not merged: each stays an
// entry of its own (they take no gradient).
func (tc *tableCtx) mergeRows(nrows int64) {
	n := len(tc.rows)
	if n == 0 {
		return
	}
	m := &tc.merge
	m.order, m.tmp = resize(m.order, n), resize(m.tmp, n)
	for i := range m.order {
		m.order[i] = int32(i)
	}
	var count [1 << radixBits]int
	for shift := 0; shift < bits.Len64(uint64(nrows)); shift += radixBits {
		clear(count[:])
		for _, p := range m.order {
			count[(uint64(tc.rows[p]+1)>>shift)&(1<<radixBits-1)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, p := range m.order {
			d := (uint64(tc.rows[p]+1) >> shift) & (1<<radixBits - 1)
			m.tmp[count[d]] = p
			count[d]++
		}
		m.order, m.tmp = m.tmp, m.order
	}
	// Runs of one row are its lookups in lookup order (the sort is stable): run g starts at its
	// first lookup p, marked head[p] = g+1.
	m.grp, m.head = resize(m.grp, n), resize(m.head, n)
	clear(m.head)
	g, prev := int32(-1), int64(-2)
	for _, p := range m.order {
		r := tc.rows[p]
		if r < 0 || r != prev {
			g++
			m.head[p] = g + 1
		}
		m.grp[p] = g
		prev = r
	}
	// Number the runs in first-seen order, compacting uniq and rows in place (a run's entry moves
	// to an index at most its first lookup's, which is read before it can be overwritten).
	m.renum = resize(m.renum, int(g)+1)
	u := int32(0)
	for p := 0; p < n; p++ {
		if h := m.head[p]; h > 0 {
			m.renum[h-1] = u
			tc.uniq[u], tc.rows[u] = tc.uniq[p], tc.rows[p]
			u++
		}
		tc.inv[p] = m.renum[m.grp[p]]
	}
	tc.uniq, tc.rows = tc.uniq[:u], tc.rows[:u]
}
