// Package embedding holds recgo's embedding tables and the collection that pools them: the RecIS
// embedding engine for one process (per-table deduplication, index-aware segment reduction, fused
// sparse optimizers).
//
// # Tables and storage layout
//
// A [Table] is a [RowSource] (raw ID → storage row), a storage region of float32 values, a row
// stride, an embedding dimension, an optimizer and a step counter. Row r of the table occupies
//
//	Data[r*Stride : r*Stride+Dim]            the embedding weights
//	Data[r*Stride+Dim : (r+1)*Stride]        padding, never read or written (Stride ≥ Dim)
//
// Optimizer state is kept in a separate region, one state row per storage row, with its own width
// w = [OptimizerConfig.StateWidth](Dim):
//
//	State[r*w : (r+1)*w]
//	  SGD, none:         w = 0 (State is nil)
//	  row-wise Adagrad:  w = 1     the row's accumulator of mean(g²)
//	  Adagrad:           w = Dim   per-value accumulators of g²
//	  Adam, AdamW:       w = 2·Dim first moment (Dim values) then second moment (Dim values)
//
// Separate arrays keep the weight rows dense for the forward gather (the hot path reads only
// weights; interleaving Adam's state would triple the stride and the cache lines a lookup pulls in)
// and let Python expose weights and state as two plain zero-copy tensors. Step[0] counts fused
// updates per table (Adam's bias correction uses it). Every optimizer starts a row from zero state,
// so a fresh or reused row needs its state row zeroed: [Table.ResetRows] does that and sets the
// weights through a caller-given initializer.
//
// Fixed-size tables come from [NewFixedTable] (off-heap storage, a [RangeSource]). Other row sources
// (dynamic-ID tables in engine/dynamic) build a [Table] with [NewTable] over storage they own, and
// implement [TableBuilder] so the C ABI can put them into a collection by handle.
//
// # Training step
//
// [Collection.Forward] validates the batch ([ValidateBatch]), deduplicates each table's IDs (a
// slot array indexed by ID, guarded by a seen-bitmap, for fixed tables up to 2^26 rows; a hash map
// otherwise) and calls Resolve once per distinct ID. It then pools every (feature, sample) segment
// with one writer per output (kernels.SegmentReduce), in one of two orders chosen by the batch's
// mean bag length: with long bags, work items are chunks of samples of one feature (the row reads
// dominate, and a table's hot rows stay cached across its bags); with about one ID per bag, chunks
// of samples over all features (the output writes dominate, and go in address order). Either way
// the rows of the next kernel call are prefetched (kernels.PrefetchRows, and PrefetchStrided for
// the output lines) while the current one is summed. Fixed tables pool straight from the batch's IDs (row = ID); other tables from the row
// offsets dedup resolved. A forward that keeps no context (inference) only range-checks fixed
// tables' IDs: there is nothing to deduplicate for.
//
// [Collection.Backward] merges the output gradient into one gradient per distinct row of each
// table, then applies the table's fused optimizer to those rows (kernels.SGDRows, AdagradRows,
// RowwiseAdagradRows, AdamRows; one write per distinct row, RecIS Algorithm 1), or hands the
// per-row gradients back. The merge takes one of two paths, chosen per batch when the forward
// keeps its context:
//
//   - Sample-order scatter (kernels.SegmentScatter), when no table holds more than a core's share
//     of the lookups: each goroutine takes a table and walks the samples in order, reading each
//     (feature, sample) gradient segment once (prefetched a chunk ahead) and adding it into the
//     merged rows of its lookups' distinct IDs (one table at a time keeps its hot merged rows in
//     cache; groups of tables interleaved by sample chunks were slower). A single-feature
//     table numbers its distinct IDs in that same order, so its merged rows need no zeroing.
//   - Grouped by row, when one table dominates: the forward groups the lookups by destination row
//     (counting sort on the inverse map, each lookup's output-gradient offset and scale computed as
//     it is placed) and backward splits every table by chunks of distinct rows, gathering each
//     row's contributions with kernels.SegmentReduce.
//
// Release returns a context's buffers for reuse.
//
// Concurrency: Forward and Backward may run concurrently with each other on the same collection
// only if they touch different rows (as in any Hogwild-style trainer); Close waits for running calls.
package embedding
