// Package dynamic holds dynamic-ID embedding tables: arbitrary int64 IDs mapped to rows of a bounded
// storage region on demand (the "HashTable" of RecIS).
//
// A [Table] is an embedding.RowSource. Its parts:
//
//   - ID map: a concurrent open-addressing hash map (linear probing, backward-shift deletion) cut into
//     lock-striped shards by the ID's hash, so several goroutines resolve IDs at once.
//   - Storage: one off-heap region reserved up to the row bound (MAP_NORESERVE), holding the weight
//     rows, the optimizer-state rows and per-row metadata (owner ID, count, last step seen, the count of
//     the eviction or import that last replaced it: backward drops a gradient whose row was freed, or
//     replaced by a checkpoint import, after its forward). Its address
//     never moves; memory is committed page by page as rows are first used, so it grows in blocks and
//     stops growing once the bound is reached. Rows come from a bump pointer ("high water") and a free
//     list of evicted rows, which is reused first.
//   - Admission: an ID gets a row only after it has been seen in MinCount training batches. Pending IDs
//     are counted in a count-min sketch (per shard, 4 rows of 8-bit counters, conservative update,
//     counters halved after a fixed number of additions so old sightings fade). A sketch rather than a
//     counting map because its memory is fixed in advance whatever the stream of new IDs (a counting map
//     needs its own eviction), it needs no allocation per ID, and its one error — counting a little high
//     on collisions — only admits an ID early, never late.
//   - Eviction: when the row bound is reached and the free list is empty, one pass selects the
//     EvictFraction of rows that are stalest (LRU: oldest last step seen) or least frequent (LFU:
//     lowest count, staler first) with a linear-time selection, resets them and frees them. The cost of
//     a pass is spread over the rows it frees, so Resolve stays amortised O(1) per ID. An LRU pass also
//     keeps the next few batches of candidates, and later passes take from them while their last step
//     is unchanged (exact, since LRU keys only grow), so most LRU passes skip the scan. Rows used in the
//     current step are never evicted. Independently, MaxAge evicts rows unseen for that many steps.
//   - Eval mode: unseen IDs resolve to -1 (they pool as zeros) or, with a configured default vector, to a
//     reserved default row; nothing is inserted or counted.
//   - Checkpoints: [Table.Export] and [Table.Import] move the whole state (ID map, counts, last steps,
//     free list, sketch with its [SketchIndexing], step and the weight and optimizer rows in use) so a
//     round trip is bit-exact and training resumes identically; a sketch saved before the indexing
//     was keeps counting by the indexing that wrote it.
//
// Each training-mode Resolve is one step of the table's clock (the collection resolves a table once
// per batch); with ManualStep the owner advances the clock with [Table.Advance] instead, which is
// needed when one Table serves several embedding tables in the same batch.
//
// Row layout follows engine/embedding: weight row r is Weights()[r*Stride : r*Stride+Dim] and its
// optimizer state is State()[r*StateWidth : (r+1)*StateWidth]. A new row's weights are drawn from
// uniform(InitLow, InitHigh) by a generator seeded with (Seed, id), so an ID's initial vector does not
// depend on which row it lands in or on the order IDs arrive; its state row starts at zero.
package dynamic
