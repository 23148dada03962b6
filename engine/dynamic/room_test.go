package dynamic

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// TestCheckRoomChangesNothing: CheckRoom refuses what Resolve would refuse for want of rows and
// changes nothing either way (no row, sighting or clock tick; a manual-step table's count of the
// step's IDs stays for the Resolve that follows).
func TestCheckRoomChangesNothing(t *testing.T) {
	for _, manual := range []bool{false, true} {
		tb, err := New(Config{MaxRows: 3, Dim: 2, MinCount: 1, ManualStep: manual})
		require.NoError(t, err)
		require.NoError(t, tb.CheckRoom([]int64{1, 2, 3}))
		require.ErrorIs(t, tb.CheckRoom([]int64{1, 2, 3, 4}), errs.ErrCapacity)
		st, err := tb.Stats()
		require.NoError(t, err)
		require.Zero(t, st.Rows)
		require.Zero(t, tb.Step())
		for range 3 { // the checks left no IDs counted: three more fit the step
			require.NoError(t, tb.CheckRoom([]int64{1, 2}))
		}
		require.Zero(t, tb.stepIDs.Load())
		rows := make([]int64, 2)
		require.NoError(t, tb.Resolve([]int64{1, 2}, rows, true))
		require.NoError(t, tb.CheckRoom([]int64{1}), "manual=%v", manual)
		require.Equal(t, manual, tb.CheckRoom([]int64{3, 4}) != nil, "manual=%v: rows 1 and 2 are this step's only without a tick", manual)
		require.NoError(t, tb.Close())
	}
}
