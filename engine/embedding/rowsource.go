package embedding

// RowSource resolves a table's raw IDs to rows of its storage.
//
// A fixed-size table (see [RangeSource]) maps id → row by identity after a range check. A
// dynamic-ID table (engine/dynamic) maps arbitrary int64 IDs to rows it allocates on demand.
// The collection calls Resolve once per table per batch, on the table's unique IDs (after
// deduplication), from one goroutine at a time per table; different tables may be resolved
// concurrently, so a RowSource shared by several tables must be safe for concurrent use.
type RowSource interface {
	// Resolve writes, for each id, its storage row into rows (len(rows) == len(ids)), or -1 when the id has no
	// row (an unseen id in eval mode, or one not yet admitted): such an id pools as zeros and gets no update.
	Resolve(ids []int64, rows []int64, train bool) error
}
