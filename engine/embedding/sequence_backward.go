package embedding

// groupSequence groups table ti's sequence lookups by distinct ID for backward (the counting sort
// of RecIS Algorithm 1, as groupTable does for pooled features): the contributions to distinct ID
// u become entries start[u]..start[u+1], in lookup order, each the offset of its lookup's output
// row (base[k] + position in key k · dim). Unpooled lookups have unit scale, so scale stays nil.
func (s *SequenceCollection) groupSequence(ti, B int, base []int64, ctx *Context) {
	c, tc := s.view, &ctx.tables[ti]
	g, u := &tc.grp, len(tc.uniq)
	g.start = resize(g.start, u+1)
	clear(g.start)
	g.off = resize(g.off, len(tc.inv))
	g.scale = nil
	g.next = resize(g.next, u)
	for _, x := range tc.inv {
		g.start[x+1]++
	}
	for i := 0; i < u; i++ {
		g.start[i+1] += g.start[i]
	}
	next := g.next
	for i := range next {
		next[i] = int32(g.start[i])
	}
	d := int64(c.Tables[ti].Dim)
	p := 0
	for _, f := range c.features[ti] {
		k := ctx.featKey[f]
		v0, v1 := ctx.offsets[k*B], ctx.offsets[(k+1)*B]
		o := base[k]
		for _, x := range tc.inv[p : p+int(v1-v0)] {
			q := next[x]
			next[x]++
			g.off[q] = o
			o += d
		}
		p += int(v1 - v0)
	}
}
