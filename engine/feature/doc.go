// Package feature is recgo's FeatureEngine (RecIS §3.1): per-field transform chains (hash, mod,
// bucketize, truncate, filter, cross, fill_missing) declared in a spec, fused across fields by a
// dependency-aware planner, and executed as one multi-field call per fused group over a flattened
// element space cut into equal tiles.
//
// Use it in three steps:
//
//	spec, err := feature.ParseSpec(jsonBytes)  // or build a *Spec in Go
//	eng, err := feature.Compile(spec)          // validates, plans the fused groups
//	res, err := eng.Apply(batch)               // one call per batch; res.Feature("hist") etc.
//
// [Engine.Apply] is the package's one entry point for batches; it is safe for concurrent use and
// keeps no reference to the batch after it returns. Other engine packages (e.g. the planner's data
// profiler) call it directly on batches they read.
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
//     boundaries strictly increasing; int64 fields compare exactly in int64 (boundaries must then be
//     integers), float fields (float32 or float64 input) in float64. NaN input is an error.
//   - truncate(n, keep): keep the first or the last n values of each bag (n >= 1).
//   - filter(values | range, mode): drop (mode "drop", the default) or keep (mode "keep") the values
//     in a set or in the half-open range [lo, hi); order within a bag is preserved. "mask" is an alias.
//   - cross(a, b, seed): a new field from two other features' outputs: per sample, the Cartesian
//     product of a's bag and b's bag, a-major, each pair hashed as XXH64(le64(x) || le64(y), seed).
//   - fill_missing(default): an empty bag becomes the one-value bag [default]; others are unchanged.
//
// Float fields must start with bucketize and byte-string fields with hash; every feature's output is
// int64. A feature whose first op is cross has no input of its own.
package feature
