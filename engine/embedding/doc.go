// Package embedding holds recgo's embedding tables and the collection that pools them.
//
// # Tables and storage layout
//
// A [Table] is a [RowSource] (raw ID → storage row), a storage region of float32 values, a row
// stride, an embedding dimension and an optimizer. Row r of the table occupies
//
//	data[r*stride : r*stride+dim]            the embedding weights
//	data[r*stride+dim : r*stride+stride]     unused padding (stride ≥ dim)
//
// Optimizer state is kept in a separate region, one state row per storage row, with its own stride
// given by [OptimizerConfig.StateWidth] (0 for SGD, 1 for row-wise Adagrad, dim for Adagrad, 2·dim
// for Adam/AdamW: first moment then second moment). Keeping state separate keeps the weight rows
// dense for the forward gather (the hot path reads only weights) and lets Python expose weights and
// state as two plain tensors. A fresh or reset row must have its state row set to zero, which is
// the state every optimizer starts from; [Table.ResetRows] does both (weights to a given init).
//
// Fixed-size tables use [RangeSource] and storage allocated by [NewFixedTable]. Other row sources
// (dynamic-ID tables) build a [Table] with [NewTable] over storage they own.
package embedding
