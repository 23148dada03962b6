// Package feature is recgo's FeatureEngine (RecIS §3.1): per-field transform chains (hash, mod,
// bucketize, truncate, filter, cross, fill_missing, position, recency) declared in a spec, fused
// across fields by a dependency-aware planner, and executed as one multi-field call per fused group
// over a flattened element space cut into equal tiles.
//
// Use it in three steps:
//
//	spec, err := feature.ParseSpec(jsonBytes)  // or build a *Spec in Go
//	eng, err := feature.Compile(spec)          // validates, plans the fused groups
//	res, err := eng.Apply(batch)               // one call per batch; res.Feature("hist") etc.
//
// [Engine.Apply] is the package's one entry point for batches; it is safe for concurrent use (any
// number of goroutines may Apply one Engine at once) and keeps no reference to the batch after it
// returns. Other engine packages (e.g. the planner's data profiler, the input pipeline) call it
// directly on batches they read: build a [Batch] whose Inputs follow [Engine.Inputs], read the
// [Result] with Feature and Weights, and Release it (or Assemble it into one off-heap [Output]).
//
// # Weights and limits
//
// An input may carry per-value float32 weights (a KeyedJaggedTensor's). They travel with their
// values through every transform: element-wise ops keep them, truncate and filter drop them with
// their values, fill_missing gives the value it inserts weight 1, and a crossed tuple weighs the
// product of its weighted fields' weights. A result feature is weighted when a weighted input
// reaches it.
//
// Every buffer whose size comes from a batch (the values one fused group produces, the assembled
// output) is sized before it is allocated and checked against [Spec.MaxValues]; a batch past it
// fails with a capacity error (errs.ErrCapacity) naming the feature and the size.
//
// # Transforms
//
// Every transform is exact and defined on int64 IDs unless said otherwise. A field is jagged: B bags
// (one per sample) of values. All definitions below are what the Python reference
// (recgo.feature.reference) computes with torch ops.
//
//   - hash(seed): XXH64 with the given 64-bit seed, of the 8 little-endian bytes of each int64 ID,
//     or of each byte string; the 64-bit result as int64 with the same bits (see kernels.XXH64).
//   - mod(n): floor modulo, x mod n in [0, n), n > 0 (torch.remainder).
//   - bucketize(boundaries): the number of boundaries b with b <= x (torch.bucketize(right=True));
//     boundaries strictly increasing in the field's type; int64 fields compare exactly in int64
//     (boundaries must then be integers in int64's range, read from their JSON literals without a
//     detour through float64, so 2^53+1 or two nanosecond timestamps one apart stay distinct), float
//     fields (float32 or float64 input) in float64. NaN input is an error.
//   - truncate(n, keep): keep the first or the last n values of each bag (n >= 1).
//   - filter(values | range, mode): drop (mode "drop", the default) or keep (mode "keep") the values
//     in a set or in the half-open range [lo, hi); order within a bag is preserved. "mask" is an
//     alias. IDs compare exactly in int64; a float field's values in float64 (float32 widened), a
//     NaN being in no set and no range.
//   - cross(fields, seed): a new field from 2 to 8 other features' outputs: per sample, the
//     Cartesian product of their bags, first field most significant, each tuple hashed as
//     XXH64(le64(x1) || le64(x2) || ..., seed) (kernels.HashTuple).
//   - fill_missing(default): an empty bag becomes the one-value bag [default]; others are unchanged.
//   - position(from): each value's index in its bag, counted from the first value (from "first",
//     the default) or from the last (from "last": the latest event of a sequence is 0).
//   - recency(reference): reference[b] - x for each value x of sample b, in wrapping int64
//     arithmetic, where reference names a raw int64 input with one value per sample (e.g. the
//     request time): the time since each event of a timestamp sequence; bucketize it next.
//
// Float fields may be filtered and truncated and must then be bucketized; byte-string fields start
// with hash; every feature's output is int64. A feature whose first op is cross has no input of its
// own.
package feature
