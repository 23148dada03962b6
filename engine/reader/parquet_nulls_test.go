package reader

import (
	"errors"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type nullListRow struct {
	Label float64  `parquet:"label"`
	Seq   []*int64 `parquet:"seq,list,optional"`
}

// A null or empty list is an empty bag; a null element inside a list is refused, naming the file, row,
// column and element (before session 37 it was dropped without a word, shifting the elements after
// it), and skip_bad drops that row alone.
func TestParquetNullListElements(t *testing.T) {
	id := func(v int64) *int64 { return &v }
	rows := []nullListRow{
		{1, []*int64{id(1), id(2), id(3)}},
		{0, nil},
		{1, []*int64{}},
		{0, []*int64{id(4), nil, id(6)}},
		{1, []*int64{nil}},
		{0, []*int64{id(7)}},
	}
	path := saveFile(t, "nulls.parquet", writeGroups(t, [][]nullListRow{rows}))
	cols := []Column{{Name: "label", Role: RoleLabel}, {Name: "seq", Role: RoleSequence}}
	read := func(skip bool) ([]int64, []int64, int64, error) {
		src, err := NewParquet([]string{path}, ParquetOptions{Columns: cols, Options: Options{SkipBad: skip}})
		require.NoError(t, err)
		defer src.Close()
		var b Batch
		_, err = src.Read(&b, 16)
		return b.Inputs[0].Ints, b.Inputs[0].Lengths, src.Position().Skipped, err
	}
	_, _, _, err := read(false)
	require.Error(t, err)
	assert.True(t, errors.Is(err, errs.ErrInvalid), err.Error())
	assert.Contains(t, err.Error(), "nulls.parquet row 3 column 2 (seq): element 2 of the list is null")

	ids, lens, skipped, err := read(true)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 2, 3, 7}, ids)
	assert.Equal(t, []int64{3, 0, 0, 1}, lens)
	assert.Equal(t, int64(2), skipped)
}
