// Package shard spreads embedding tables over the ranks of a distributed job and routes each
// step's lookups to their owners (RecIS §3.2). Go decides, the caller's collective library moves:
// nothing here opens a socket. The Python side (recgo.distributed) hands every [Op] to
// torch.distributed's all_to_all_single on the named group and feeds the result back.
//
// Ownership ([Layout]): hash sharding maps an ID to one of [VirtualBuckets] buckets and buckets to
// ranks in contiguous ranges, so a checkpoint re-distributes by moving whole buckets; table-wise
// (also a RecShard plan's table → rank), row-wise (contiguous ranges) and data-parallel (a replica
// per rank) layouts complete the set. A dynamic-ID table ([NewDynamicLayout], hash or table-wise)
// has no ID range: every rank's shard is a dynamic table (engine/dynamic) that the owner asks, once
// per step, for the rows of the IDs it received ([ResolveStore]); an ID without a row reads zeros
// and takes no update.
//
// A step ([Collection.Begin], [Exchange]): each rank deduplicates its batch per table, sends the
// distinct IDs along a route of all-to-all legs — one leg over the world (flat) or the two legs of
// the hierarchical exchange (hierarchical.go) — merging duplicates at every stop; the owner looks
// each distinct row up once ([embedding.Table.GatherRows]); rows return along the inverse maps and
// the requester pools them with one writer per bag (kernels.SegmentReduce). The rank a requester
// sends to on the first leg (the owner, or on the hierarchical route its node's rank for the
// owner's local index) may instead pool the requester's bag segments and return one partial sum
// per (bag, table), chosen per table, destination and step by the bytes each return costs (ownerpool.go;
// [Return], [Exchange.ForwardBags]). IDs and bag structure travel packed in their narrowest
// widths; a rank's own block never enters the all-to-all, and the rows, partial sums and gradients
// a rank sends are built straight into the caller's transport buffer ([Op.WriteFloats]), not into a
// Go buffer first. The step's large buffers come from the collection's free lists, sized to its
// tables (pool.go). Backward mirrors it:
// gradients merged per distinct row at the requester (kernels.SegmentScatter), sent along the
// same route, merged at every stop ([MergeRows]) and applied by the owner's fused optimizer
// ([embedding.Table.ApplyRows]); a linear update (SGD without weight decay) skips the owner's
// merge and adds each entry's gradient to its row ([LinearStore]). Data-parallel tables exchange
// only their gradients (replica.go).
//
// The input pipeline may do a step's local dedup and its first leg's partition by owner ahead of it,
// on its own goroutines ([Partitioner], partition.go); [Collection.BeginPrepared] then begins the
// same step without redoing either.
//
// [Counters] record each rank's IDs, returned rows and gradients within and across nodes;
// [Simulate] computes the same counts for a whole cluster from its batches, without any rank.
//
// Concurrency: an Exchange (and its Step) is used by one goroutine at a time; steps of one
// Collection may coexist, and every rank must run its steps' ops in the same order. Close excludes
// Begin.
package shard
