package dynamic

// CheckRoom reports, changing nothing, whether a training Resolve of ids would fail for want of rows
// (the CapacityError Resolve returns before it changes anything). A sharded collection's owner asks
// it before its peers resolve their shards, so that a step one shard cannot hold is refused on every
// rank (engine/shard/room.go) instead of on the owner alone, mid-exchange.
func (t *Table) CheckRoom(ids []int64) error {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return t.closedErr()
	}
	err := t.checkRoom(ids)
	if t.cfg.ManualStep { // checkRoom counted the IDs as this step's; the Resolve that follows counts them
		t.stepIDs.Add(-int64(len(ids)))
	}
	return err
}

// MayOverflow reports whether a training Resolve of n distinct IDs could fail for want of rows (when
// it cannot, CheckRoom returns nil without looking): only when n exceeds the row bound, or on a
// manual-step table, whose earlier calls in the step hold rows too. It depends only on n and the
// config.
func (t *Table) MayOverflow(n int64) bool {
	return t.cfg.ManualStep || n > int64(t.cfg.MaxRows)
}
