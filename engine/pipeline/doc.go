// Package pipeline is recgo's multistage input pipeline (RecIS §3.3): while the trainer runs step
// t, goroutines prepare steps t+1..t+Depth through three stages,
//
//	READ       a reader.Source fills a raw batch (one goroutine: the source is sequential)
//	TRANSFORM  the FeatureEngine turns the raw fields into the output features (Workers goroutines)
//	FORMAT     remap through a plan (planner.Remap), lay the KeyedJaggedTensor out off-heap,
//	           deduplicate each table's IDs (embedding.TableDedup) so the forward need not, and,
//	           given a sharded collection's shard.Partitioner, partition those distinct IDs by
//	           owner (shard.Partition) so its step need not either
//
// and [Pipeline.Next] hands the batches out in step order. No embedding value is read ahead: lookups
// and updates stay in the training step, in order.
//
// Contracts:
//   - Bounded: at most Depth batches are read but not yet handed out (the READ stage blocks on a
//     semaphore the consumer releases, which is the back-pressure), and the off-heap buffers of
//     prepared batches are recycled from a pool of at most Depth+Workers+2; memory is bounded by
//     the depth plus the batches the consumer still holds.
//   - Ordered and deterministic: batch t is the same for every Depth and Workers, and equals a
//     serial reader + FeatureEngine run (Depth 0 is that serial schedule: everything runs inside Next).
//   - Errors: an error in any stage is returned by the Next call of the step that needs that batch,
//     naming the step and the stage ([StageError]); earlier batches are delivered normally.
//   - Cancellable: [Pipeline.Close] (or the context given to [New]) stops every goroutine and waits
//     for them; a consumer that stops early leaves nothing running after Close.
//   - Concurrency: Next, Position and Close are for one consumer goroutine; Stats and
//     [Prepared.Close] may be called from any goroutine.
package pipeline
